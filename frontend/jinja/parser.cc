#include "frontend/jinja/parser.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "frontend/jinja/lexer.h"

namespace vllm::frontend::jinja {
namespace {

constexpr int kMaxDepth = 128;

// Recursive-descent parser over the token stream, Jinja's precedence from loosest:
// conditional, or, and, not, comparisons/in, + -, ~, * / // %, unary -, postfix
// (. [] ()), filters and tests.
class Parser {
 public:
  Parser(std::string_view src, std::vector<Token> tokens) : src_(src), toks_(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string end_tag;
    absl::Status s = ParseBody(&body, {}, &end_tag);
    if (!s.ok()) return s;
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return toks_[std::min(i_ + ahead, toks_.size() - 1)];
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kName && Peek(ahead).text == name;
  }
  absl::Status Error(const std::string& what) const {
    return LocatedError(src_, Peek().offset, what);
  }
  absl::Status Expect(Tok type, const char* text, const char* what) {
    if (Peek().type != type || (text != nullptr && Peek().text != text)) {
      return Error(absl::StrCat("expected ", what));
    }
    ++i_;
    return absl::OkStatus();
  }
  // Records the height of `e` from its children's; an error beyond kMaxDepth. Called on every
  // node that has children, once they are attached: chains built in loops (binary operators,
  // postfixes, filters) nest without recursing in the parser, so depth_ alone does not bound
  // them.
  absl::Status SetHeight(Expr& e) const {
    int below = 0;
    for (const ExprPtr* child : {&e.a, &e.b, &e.c}) {
      if (*child != nullptr) below = std::max(below, (*child)->height);
    }
    for (const ExprPtr& x : e.args) below = std::max(below, x->height);
    for (const auto& [key, x] : e.kwargs) below = std::max(below, x->height);
    e.height = below + 1;
    if (e.height > kMaxDepth) return Error("expression nested too deeply");
    return absl::OkStatus();
  }
  ExprPtr NewExpr(Expr::Kind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // Parses nodes until a block tag whose keyword is in `ends` (left unconsumed, its keyword
  // in *end_tag) or the end of the template (only when `ends` is empty).
  absl::Status ParseBody(Body* body, const std::vector<std::string>& ends, std::string* end_tag) {
    if (++depth_ > kMaxDepth) return Error("blocks nested too deeply");
    while (true) {
      const Token& t = Peek();
      if (t.type == Tok::kEnd) {
        --depth_;
        if (ends.empty()) return absl::OkStatus();
        return Error(absl::StrCat("missing {% ", ends.back(), " %}"));
      }
      if (t.type == Tok::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->text = t.text;
        body->push_back(std::move(n));
        ++i_;
        continue;
      }
      if (t.type == Tok::kVarBegin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        absl::StatusOr<ExprPtr> e = ParseExpression();
        if (!e.ok()) return e.status();
        n->expr = *std::move(e);
        absl::Status s = Expect(Tok::kVarEnd, nullptr, "'}}'");
        if (!s.ok()) return s;
        body->push_back(std::move(n));
        continue;
      }
      // A block tag.
      if (Peek(1).type != Tok::kName) {
        ++i_;
        return Error("expected a statement keyword");
      }
      const std::string keyword = Peek(1).text;
      for (const std::string& e : ends) {
        if (keyword == e) {
          *end_tag = keyword;
          --depth_;
          return absl::OkStatus();
        }
      }
      i_ += 2;
      absl::Status s;
      if (keyword == "if") {
        s = ParseIf(body);
      } else if (keyword == "for") {
        s = ParseFor(body);
      } else if (keyword == "set") {
        s = ParseSet(body);
      } else {
        --i_;
        return Error(absl::StrCat("unsupported statement '", keyword, "'"));
      }
      if (!s.ok()) return s;
    }
  }

  absl::Status ParseIf(Body* body) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kIf;
    while (true) {
      absl::StatusOr<ExprPtr> cond = ParseExpression();
      if (!cond.ok()) return cond.status();
      absl::Status s = Expect(Tok::kBlockEnd, nullptr, "'%}'");
      if (!s.ok()) return s;
      Body branch;
      std::string end;
      s = ParseBody(&branch, {"elif", "else", "endif"}, &end);
      if (!s.ok()) return s;
      n->branches.emplace_back(*std::move(cond), std::move(branch));
      i_ += 2;  // {% keyword
      if (end == "elif") continue;
      if (end == "else") {
        s = Expect(Tok::kBlockEnd, nullptr, "'%}'");
        if (s.ok()) s = ParseBody(&n->else_body, {"endif"}, &end);
        if (!s.ok()) return s;
        i_ += 2;
      }
      break;
    }
    body->push_back(std::move(n));
    return Expect(Tok::kBlockEnd, nullptr, "'%}' after endif");
  }

