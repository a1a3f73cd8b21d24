// ExtractRoutingKeys without building a JSON document: one pass over the body that reads the
// top-level "prompt", "messages" and "user" values and only checks the rest is well-formed.
// nlohmann's parser builds a DOM at ~130 MB/s (1 ms for a 131 KB prompt, most of the router's
// time on such a request); this scanner runs at memory speed and allocates only the routing
// text. Semantics are nlohmann's (tests/fuzz/router_request_fuzzer.cc checks them against a
// DOM walk on every input the DOM parser accepts); it is looser only where the worker decides
// anyway (numbers outside a double's range).
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/json_util.h"
#include "base/utf8.h"
#include "router/router.h"

namespace vllm::router {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  bool AtEnd() {
    SkipWs();
    return p_ == s_.size();
  }

  // The next non-space character, or '\0' at the end.
  char Peek() {
    SkipWs();
    return p_ < s_.size() ? s_[p_] : '\0';
  }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++p_;
    return true;
  }

  // A string; its decoded text is appended to *out unless out is null. False when malformed
  // (as nlohmann: a raw control character, a bad escape, a lone surrogate).
  bool String(std::string* out) {
    if (!Consume('"')) return false;
    while (true) {
      const size_t start = p_;
      unsigned char high = 0;
      while (p_ < s_.size()) {
        const unsigned char c = static_cast<unsigned char>(s_[p_]);
        if (c == '"' || c == '\\' || c < 0x20) break;
        high |= c;
        ++p_;
      }
      // A run ends at an ASCII byte, so no UTF-8 sequence spans two runs.
      const std::string_view run = s_.substr(start, p_ - start);
      if ((high & 0x80) != 0 && !base::IsValidUtf8(run)) return false;
      if (out != nullptr) out->append(run);
      if (p_ >= s_.size()) return false;
      const char c = s_[p_++];
      if (c == '"') return true;
      if (c != '\\') return false;  // a raw control character
      if (p_ >= s_.size()) return false;
      const char e = s_[p_++];
      char plain = 0;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          plain = e;
          break;
        case 'b':
          plain = '\b';
          break;
        case 'f':
          plain = '\f';
          break;
        case 'n':
          plain = '\n';
          break;
        case 'r':
          plain = '\r';
          break;
        case 't':
          plain = '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a lone low surrogate
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (p_ + 2 > s_.size() || s_[p_] != '\\' || s_[p_ + 1] != 'u') return false;
            p_ += 2;
            if (!Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          if (out != nullptr) base::AppendUtf8(cp, out);
          continue;
        }
        default:
          return false;
      }
      if (out != nullptr) out->push_back(plain);
    }
  }

  // A number. *integer: it has no fraction or exponent and fits nlohmann's integer types
  // (int64, or uint64 when positive); then *value is it as int64 (uint64 wraps, as
  // nlohmann's get<int64_t> does).
  bool Number(bool* integer, int64_t* value) {
    SkipWs();
    const size_t start = p_;
    const bool negative = p_ < s_.size() && s_[p_] == '-';
    if (negative) ++p_;
    if (p_ >= s_.size() || !IsDigit(s_[p_])) return false;
    if (s_[p_] == '0') {
      ++p_;
    } else {
      while (p_ < s_.size() && IsDigit(s_[p_])) ++p_;
    }
    const size_t digits_end = p_;
    bool fraction = false;
    if (p_ < s_.size() && s_[p_] == '.') {
      ++p_;
      if (p_ >= s_.size() || !IsDigit(s_[p_])) return false;
      while (p_ < s_.size() && IsDigit(s_[p_])) ++p_;
      fraction = true;
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      ++p_;
      if (p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      if (p_ >= s_.size() || !IsDigit(s_[p_])) return false;
      while (p_ < s_.size() && IsDigit(s_[p_])) ++p_;
      fraction = true;
    }
    *integer = false;
    if (fraction) return true;
    // The magnitude, if it fits 64 bits.
    uint64_t magnitude = 0;
    for (size_t i = start + (negative ? 1 : 0); i < digits_end; ++i) {
      const uint64_t d = static_cast<uint64_t>(s_[i] - '0');
      if (magnitude > (UINT64_MAX - d) / 10) return true;  // too large: a float to nlohmann
      magnitude = magnitude * 10 + d;
    }
    if (negative) {
      if (magnitude > uint64_t{1} << 63) return true;
      *value = static_cast<int64_t>(0 - magnitude);
    } else {
      *value = static_cast<int64_t>(magnitude);
    }
    *integer = true;
    return true;
  }

  // Any value, checked and skipped. `depth`: the nesting of arrays and objects around it.
  bool Skip(int depth) {
    switch (Peek()) {
      case '"':
        return String(nullptr);
      case '[':
        return Array(depth, [this](int d) { return Skip(d); });
      case '{':
        return Object(depth, [this](std::string_view, int d) { return Skip(d); });
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default: {
        bool integer = false;
        int64_t v = 0;
        return Number(&integer, &v);
      }
    }
  }

  // An array; `element(depth)` reads each element (the array's depth + 1).
  template <typename F>
  bool Array(int depth, F&& element) {
    if (depth + 1 > base::kMaxJsonDepth || !Consume('[')) return false;
    if (Consume(']')) return true;
    while (true) {
      if (!element(depth + 1)) return false;
      if (Consume(']')) return true;
      if (!Consume(',')) return false;
    }
  }

  // An object; `member(key, depth)` reads each member's value. Keys are compared raw when they
  // hold no escape, decoded otherwise.
  template <typename F>
  bool Object(int depth, F&& member) {
    if (depth + 1 > base::kMaxJsonDepth || !Consume('{')) return false;
    if (Consume('}')) return true;
    std::string key;
    while (true) {
      key.clear();
      if (!String(&key) || !Consume(':')) return false;
      if (!member(std::string_view(key), depth + 1)) return false;
      if (Consume('}')) return true;
      if (!Consume(',')) return false;
    }
  }

 private:
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  void SkipWs() {
    while (p_ < s_.size() &&
           (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) {
      ++p_;
    }
  }

  bool Literal(std::string_view word) {
    SkipWs();
    if (s_.substr(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }

  bool Hex4(uint32_t* v) {
    if (p_ + 4 > s_.size()) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[p_++];
      uint32_t d = 0;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
      *v = *v * 16 + d;
    }
    return true;
  }

  std::string_view s_;
  size_t p_ = 0;
};

// The routing text of a "prompt" value, as the DOM walk it replaces: a string as is; an
// integer as "N,"; an array whose first element is a string or an array: that element only
// (a batch); any other array: each element in turn (token ids); anything else: nothing.
bool PromptText(Scanner& s, int depth, std::string* text) {
  const char c = s.Peek();
  if (c == '"') return s.String(text);
  if (c == '-' || (c >= '0' && c <= '9')) {
    bool integer = false;
    int64_t v = 0;
    if (!s.Number(&integer, &v)) return false;
    if (integer) absl::StrAppend(text, v, ",");
    return true;
  }
  if (c != '[') return s.Skip(depth);
  bool first = true;
  bool batch = false;
  return s.Array(depth, [&](int d) {
    if (first) {
      first = false;
      const char e = s.Peek();
      batch = e == '"' || e == '[';
      return PromptText(s, d, text);
    }
    return batch ? s.Skip(d) : PromptText(s, d, text);
  });
}

// A chat content part: the text of its "text" member when that is a string (the last one).
bool PartText(Scanner& s, int depth, std::string* text) {
  if (s.Peek() != '{') return s.Skip(depth);
  std::string part;
  bool has = false;
  if (!s.Object(depth, [&](std::string_view key, int d) {
        if (key != "text") return s.Skip(d);
        part.clear();
        has = s.Peek() == '"';
        return has ? s.String(&part) : s.Skip(d);
      })) {
    return false;
  }
  if (has) absl::StrAppend(text, part, "\n");
  return true;
}

// One message: "role\n" then its content's text ("text\n", or each text part's "text\n").
bool MessageText(Scanner& s, int depth, std::string* text) {
  if (s.Peek() != '{') return s.Skip(depth);
  std::string role;
  std::string content;
  bool has_role = false;
  if (!s.Object(depth, [&](std::string_view key, int d) {
        if (key == "role") {
          role.clear();
          has_role = s.Peek() == '"';
          return has_role ? s.String(&role) : s.Skip(d);
        }
        if (key != "content") return s.Skip(d);
        content.clear();
        const char c = s.Peek();
        if (c == '"') {
          if (!s.String(&content)) return false;
          content += "\n";
          return true;
        }
        if (c == '[') return s.Array(d, [&](int e) { return PartText(s, e, &content); });
        return s.Skip(d);
      })) {
    return false;
  }
  if (has_role) absl::StrAppend(text, role, "\n");
  *text += content;
  return true;
}

}  // namespace

bool ExtractRoutingKeys(const std::string& body, std::string* text, std::string* user) {
  text->clear();
  user->clear();
  Scanner s(body);
  if (s.Peek() != '{') return false;
  std::string prompt;
  std::string messages;
  const bool ok = s.Object(0, [&](std::string_view key, int depth) {
    if (key == "user") {
      user->clear();
      return s.Peek() == '"' ? s.String(user) : s.Skip(depth);
    }
    if (key == "prompt") {
      prompt.clear();
      return PromptText(s, depth, &prompt);
    }
    if (key == "messages") {
      messages.clear();
      if (s.Peek() != '[') return s.Skip(depth);
      return s.Array(depth, [&](int d) { return MessageText(s, d, &messages); });
    }
    return s.Skip(depth);
  });
  if (!ok || !s.AtEnd()) {
    text->clear();
    user->clear();
    return false;
  }
  *text = std::move(prompt);
  *text += messages;
  return true;
}

}  // namespace vllm::router
