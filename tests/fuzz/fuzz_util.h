// Helpers shared by the libFuzzer targets in tests/fuzz/ (see README.md there).
#ifndef VLLM_TESTS_FUZZ_FUZZ_UTIL_H_
#define VLLM_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"

namespace vllm::fuzz {

// An invariant the target checks. On failure prints the condition and a message, then aborts,
// which libFuzzer records as a crash (with the input saved as an artifact).
#define FUZZ_CHECK(cond, msg)                                                               \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(msg).c_str());                                               \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits `input` at its first NUL byte: {before, after}. Without a NUL, {input, ""}. Targets
// that take two texts (a file and its companion, a template and message content) use it, so
// a seed that is one real file needs no framing. JSON and Jinja text never hold a raw NUL.
inline std::pair<std::string_view, std::string_view> SplitAtNul(std::string_view input) {
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return {input, {}};
  return {input.substr(0, nul), input.substr(nul + 1)};
}

// Whether `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
// Written independently of base/utf8.h so it can check that code.
inline bool IsWellFormedUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    const auto b1 = static_cast<uint8_t>(s[i + 1]);
    if (b1 < lo || b1 > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if (b < 0x80 || b > 0xBF) return false;
    }
    i += len;
  }
  return true;
}

// For a codec of plain values (T with ==; decode: bytes -> absl::StatusOr<T>; encode: T ->
// bytes): a failure is InvalidArgument, and whatever decodes re-encodes to bytes that decode
// to an equal value, whose encoding is the same bytes again.
template <typename T, typename Decode, typename Encode>
void CheckValueRoundTrip(std::string_view bytes, Decode decode, Encode encode, const char* what) {
  auto first = decode(bytes);
  if (!first.ok()) {
    FUZZ_CHECK(first.status().code() == absl::StatusCode::kInvalidArgument,
               std::string(what) + " failed with " + first.status().ToString());
    return;
  }
  const std::string encoded = encode(*first);
  auto second = decode(encoded);
  FUZZ_CHECK(second.ok(),
             std::string(what) + ": re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(static_cast<const T&>(*second) == static_cast<const T&>(*first),
             std::string(what) + ": value changed in a round trip");
  FUZZ_CHECK(encode(*second) == encoded, std::string(what) + ": re-encoding is not stable");
}

}  // namespace vllm::fuzz

#endif  // VLLM_TESTS_FUZZ_FUZZ_UTIL_H_