  absl::Status ParseFor(Body* body) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kFor;
    do {
      if (Peek().type != Tok::kName) return Error("expected a loop variable");
      n->targets.push_back(Peek().text);
      ++i_;
    } while (IsOp(",") && ++i_);
    absl::Status s = Expect(Tok::kName, "in", "'in'");
    if (!s.ok()) return s;
    absl::StatusOr<ExprPtr> iter = ParseOr();  // not a conditional: 'if' would filter
    if (!iter.ok()) return iter.status();
    n->expr = *std::move(iter);
    if (IsName("if") || IsName("recursive"))
      return Error("loop filters and recursive loops are not supported");
    s = Expect(Tok::kBlockEnd, nullptr, "'%}'");
    std::string end;
    if (s.ok()) s = ParseBody(&n->body, {"else", "endfor"}, &end);
    if (!s.ok()) return s;
    i_ += 2;
    if (end == "else") {
      s = Expect(Tok::kBlockEnd, nullptr, "'%}'");
      if (s.ok()) s = ParseBody(&n->else_body, {"endfor"}, &end);
      if (!s.ok()) return s;
      i_ += 2;
    }
    body->push_back(std::move(n));
    return Expect(Tok::kBlockEnd, nullptr, "'%}' after endfor");
  }

  absl::Status ParseSet(Body* body) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Kind::kSet;
    if (Peek().type != Tok::kName) return Error("expected a variable name");
    n->targets.push_back(Peek().text);
    ++i_;
    if (IsOp(".")) {
      ++i_;
      if (Peek().type != Tok::kName) return Error("expected an attribute name");
      n->attr = Peek().text;
      ++i_;
    }
    if (!IsOp("=")) return Error("expected '=' (block set and tuple targets are not supported)");
    ++i_;
    absl::StatusOr<ExprPtr> e = ParseExpression();
    if (!e.ok()) return e.status();
    n->expr = *std::move(e);
    body->push_back(std::move(n));
    return Expect(Tok::kBlockEnd, nullptr, "'%}'");
  }

  using Result = absl::StatusOr<ExprPtr>;

  Result ParseExpression() {
    if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
    Result a = ParseOr();
    if (a.ok() && IsName("if")) {
      const size_t at = Peek().offset;
      ++i_;
      Result cond = ParseOr();
      if (!cond.ok()) return cond;
      auto e = NewExpr(Expr::Kind::kCondition, at);
      e->a = *std::move(a);
      e->b = *std::move(cond);
      if (IsName("else")) {
        ++i_;
        Result other = ParseExpression();
        if (!other.ok()) return other;
        e->c = *std::move(other);
      }
      if (absl::Status s = SetHeight(*e); !s.ok()) return s;
      a = std::move(e);
    }
    --depth_;
    return a;
  }

  Result Binary(Result left, std::string op, Result (Parser::*next)(), size_t at) {
    if (!left.ok()) return left;
    Result right = (this->*next)();
    if (!right.ok()) return right;
    auto e = NewExpr(Expr::Kind::kBinary, at);
    e->name = std::move(op);
    e->a = *std::move(left);
    e->b = *std::move(right);
    if (absl::Status s = SetHeight(*e); !s.ok()) return s;
    return e;
  }

