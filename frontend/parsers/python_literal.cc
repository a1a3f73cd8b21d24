#include "frontend/parsers/python_literal.h"

#include <charconv>

#include "frontend/parsers/json_rewriter.h"
#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_parser.h"

namespace vllm::frontend::parsers {
namespace {

// Longer number tokens are refused (Python's int() refuses over 4300 digits).
constexpr size_t kMaxNumberChars = 4400;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

// 0x / 0o / 0b integers (digits after the prefix, '_' allowed before each digit) within 64
// bits, written in decimal.
bool PrefixedInteger(std::string_view t, bool negative, std::string* out) {
  const char kind = static_cast<char>(t[1] | 0x20);
  const int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
  uint64_t value = 0;
  int digits = 0;
  for (size_t i = 2; i < t.size(); ++i) {
    if (t[i] == '_' && i + 1 < t.size() && t[i + 1] != '_') continue;
    const int d = DigitValue(t[i]);
    if (d >= base) return false;
    if (value > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return false;
    value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    ++digits;
  }
  if (digits == 0) return false;
  if (negative && value != 0) out->push_back('-');
  out->append(std::to_string(value));
  return true;
}

// A decimal int or float: '_' only between digits; no leading zeros on a nonzero integer.
bool DecimalNumber(std::string_view t, bool negative, std::string* out) {
  std::string plain = negative ? "-" : "";
  bool is_float = false;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= t.size() || !IsDigit(t[i - 1]) || !IsDigit(t[i + 1])) return false;
      continue;
    }
    if (c == '.' || c == 'e' || c == 'E') {
      is_float = true;
    } else if ((c == '+' || c == '-') && !(i > 0 && (t[i - 1] == 'e' || t[i - 1] == 'E'))) {
      return false;
    } else if (!IsDigit(c) && c != '+' && c != '-') {
      return false;  // j (complex), stray letters
    }
    plain.push_back(c);
  }
  if (is_float) return CanonicalFloat(plain, out);
  const std::string_view digits = std::string_view(plain).substr(negative ? 1 : 0);
  if (digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != digits.npos) {
    return false;  // 007 is a SyntaxError in Python 3
  }
  return CanonicalInteger(plain, out);
}

}  // namespace

size_t PythonLiteralRewriter::Feed(std::string_view in, std::string* out) {
  size_t i = 0;
  while (i < in.size() && state_ == State::kInProgress) {
    if (Step(in[i], out)) ++i;
  }
  return i;
}

void PythonLiteralRewriter::Finish(std::string* out) {
  if (state_ != State::kInProgress) return;
  if (!stack_.empty()) {
    Fail();
    return;
  }
  switch (mode_) {
    case Mode::kNumber:
      if (EndNumber(out)) AfterValue();
      return;
    case Mode::kName:
      StepName(' ', out);  // a separator ends the name
      if (state_ == State::kInProgress) Fail();
      return;
    case Mode::kQuotes:
      if (quotes_ != 2) break;
      [[fallthrough]];
    case Mode::kStringEnd:
      out->push_back('"');
      AfterValue();
      return;
    default:
      break;
  }
  Fail();
}

bool PythonLiteralRewriter::Step(char c, std::string* out) {
  switch (mode_) {
    case Mode::kValue:
      return StepValue(c, out);
    case Mode::kFirst:
    case Mode::kAfterComma:
    case Mode::kAfterValue:
    case Mode::kColon:
      return StepPunctuation(c, out);
    case Mode::kName:
      return StepName(c, out);
    case Mode::kNumber: {
      const char prev = token_.back();
      const bool sign_ok =
          (prev == 'e' || prev == 'E') && token_.find_first_of("xX") == token_.npos;
      if (IsNameChar(c) || c == '.' || ((c == '+' || c == '-') && sign_ok)) {
        if (token_.size() >= kMaxNumberChars) return Fail();
        token_.push_back(c);
        return true;
      }
      if (!EndNumber(out)) return false;
      AfterValue();
      return false;
    }
    case Mode::kQuotes:
      return StepQuotes(c);
    case Mode::kString:
      return StepString(c, out);
    case Mode::kEscape:
      return StepEscape(c, out);
    case Mode::kEscapeDigits:
      return StepEscapeDigits(c, out);
    case Mode::kRawEscape:
      EmitSourceByte(c, out);
      mode_ = Mode::kString;
      return true;
    case Mode::kStringEnd:
      if (IsAsciiSpace(c)) return true;
      if (c == '\'' || c == '"') {  // an adjacent piece: "a" "b" is "ab"
        continuing_ = true;
        return StepValue(c, out);
      }
      out->push_back('"');
      AfterValue();
      return false;
  }
  return false;
}

