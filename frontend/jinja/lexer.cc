#include "frontend/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/jinja/parser.h"  // LocationOf

namespace vllm::frontend::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// One pass over the source; Run() returns the tokens (see Lex in lexer.h).
class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  absl::StatusOr<std::vector<Token>> Run() {
    // keep_trailing_newline=False drops one trailing newline of the source.
    if (src_.ends_with("\n")) src_.remove_suffix(1);
    bool strip_next = false;    // a "-" closed the previous tag
    bool trim_newline = false;  // trim_blocks after a block or comment tag
    while (pos_ < src_.size()) {
      const size_t open = FindTagOpen(pos_);
      std::string text(src_.substr(pos_, open - pos_));
      const size_t text_start = pos_;
      if (strip_next) {
        size_t i = 0;
        while (i < text.size() && IsSpace(text[i])) ++i;
        text.erase(0, i);
      } else if (trim_newline && text.starts_with("\n")) {
        text.erase(0, 1);
      } else if (trim_newline && text.starts_with("\r\n")) {
        text.erase(0, 2);
      }
      strip_next = trim_newline = false;
      if (open == src_.size()) {
        Emit(Tok::kText, std::move(text), text_start);
        break;
      }
      const char kind = src_[open + 1];
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (kind != '{' && modifier != '+') {
        LstripBlock(&text, text_start);
      }
      Emit(Tok::kText, std::move(text), text_start);
      pos_ = open + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      absl::StatusOr<bool> dash = kind == '#' ? SkipComment(open) : LexTag(kind, open);
      if (!dash.ok()) return dash.status();
      strip_next = *dash;
      trim_newline = kind != '{';
    }
    tokens_.push_back(Token{Tok::kEnd, "", src_.size()});
    return std::move(tokens_);
  }

 private:
  size_t FindTagOpen(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  // lstrip_blocks: spaces and tabs from the start of the line up to a block tag go.
  void LstripBlock(std::string* text, size_t text_start) const {
    const size_t nl = text->rfind('\n');
    const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    const bool at_line_start =
        nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
    if (!at_line_start) return;
    for (size_t i = line_start; i < text->size(); ++i) {
      if ((*text)[i] != ' ' && (*text)[i] != '\t') return;
    }
    text->resize(line_start);
  }

  void Emit(Tok type, std::string text, size_t offset) {
    if (type == Tok::kText && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), offset});
  }

  absl::Status Error(size_t offset, const std::string& what) const;

  // Returns whether the comment closed with "-#}".
  absl::StatusOr<bool> SkipComment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string_view::npos) return Error(open, "unterminated comment");
    pos_ = close + 2;
    return close > 0 && src_[close - 1] == '-';
  }

  // Lexes the inside of {{ }} or {% %}; returns whether it closed with "-}}" / "-%}".
  absl::StatusOr<bool> LexTag(char kind, size_t open) {
    const char close_char = kind == '{' ? '}' : '%';
    Emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", open);
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return Error(open, "unterminated tag");
      const char c = src_[pos_];
      const bool dash = c == '-' && pos_ + 2 < src_.size() && src_[pos_ + 1] == close_char &&
                        src_[pos_ + 2] == '}';
      if (dash || (c == close_char && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}')) {
        Emit(kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", pos_);
        pos_ += dash ? 3 : 2;
        return dash;
      }
      absl::Status s = LexOne();
      if (!s.ok()) return s;
    }
  }

  absl::Status LexOne() {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
      Emit(Tok::kName, std::string(src_.substr(start, pos_ - start)), start);
      return absl::OkStatus();
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      bool is_float = false;
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
      if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
          std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
        is_float = true;
        ++pos_;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      }
      std::string digits;
      for (char d : src_.substr(start, pos_ - start)) {
        if (d != '_') digits.push_back(d);
      }
      Emit(is_float ? Tok::kFloat : Tok::kInt, digits, start);
      return absl::OkStatus();
    }
    if (c == '\'' || c == '"') return LexString(c);
    static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "//", "**"};
    for (std::string_view op : kTwo) {
      if (src_.substr(pos_).starts_with(op)) {
        Emit(Tok::kOp, std::string(op), start);
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    if (std::string_view("()[]{},.:|~+-*/%<>=").find(c) != std::string_view::npos) {
      Emit(Tok::kOp, std::string(1, c), start);
      ++pos_;
      return absl::OkStatus();
    }
    return Error(start, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status LexString(char quote) {
    const size_t start = pos_++;
    std::string out;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      if (c == '\\' && pos_ < src_.size()) {
        const char e = src_[pos_++];
        switch (e) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case '\\':
          case '\'':
          case '"':
            c = e;
            break;
          default:
            out.push_back('\\');
            c = e;  // Python keeps unknown escapes
        }
      }
      out.push_back(c);
    }
    if (pos_ >= src_.size()) return Error(start, "unterminated string");
    ++pos_;
    Emit(Tok::kString, std::move(out), start);
    return absl::OkStatus();
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

absl::Status Lexer::Error(size_t offset, const std::string& what) const {
  return LocatedError(src_, offset, what);
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view src) { return Lexer(src).Run(); }

absl::Status LocatedError(std::string_view src, size_t offset, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template: ", LocationOf(src, offset), ": ", what));
}

}  // namespace vllm::frontend::jinja