  Result ParseOr() {
    Result a = ParseAnd();
    while (a.ok() && IsName("or")) {
      const size_t at = Peek().offset;
      ++i_;
      a = Binary(std::move(a), "or", &Parser::ParseAnd, at);
    }
    return a;
  }
  Result ParseAnd() {
    Result a = ParseNot();
    while (a.ok() && IsName("and")) {
      const size_t at = Peek().offset;
      ++i_;
      a = Binary(std::move(a), "and", &Parser::ParseNot, at);
    }
    return a;
  }
  Result ParseNot() {
    if (IsName("not")) {
      if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
      auto e = NewExpr(Expr::Kind::kNot, Peek().offset);
      ++i_;
      Result a = ParseNot();
      if (!a.ok()) return a;
      e->a = *std::move(a);
      if (absl::Status s = SetHeight(*e); !s.ok()) return s;
      --depth_;
      return e;
    }
    return ParseCompare();
  }
  Result ParseCompare() {
    Result a = ParseMath1();
    while (a.ok()) {
      const size_t at = Peek().offset;
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="}) {
        if (IsOp(o)) op = o;
      }
      if (op.empty() && IsName("in")) op = "in";
      if (op.empty() && IsName("not") && IsName("in", 1)) {
        op = "not in";
        ++i_;
      }
      if (op.empty()) break;
      ++i_;
      a = Binary(std::move(a), op, &Parser::ParseMath1, at);
    }
    return a;
  }
  Result ParseMath1() {
    Result a = ParseConcat();
    while (a.ok() && (IsOp("+") || IsOp("-"))) {
      const size_t at = Peek().offset;
      std::string op = Peek().text;
      ++i_;
      a = Binary(std::move(a), op, &Parser::ParseConcat, at);
    }
    return a;
  }
  Result ParseConcat() {
    Result a = ParseMath2();
    while (a.ok() && IsOp("~")) {
      const size_t at = Peek().offset;
      ++i_;
      a = Binary(std::move(a), "~", &Parser::ParseMath2, at);
    }
    return a;
  }
  Result ParseMath2() {
    Result a = ParseUnary();
    while (a.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      const size_t at = Peek().offset;
      std::string op = Peek().text;
      ++i_;
      a = Binary(std::move(a), op, &Parser::ParseUnary, at);
    }
    return a;
  }
  Result ParseUnary() {
    if (++depth_ > kMaxDepth) return Error("expression nested too deeply");
    Result a;
    if (IsOp("-") || IsOp("+")) {
      const bool neg = IsOp("-");
      auto e = NewExpr(Expr::Kind::kNeg, Peek().offset);
      ++i_;
      Result inner = ParseUnary();
      if (!inner.ok()) return inner;
      if (!neg) {
        a = std::move(inner);
      } else {
        e->a = *std::move(inner);
        if (absl::Status s = SetHeight(*e); !s.ok()) return s;
        a = std::move(e);
      }
    } else {
      a = ParsePrimary();
      if (a.ok()) a = ParsePostfix(*std::move(a));
      if (a.ok()) a = ParseFilters(*std::move(a));
    }
    --depth_;
    return a;
  }

  absl::Status ParseArgs(Expr* e, const char* close) {
    // Called after the opening bracket.
    while (!IsOp(close)) {
      if (Peek().type == Tok::kName && IsOp("=", 1) && std::string(close) == ")") {
        std::string key = Peek().text;
        i_ += 2;
        Result v = ParseExpression();
        if (!v.ok()) return v.status();
        e->kwargs.emplace_back(std::move(key), *std::move(v));
      } else {
        Result v = ParseExpression();
        if (!v.ok()) return v.status();
        e->args.push_back(*std::move(v));
      }
      if (IsOp(",")) {
        ++i_;
      } else if (!IsOp(close)) {
        return Error(absl::StrCat("expected ',' or '", close, "'"));
      }
    }
    ++i_;
    return absl::OkStatus();
  }

  Result ParsePrimary() {
    const Token& t = Peek();
    const size_t at = t.offset;
    if (t.type == Tok::kString) {
      std::string s;
      while (Peek().type == Tok::kString) s += toks_[i_++].text;  // adjacent literals join
      auto e = NewExpr(Expr::Kind::kLiteral, at);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto e = NewExpr(Expr::Kind::kLiteral, at);
      errno = 0;
      if (t.type == Tok::kInt) {
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) return Error("integer literal out of range");
        e->value = Value(static_cast<int64_t>(v));
      } else {
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
      }
      ++i_;
      return e;
    }
    if (t.type == Tok::kName) {
      auto e = NewExpr(Expr::Kind::kLiteral, at);
      if (t.text == "true" || t.text == "True") {
        e->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value(None{});
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      ++i_;
      return e;
    }
    if (IsOp("(")) {
      ++i_;
      Result e = ParseExpression();
      if (!e.ok()) return e;
      if (!IsOp(")")) return Error("expected ')' (tuples are not supported)");
      ++i_;
      return e;
    }
    if (IsOp("[")) {
      ++i_;
      auto e = NewExpr(Expr::Kind::kList, at);
      absl::Status s = ParseArgs(e.get(), "]");
      if (!s.ok()) return s;
      if (s = SetHeight(*e); !s.ok()) return s;
      return e;
    }
    if (IsOp("{")) {
      ++i_;
      auto e = NewExpr(Expr::Kind::kDict, at);
      while (!IsOp("}")) {
        Result k = ParseExpression();
        if (!k.ok()) return k;
        if (!IsOp(":")) return Error("expected ':'");
        ++i_;
        Result v = ParseExpression();
        if (!v.ok()) return v;
        e->args.push_back(*std::move(k));
        e->kwargs.emplace_back("", *std::move(v));
        if (IsOp(",")) {
          ++i_;
        } else if (!IsOp("}")) {
          return Error("expected ',' or '}'");
        }
      }
      ++i_;
      if (absl::Status s = SetHeight(*e); !s.ok()) return s;
      return e;
    }
    return Error(t.type == Tok::kEnd || t.type == Tok::kVarEnd || t.type == Tok::kBlockEnd
                     ? "expected an expression"
                     : absl::StrCat("unexpected '", t.text, "'"));
  }

  Result ParsePostfix(ExprPtr e) {
    while (true) {
      const size_t at = Peek().offset;
      if (IsOp(".")) {
        ++i_;
        if (Peek().type != Tok::kName && Peek().type != Tok::kInt)
          return Error("expected an attribute name");
        auto a = NewExpr(Expr::Kind::kAttr, at);
        a->name = Peek().text;
        ++i_;
        a->a = std::move(e);
        if (absl::Status s = SetHeight(*a); !s.ok()) return s;
        e = std::move(a);
      } else if (IsOp("[")) {
        ++i_;
        ExprPtr lo, hi;
        bool slice = false;
        if (!IsOp(":")) {
          Result x = ParseExpression();
          if (!x.ok()) return x;
          lo = *std::move(x);
        }
        ExprPtr step;
        if (IsOp(":")) {
          slice = true;
          ++i_;
          if (!IsOp("]") && !IsOp(":")) {
            Result x = ParseExpression();
            if (!x.ok()) return x;
            hi = *std::move(x);
          }
          if (IsOp(":")) {  // a[lo:hi:step]
            ++i_;
            if (!IsOp("]")) {
              Result x = ParseExpression();
              if (!x.ok()) return x;
              step = *std::move(x);
            }
          }
        }
        if (!IsOp("]")) return Error("expected ']'");
        ++i_;
        auto a = NewExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, at);
        if (!slice && lo == nullptr) return Error("empty subscript");
        a->a = std::move(e);
        a->b = std::move(lo);
        a->c = std::move(hi);
        if (step != nullptr) a->args.push_back(std::move(step));
        if (absl::Status s = SetHeight(*a); !s.ok()) return s;
        e = std::move(a);
      } else if (IsOp("(")) {
        ++i_;
        auto c = NewExpr(Expr::Kind::kCall, at);
        c->a = std::move(e);
        absl::Status s = ParseArgs(c.get(), ")");
        if (!s.ok()) return s;
        if (s = SetHeight(*c); !s.ok()) return s;
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  Result ParseFilters(ExprPtr e) {
    while (true) {
      const size_t at = Peek().offset;
      if (IsOp("|")) {
        ++i_;
        if (Peek().type != Tok::kName) return Error("expected a filter name");
        auto f = NewExpr(Expr::Kind::kFilter, at);
        f->name = Peek().text;
        ++i_;
        f->a = std::move(e);
        if (IsOp("(")) {
          ++i_;
          absl::Status s = ParseArgs(f.get(), ")");
          if (!s.ok()) return s;
        }
        if (absl::Status s = SetHeight(*f); !s.ok()) return s;
        e = std::move(f);
      } else if (IsName("is")) {
        ++i_;
        auto t = NewExpr(Expr::Kind::kTest, at);
        if (IsName("not")) {
          t->negate = true;
          ++i_;
        }
        if (Peek().type != Tok::kName) return Error("expected a test name");
        t->name = Peek().text;
        ++i_;
        if (IsOp("(")) {
          ++i_;
          absl::Status s = ParseArgs(t.get(), ")");
          if (!s.ok()) return s;
        }
        t->a = std::move(e);
        if (absl::Status s = SetHeight(*t); !s.ok()) return s;
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::string_view src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string LocationOf(std::string_view source, size_t offset) {
  int line = 1;
  int column = 1;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::StrCat("line ", line, ", column ", column);
}

absl::StatusOr<Body> ParseTemplate(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(source, *std::move(tokens)).Run();
}

}  // namespace vllm::frontend::jinja