bool PythonLiteralRewriter::StepValue(char c, std::string* out) {
  if (IsAsciiSpace(c)) return true;
  const bool key = !stack_.empty() && stack_.back().key;
  if (c == '\'' || c == '"') {
    if (!continuing_) out->push_back('"');
    continuing_ = false;
    raw_ = false;
    quote_ = c;
    quotes_ = 1;
    mode_ = Mode::kQuotes;
    return true;
  }
  if (c == '[' || c == '{') {
    if (key || static_cast<int>(stack_.size()) >= kMaxJsonNesting) return Fail();
    stack_.push_back(Level{c});
    out->push_back(c);
    mode_ = Mode::kFirst;
    return true;
  }
  if (IsDigit(c) || c == '.' || c == '-') {
    token_.assign(1, c);
    mode_ = Mode::kNumber;
    return true;
  }
  if (IsNameStart(c)) {
    token_.assign(1, c);
    mode_ = Mode::kName;
    return true;
  }
  return Fail();  // tuples, sets, calls, operators, comments
}

bool PythonLiteralRewriter::StepPunctuation(char c, std::string* out) {
  if (IsAsciiSpace(c)) return true;
  const char close = stack_.back().bracket == '[' ? ']' : '}';
  switch (mode_) {
    case Mode::kColon:
      if (c != ':') return Fail();
      *out += ": ";
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue:
      if (c == ',') {
        mode_ = Mode::kAfterComma;
        return true;
      }
      break;
    default:  // kFirst, kAfterComma: an element, or the end ([1, 2,] is [1, 2])
      if (c != close) {
        BeginElement(out);
        return false;
      }
      break;
  }
  if (c != close) return Fail();
  out->push_back(close);
  stack_.pop_back();
  AfterValue();
  return true;
}

void PythonLiteralRewriter::BeginElement(std::string* out) {
  if (mode_ == Mode::kAfterComma) *out += ", ";
  if (stack_.back().bracket == '{') stack_.back().key = true;
  mode_ = Mode::kValue;
}

bool PythonLiteralRewriter::StepName(char c, std::string* out) {
  if (IsNameChar(c)) {
    if (token_.size() > 8) return Fail();  // no literal name is that long
    token_.push_back(c);
    return true;
  }
  if ((c == '\'' || c == '"') &&
      (token_ == "r" || token_ == "R" || token_ == "u" || token_ == "U")) {
    const bool raw = token_ == "r" || token_ == "R";
    StepValue(c, out);
    raw_ = raw;
    return true;
  }
  if (token_ == "True") {
    EmitScalar("true", out);
  } else if (token_ == "False") {
    EmitScalar("false", out);
  } else if (token_ == "None") {
    EmitScalar("null", out);
  } else {
    return Fail();  // a variable, or bytes / f-string prefixes
  }
  AfterValue();
  return false;
}

bool PythonLiteralRewriter::StepQuotes(char c) {
  if (c == quote_) {
    if (++quotes_ == 3) {
      triple_ = true;
      quotes_ = 0;
      mode_ = Mode::kString;
    }
    return true;
  }
  triple_ = false;
  mode_ = quotes_ == 2 ? Mode::kStringEnd : Mode::kString;  // '' is an empty string
  quotes_ = 0;
  return false;
}

bool PythonLiteralRewriter::StepString(char c, std::string* out) {
  if (c == quote_) {
    if (!triple_ || ++quotes_ == 3) {
      quotes_ = 0;
      mode_ = Mode::kStringEnd;
    }
    return true;
  }
  FlushQuotes(out);  // quotes inside a triple-quoted string that did not close it
  if (!triple_ && (c == '\n' || c == '\r')) return Fail();
  if (c == '\\') {
    if (raw_) *out += "\\\\";
    mode_ = raw_ ? Mode::kRawEscape : Mode::kEscape;
    return true;
  }
  EmitSourceByte(c, out);
  return true;
}

