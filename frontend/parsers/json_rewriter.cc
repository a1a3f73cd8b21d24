#include "frontend/parsers/json_rewriter.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "base/python_repr.h"
#include "base/utf8.h"
#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_parser.h"

namespace vllm::frontend::parsers {
namespace {

// Python refuses to convert integers of more digits than this (sys.int_info's default
// str_digits_check_threshold), so json.loads fails on them.
constexpr size_t kMaxNumberChars = 4300;

constexpr std::string_view kLiterals[] = {"true", "false", "null", "NaN", "Infinity", "-Infinity"};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendEscapedUnit(uint32_t unit, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  *out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(unit >> shift) & 0xF]);
}

// The JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(std::string_view s, bool* is_integer) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size() || !IsDigit(s[i])) return false;
  if (s[i] == '0') {
    ++i;
  } else {
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  *is_integer = true;
  if (i < s.size() && s[i] == '.') {
    *is_integer = false;
    ++i;
    if (i >= s.size() || !IsDigit(s[i])) return false;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    *is_integer = false;
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= s.size() || !IsDigit(s[i])) return false;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  return i == s.size();
}

}  // namespace

void AppendJsonStringChar(uint32_t cp, std::string* out) {
  switch (cp) {
    case '"':
      *out += "\\\"";
      return;
    case '\\':
      *out += "\\\\";
      return;
    case '\b':
      *out += "\\b";
      return;
    case '\f':
      *out += "\\f";
      return;
    case '\n':
      *out += "\\n";
      return;
    case '\r':
      *out += "\\r";
      return;
    case '\t':
      *out += "\\t";
      return;
    default:
      break;
  }
  if (cp < 0x20 || (cp >= 0xD800 && cp <= 0xDFFF)) {
    AppendEscapedUnit(cp, out);
  } else {
    base::AppendUtf8(cp, out);
  }
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x80) {
      AppendJsonStringChar(byte, out);
    } else {
      out->push_back(c);  // UTF-8 passes through
    }
  }
  out->push_back('"');
}

bool CanonicalInteger(std::string_view digits, std::string* out) {
  const bool negative = !digits.empty() && digits[0] == '-';
  std::string_view body = negative ? digits.substr(1) : digits;
  if (body.empty()) return false;
  for (char c : body) {
    if (!IsDigit(c)) return false;
  }
  while (body.size() > 1 && body[0] == '0') body.remove_prefix(1);
  if (negative && body != "0") out->push_back('-');
  out->append(body);
  return true;
}

bool CanonicalFloat(std::string_view text, std::string* out) {
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, value, std::chars_format::general);
  if (ptr != last) return false;
  if (ec == std::errc::result_out_of_range) {
    // Python's float() overflows to infinity and underflows to zero.
    const size_t e = text.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < text.size() && text[e + 1] == '-';
    const bool negative = !text.empty() && text[0] == '-';
    value = tiny ? (negative ? -0.0 : 0.0)
                 : (negative ? -std::numeric_limits<double>::infinity()
                             : std::numeric_limits<double>::infinity());
  } else if (ec != std::errc()) {
    return false;
  }
  if (std::isinf(value)) {
    *out += value > 0 ? "Infinity" : "-Infinity";
  } else if (std::isnan(value)) {
    *out += "NaN";
  } else {
    *out += base::PythonFloatRepr(value);
  }
  return true;
}

size_t JsonRewriter::Feed(std::string_view in, std::string* out) {
  size_t i = 0;
  while (i < in.size() && state_ == State::kInProgress) {
    if (Step(in[i], out)) ++i;
  }
  return i;
}

void JsonRewriter::Finish(std::string* out) {
  if (state_ != State::kInProgress) return;
  if (mode_ == Mode::kNumber && stack_.empty()) {
    if (EndNumber(out)) AfterValue();
    return;
  }
  Fail();
}

bool JsonRewriter::Step(char c, std::string* out) {
  switch (mode_) {
    case Mode::kValue:
      return StepValue(c, out);
    case Mode::kObjectFirst:
    case Mode::kKey:
      if (IsJsonSpace(c)) return true;
      if (c == '}' && mode_ == Mode::kObjectFirst) {
        Close('{', out);
      } else if (c == '"') {
        out->push_back('"');
        in_key_ = true;
        mode_ = Mode::kString;
      } else {
        Fail();
        return false;
      }
      return true;
    case Mode::kArrayFirst:
      if (IsJsonSpace(c)) return true;
      if (c == ']') {
        Close('[', out);
        return true;
      }
      mode_ = Mode::kValue;
      return false;
    case Mode::kColon:
      if (IsJsonSpace(c)) return true;
      if (c != ':') {
        Fail();
        return false;
      }
      *out += ": ";
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue:
      if (IsJsonSpace(c)) return true;
      if (c == ',') {
        *out += ", ";
        mode_ = stack_.back() == '{' ? Mode::kKey : Mode::kValue;
      } else if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        Close(stack_.back(), out);
      } else {
        Fail();
        return false;
      }
      return true;
    case Mode::kString:
      return StepString(c, out);
    case Mode::kEscape:
      return StepEscape(c, out);
    case Mode::kUnicode:
      StepUnicode(c, out);
      return state_ == State::kInProgress;
    case Mode::kNumber:
      if (IsDigit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        if (token_.size() >= kMaxNumberChars) {
          Fail();
          return false;
        }
        token_.push_back(c);
        return true;
      }
      if (token_ == "-" && c == 'I') {  // -Infinity
        mode_ = Mode::kLiteral;
        return StepLiteral(c, out);
      }
      if (EndNumber(out)) AfterValue();
      return false;
    case Mode::kLiteral:
      return StepLiteral(c, out);
  }
  return true;
}

