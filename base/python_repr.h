// Python's text forms of floats, shared by the chat templates (frontend/jinja: `{{ 1.5 }}`,
// `tojson`) and the tool-call parsers (frontend/parsers: arguments as json.dumps writes them).
// Header-only, no dependencies beyond the standard library.
#ifndef VLLM_BASE_PYTHON_REPR_H_
#define VLLM_BASE_PYTHON_REPR_H_

#include <charconv>
#include <cmath>
#include <string>

namespace vllm::base {

// repr(float(d)) as Python writes it: the shortest digits that round-trip, always with ".0"
// or an exponent ("1.0", "0.1", "1e+16", "1e-07", "-0.0"); "nan", "inf", "-inf".
inline std::string PythonFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits and their decimal exponent, then Python's layout: fixed
  // notation when -4 <= exponent < 16, scientific (at least two exponent digits) otherwise.
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int mag = exponent < 0 ? -exponent : exponent;
    out += exponent < 0 ? "e-" : "e+";
    if (mag < 10) out += "0";
    out += std::to_string(mag);
    return out;
  }
  if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    return out;
  }
  const auto int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    out += digits + std::string(int_digits - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, int_digits) + "." + digits.substr(int_digits);
  }
  return out;
}

}  // namespace vllm::base

#endif  // VLLM_BASE_PYTHON_REPR_H_