bool PythonLiteralRewriter::StepEscape(char c, std::string* out) {
  mode_ = Mode::kString;
  uint32_t cp = 0;
  switch (c) {
    case '\n':
      return true;  // a line continuation
    case '\\':
    case '\'':
    case '"':
      cp = static_cast<uint32_t>(c);
      break;
    case 'a':
      cp = 7;
      break;
    case 'b':
      cp = 8;
      break;
    case 'f':
      cp = 12;
      break;
    case 'n':
      cp = 10;
      break;
    case 'r':
      cp = 13;
      break;
    case 't':
      cp = 9;
      break;
    case 'v':
      cp = 11;
      break;
    case 'x':
    case 'u':
    case 'U':
      escape_kind_ = c;
      escape_digits_ = 0;
      escape_value_ = 0;
      mode_ = Mode::kEscapeDigits;
      return true;
    case 'N':
      return Fail();  // \N{name}: no Unicode name table here
    default:
      if (c >= '0' && c <= '7') {
        escape_kind_ = 'o';
        escape_digits_ = 1;
        escape_value_ = static_cast<uint32_t>(c - '0');
        mode_ = Mode::kEscapeDigits;
        return true;
      }
      // Python keeps an unknown escape as written.
      EmitSourceByte('\\', out);
      EmitSourceByte(c, out);
      return true;
  }
  EmitChar(cp, out);
  return true;
}

bool PythonLiteralRewriter::StepEscapeDigits(char c, std::string* out) {
  if (escape_kind_ == 'o') {
    if (c >= '0' && c <= '7' && escape_digits_ < 3) {
      escape_value_ = escape_value_ * 8 + static_cast<uint32_t>(c - '0');
      ++escape_digits_;
      return true;
    }
    EmitChar(escape_value_, out);
    mode_ = Mode::kString;
    return false;
  }
  const int d = DigitValue(c);
  if (d >= 16) return Fail();
  escape_value_ = escape_value_ * 16 + static_cast<uint32_t>(d);
  const int needed = escape_kind_ == 'x' ? 2 : escape_kind_ == 'u' ? 4 : 8;
  if (++escape_digits_ < needed) return true;
  if (escape_value_ > 0x10FFFF) return Fail();
  EmitChar(escape_value_, out);
  mode_ = Mode::kString;
  return true;
}

bool PythonLiteralRewriter::EndNumber(std::string* out) {
  const bool negative = token_[0] == '-';
  const std::string_view t = std::string_view(token_).substr(negative ? 1 : 0);
  std::string json;
  const bool prefixed = t.size() > 1 && t[0] == '0' &&
                        std::string_view("xXoObB").find(t[1]) != std::string_view::npos;
  if (t.empty() ||
      !(prefixed ? PrefixedInteger(t, negative, &json) : DecimalNumber(t, negative, &json))) {
    return Fail();
  }
  EmitScalar(json, out);
  return true;
}

void PythonLiteralRewriter::EmitScalar(std::string_view json, std::string* out) {
  const bool key = !stack_.empty() && stack_.back().key;
  if (key) out->push_back('"');
  out->append(json);
  if (key) out->push_back('"');
}

void PythonLiteralRewriter::EmitSourceByte(char c, std::string* out) {
  if (static_cast<unsigned char>(c) < 0x80) {
    AppendJsonStringChar(static_cast<unsigned char>(c), out);
  } else {
    out->push_back(c);  // a byte of the source's UTF-8 passes through
  }
}

void PythonLiteralRewriter::FlushQuotes(std::string* out) {
  for (; quotes_ > 0; --quotes_) EmitSourceByte(quote_, out);
}

void PythonLiteralRewriter::AfterValue() {
  if (stack_.empty()) {
    state_ = State::kDone;
    return;
  }
  Level& level = stack_.back();
  if (level.bracket == '{' && level.key) {
    level.key = false;
    mode_ = Mode::kColon;
  } else {
    mode_ = Mode::kAfterValue;
  }
}

}  // namespace vllm::frontend::parsers