bool JsonRewriter::StepValue(char c, std::string* out) {
  if (IsJsonSpace(c)) return true;
  const bool top = stack_.empty();
  started_ = true;
  if (c == '{' || c == '[') {
    Open(c, out);
  } else if (c == '"') {
    out->push_back('"');
    in_key_ = false;
    top_is_string_ = top;
    mode_ = Mode::kString;
  } else if (c == '-' || IsDigit(c)) {
    token_.assign(1, c);
    mode_ = Mode::kNumber;
  } else if (c == 't' || c == 'f' || c == 'n' || c == 'N' || c == 'I') {
    token_.clear();
    mode_ = Mode::kLiteral;
    return StepLiteral(c, out);
  } else {
    Fail();
    return false;
  }
  return true;
}

bool JsonRewriter::StepString(char c, std::string* out) {
  const auto byte = static_cast<unsigned char>(c);
  if (c != '\\') FlushHighSurrogate(out);
  if (c == '"') {
    out->push_back('"');
    if (in_key_) {
      in_key_ = false;
      mode_ = Mode::kColon;
    } else {
      AfterValue();
    }
  } else if (c == '\\') {
    mode_ = Mode::kEscape;
  } else if (byte < 0x20) {
    Fail();  // json.loads (strict) refuses raw control characters in strings
    return false;
  } else {
    out->push_back(c);
    if (top_is_string_) decoded_.push_back(c);
  }
  return true;
}

bool JsonRewriter::StepEscape(char c, std::string* out) {
  if (c == 'u') {
    unicode_ = 0;
    unicode_digits_ = 0;
    mode_ = Mode::kUnicode;
    return true;
  }
  FlushHighSurrogate(out);
  uint32_t cp = 0;
  switch (c) {
    case '"':
    case '\\':
    case '/':
      cp = static_cast<uint32_t>(c);
      break;
    case 'b':
      cp = '\b';
      break;
    case 'f':
      cp = '\f';
      break;
    case 'n':
      cp = '\n';
      break;
    case 'r':
      cp = '\r';
      break;
    case 't':
      cp = '\t';
      break;
    default:
      Fail();
      return false;
  }
  EmitCodePoint(cp, out);
  mode_ = Mode::kString;
  return true;
}

void JsonRewriter::StepUnicode(char c, std::string* out) {
  const int digit = HexValue(c);
  if (digit < 0) {
    Fail();
    return;
  }
  unicode_ = (unicode_ << 4) | static_cast<uint32_t>(digit);
  if (++unicode_digits_ < 4) return;
  mode_ = Mode::kString;
  const uint32_t unit = unicode_;
  if (high_surrogate_ != 0) {
    if (unit >= 0xDC00 && unit <= 0xDFFF) {
      EmitCodePoint(0x10000 + ((high_surrogate_ - 0xD800) << 10) + (unit - 0xDC00), out);
      high_surrogate_ = 0;
      return;
    }
    FlushHighSurrogate(out);
  }
  if (unit >= 0xD800 && unit <= 0xDBFF) {
    high_surrogate_ = unit;  // held until the next escape says whether it pairs
  } else {
    EmitCodePoint(unit, out);
  }
}

void JsonRewriter::EmitCodePoint(uint32_t cp, std::string* out) {
  AppendJsonStringChar(cp, out);
  if (top_is_string_ && !(cp >= 0xD800 && cp <= 0xDFFF)) base::AppendUtf8(cp, &decoded_);
}

void JsonRewriter::FlushHighSurrogate(std::string* out) {
  if (high_surrogate_ == 0) return;
  EmitCodePoint(high_surrogate_, out);
  high_surrogate_ = 0;
}

bool JsonRewriter::EndNumber(std::string* out) {
  bool is_integer = false;
  if (!IsJsonNumber(token_, &is_integer) ||
      !(is_integer ? CanonicalInteger(token_, out) : CanonicalFloat(token_, out))) {
    Fail();
    return false;
  }
  return true;
}

bool JsonRewriter::StepLiteral(char c, std::string* out) {
  token_.push_back(c);
  bool prefix = false;
  for (std::string_view literal : kLiterals) {
    if (literal == token_) {
      *out += token_;
      AfterValue();
      return true;
    }
    prefix = prefix || literal.starts_with(token_);
  }
  if (!prefix) {
    Fail();
    return false;
  }
  return true;
}

void JsonRewriter::Open(char bracket, std::string* out) {
  if (static_cast<int>(stack_.size()) >= kMaxJsonNesting) {
    Fail();
    return;
  }
  stack_.push_back(bracket);
  out->push_back(bracket);
  mode_ = bracket == '{' ? Mode::kObjectFirst : Mode::kArrayFirst;
}

void JsonRewriter::Close(char bracket, std::string* out) {
  stack_.pop_back();
  out->push_back(bracket == '{' ? '}' : ']');
  AfterValue();
}

void JsonRewriter::AfterValue() {
  if (stack_.empty()) {
    state_ = State::kDone;
  } else {
    mode_ = Mode::kAfterValue;
  }
}

}  // namespace vllm::frontend::parsers
