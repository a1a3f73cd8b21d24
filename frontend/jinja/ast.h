// Syntax tree of the chat-template Jinja subset (frontend/jinja/chat_template.h), produced by
// parser.h and walked by chat_template.cc.
// Internal to frontend/jinja/ (its API is chat_template.h): tools/lint/check_layering.py
// refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_JINJA_AST_H_
#define VLLM_FRONTEND_JINJA_AST_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frontend/jinja/value.h"

namespace vllm::frontend::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// An expression. Which fields are used depends on `kind` (listed beside each kind).
struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kAttr,       // a.name
    kItem,       // a[b]
    kSlice,      // a[b:c] or a[b:c:args[0]] (b, c may be null; args empty: no step)
    kCall,       // a(args, kwargs)
    kFilter,     // a | name(args)
    kTest,       // a is [not] name(args); negate
    kNot,        // not a
    kNeg,        // -a
    kBinary,     // a op b (name holds the operator: + - * / // % ~ == != < > <= >= in "not in"
                 // and or)
    kCondition,  // a if b else c (c may be null)
    kList,       // [args...]
    kDict,       // {kwargs...} (keys are expressions in args, values in kwargs' exprs)
  };
  Kind kind;
  size_t offset = 0;  // byte offset in the template source, for error messages
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negate = false;
  // Levels of the tree under and including this node (a leaf is 1). The parser keeps it at
  // most 128, so evaluating (and destroying) an expression recurses a bounded number of times
  // even for left-deep chains such as x|f|f|f... or a + a + a + ...
  int height = 1;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

// A statement or text run.
struct Node {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // branches (cond, body)...; else_body
    kFor,     // for targets in expr: body; else_body
    kSet,     // set targets[0] (or targets[0].attr when attr non-empty) = expr
  };
  Kind kind;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
};

}  // namespace vllm::frontend::jinja

#endif  // VLLM_FRONTEND_JINJA_AST_H_
