#include "frontend/jinja/chat_template.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "frontend/jinja/ast.h"
#include "frontend/jinja/builtins.h"
#include "frontend/jinja/parser.h"
#include "nlohmann/json.hpp"  // RenderJson's inputs

namespace vllm::frontend {
namespace {

using jinja::Body;
using jinja::Expr;
using jinja::List;
using jinja::Map;
using jinja::Node;
using jinja::Value;

// The defaults of ChatTemplate::Limits are in chat_template.h. Each loop iteration counts as
// kIterationCost evaluations.
constexpr int64_t kIterationCost = 4;

// Python's floor division and modulo (the sign follows the divisor).
int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t FloorMod(int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; }

// One render: variables, scopes and the output buffer.
class Renderer {
 public:
  Renderer(std::string_view source, Map globals, const ChatTemplate::Limits& limits)
      : source_(source), limits_(limits) {
    scopes_.emplace_back();
    for (auto& [k, v] : globals) scopes_.back()[k] = std::move(v);
  }

  absl::Status Run(const Body& body) { return Exec(body); }
  std::string TakeOutput() { return std::move(out_); }

 private:
  absl::Status Error(const Expr& e, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: ", jinja::LocationOf(source_, e.offset), ": ", what));
  }

  // Counts `units` of work (Limits::max_work); an error once the render has done too much.
  absl::Status Charge(const Expr& e, size_t units) {
    work_ += units;
    if (work_ > limits_.max_work) {
      return Error(e, absl::StrCat("the template does too much work (over ", limits_.max_work >> 20,
                                   " MiB of values)"));
    }
    return absl::OkStatus();
  }

  // Counts `n` evaluations (Limits::max_evaluations); an error past the budget.
  absl::Status Count(const Expr& e, int64_t n) {
    evaluations_ += n;
    if (evaluations_ > limits_.max_evaluations) {
      return Error(e, absl::StrCat("the template does too much work (over ",
                                   limits_.max_evaluations, " expression evaluations)"));
    }
    return absl::OkStatus();
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  absl::Status Emit(const std::string& s) {
    if (out_.size() + s.size() > limits_.max_output_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("chat template: output larger than ",
                                                     limits_.max_output_bytes >> 20, " MiB"));
    }
    out_ += s;
    return absl::OkStatus();
  }

  absl::Status Exec(const Body& body) {
    for (const auto& node : body) {
      absl::Status s = ExecNode(*node);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status ExecNode(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kText:
        return Emit(n.text);
      case Node::Kind::kOutput: {
        absl::StatusOr<Value> v = Eval(*n.expr);
        if (!v.ok()) return v.status();
        return Emit(v->ToString());
      }
      case Node::Kind::kIf:
        for (const auto& [cond, branch] : n.branches) {
          absl::StatusOr<Value> c = Eval(*cond);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return Exec(branch);
        }
        return Exec(n.else_body);
      case Node::Kind::kFor:
        return ExecFor(n);
      case Node::Kind::kSet: {
        absl::StatusOr<Value> v = Eval(*n.expr);
        if (!v.ok()) return v.status();
        if (n.attr.empty()) {
          scopes_.back()[n.targets[0]] = *std::move(v);
          return absl::OkStatus();
        }
        const Value target = Lookup(n.targets[0]);
        if (!target.is_namespace()) {
          return Error(*n.expr, absl::StrCat("'", n.targets[0], "' is not a namespace()"));
        }
        // Namespaces are the only mutable values: kept out of every container, no value can
        // contain itself.
        if (v->is_namespace()) return Error(*n.expr, "a namespace() cannot be stored in another");
        for (auto& [k, old] : target.mutable_map()) {
          if (k == n.attr) {
            old = *std::move(v);
            return absl::OkStatus();
          }
        }
        target.mutable_map().emplace_back(n.attr, *std::move(v));
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Node& n) {
    absl::StatusOr<Value> seq = Eval(*n.expr);
    if (!seq.ok()) return seq.status();
    // Iterate the shared list in place; dicts and strings become a list of keys / chars.
    Value iterable = *seq;
    if (seq->is_map()) {
      List keys;
      for (const auto& [k, unused] : seq->as_map()) keys.emplace_back(k);
      iterable = Value(std::move(keys));
    } else if (seq->is_string()) {
      absl::StatusOr<Value> chars = jinja::ApplyFilter("list", *seq, {}, {});
      if (!chars.ok()) return chars.status();
      iterable = *std::move(chars);
    } else if (seq->is_undefined()) {
      iterable = Value(List{});
    } else if (!seq->is_list()) {
      return Error(*n.expr, absl::StrCat("'", seq->TypeName(), "' is not iterable"));
    }
    const List& items = iterable.as_list();
    if (items.empty()) return Exec(n.else_body);
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      if (++iterations_ > limits_.max_iterations) {
        return Error(*n.expr,
                     absl::StrCat("more than ", limits_.max_iterations, " loop iterations"));
      }
      if (absl::Status s = Count(*n.expr, kIterationCost); !s.ok()) return s;
      scopes_.emplace_back();
      auto& scope = scopes_.back();
      scope["loop"] = Value::MakeMap(Map{{"index0", Value(i)},
                                         {"index", Value(i + 1)},
                                         {"revindex0", Value(length - i - 1)},
                                         {"revindex", Value(length - i)},
                                         {"first", Value(i == 0)},
                                         {"last", Value(i + 1 == length)},
                                         {"length", Value(length)}});
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = items[i];
      } else {
        if (!items[i].is_list() || items[i].as_list().size() != n.targets.size()) {
          scopes_.pop_back();
          return Error(*n.expr, "cannot unpack loop item into the loop variables");
        }
        for (size_t t = 0; t < n.targets.size(); ++t) scope[n.targets[t]] = items[i].as_list()[t];
      }
      absl::Status s = Exec(n.body);
      scopes_.pop_back();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Value>> EvalArgs(const Expr& e) {
    std::vector<Value> args;
    for (const auto& a : e.args) {
      absl::StatusOr<Value> v = Eval(*a);
      if (!v.ok()) return v.status();
      args.push_back(*std::move(v));
    }
    return args;
  }

  absl::StatusOr<jinja::Kwargs> EvalKwargs(const Expr& e) {
    jinja::Kwargs kwargs;
    for (const auto& [k, a] : e.kwargs) {
      absl::StatusOr<Value> v = Eval(*a);
      if (!v.ok()) return v.status();
      kwargs.emplace_back(k, *std::move(v));
    }
    return kwargs;
  }

  // Byte offset of code point `index` (>= 0) of `s`; s.size() when `s` has fewer.
  static size_t CodePointOffset(std::string_view s, int64_t index) {
    size_t pos = 0;
    for (int64_t i = 0; i < index && pos < s.size(); ++i) {
      const size_t len = base::ValidUtf8SequenceLength(s, pos);
      pos += len == 0 ? 1 : len;
    }
    return pos;
  }

  // The code point of `s` at byte `pos` (< s.size()), a stray byte alone.
  static std::string CodePointAt(const std::string& s, size_t pos) {
    const size_t len = base::ValidUtf8SequenceLength(s, pos);
    return s.substr(pos, len == 0 ? 1 : len);
  }

  absl::StatusOr<Value> Subscript(const Expr& e, const Value& obj, const Value& key) {
    if (obj.is_map()) return obj.Get(key.ToString());
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
      int64_t i = key.is_int() ? key.as_int() : key.as_bool();
      if (obj.is_list()) {
        const List& items = obj.as_list();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
        return items[i];
      }
      // Strings index by code point, without splitting them into a list; a non-negative
      // index only walks as far as it needs.
      const std::string& str = obj.as_string();
      if (i < 0) i += static_cast<int64_t>(base::CountCodePoints(str));
      if (i < 0) return Value();
      const size_t at = CodePointOffset(str, i);
      if (at >= str.size()) return Value();
      return Value(CodePointAt(str, at));
    }
    if (obj.is_undefined()) return Error(e, "subscript of an undefined value");
    return Value();
  }

  absl::StatusOr<Value> Slice(const Expr& e, const Value& obj) {
    if (!obj.is_list() && !obj.is_string())
      return Error(e, absl::StrCat("cannot slice ", obj.TypeName()));
    const auto n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size()
                                                      : base::CountCodePoints(obj.as_string()));
    if (!e.args.empty()) {
      absl::StatusOr<Value> step = Eval(*e.args[0]);
      if (!step.ok()) return step.status();
      if (!step->is_none() && !step->is_int()) return Error(e, "slice step must be an integer");
      if (step->is_int() && step->as_int() == 0) return Error(e, "slice step cannot be zero");
      if (step->is_int() && step->as_int() != 1) return SliceWithStep(e, obj, step->as_int());
    }
    auto bound = [&](const jinja::ExprPtr& x, int64_t dflt) -> absl::StatusOr<int64_t> {
      if (x == nullptr) return dflt;
      absl::StatusOr<Value> v = Eval(*x);
      if (!v.ok()) return v.status();
      if (v->is_none()) return dflt;
      if (!v->is_int()) return Error(e, "slice bounds must be integers");
      int64_t i = v->as_int();
      if (i < 0) i = i < -n ? 0 : i + n;
      return std::clamp<int64_t>(i, 0, n);
    };
    absl::StatusOr<int64_t> lo = bound(e.b, 0);
    if (!lo.ok()) return lo.status();
    absl::StatusOr<int64_t> hi = bound(e.c, n);
    if (!hi.ok()) return hi.status();
    if (obj.is_list()) {
      if (*lo >= *hi) return Value(List{});
      return Value(List(obj.as_list().begin() + *lo, obj.as_list().begin() + *hi));
    }
    if (*lo >= *hi) return Value(std::string());
    const std::string& str = obj.as_string();
    const size_t begin = CodePointOffset(str, *lo);
    const size_t end = begin + CodePointOffset(std::string_view(str).substr(begin), *hi - *lo);
    return Value(str.substr(begin, end - begin));
  }

  // Python's slicing with a step other than 1 (slice.indices: bounds clamped to [-1, n - 1]
  // going backwards).
  absl::StatusOr<Value> SliceWithStep(const Expr& e, const Value& obj, int64_t step) {
    // Strings slice by code point: where each starts (a stray byte is one).
    std::vector<size_t> starts;
    if (obj.is_string()) {
      const std::string& str = obj.as_string();
      for (size_t pos = 0; pos < str.size();) {
        starts.push_back(pos);
        const size_t len = base::ValidUtf8SequenceLength(str, pos);
        pos += len == 0 ? 1 : len;
      }
      starts.push_back(str.size());
    }
    const auto n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : starts.size() - 1);
    auto bound = [&](const jinja::ExprPtr& x, int64_t dflt) -> absl::StatusOr<int64_t> {
      if (x == nullptr) return dflt;
      absl::StatusOr<Value> v = Eval(*x);
      if (!v.ok()) return v.status();
      if (v->is_none()) return dflt;
      if (!v->is_int()) return Error(e, "slice bounds must be integers");
      int64_t i = v->as_int();
      if (i < 0) {
        i = i < -n ? (step < 0 ? -1 : 0) : i + n;
      } else if (i >= n) {
        i = step < 0 ? n - 1 : n;
      }
      return i;
    };
    absl::StatusOr<int64_t> lo = bound(e.b, step < 0 ? n - 1 : 0);
    if (!lo.ok()) return lo.status();
    absl::StatusOr<int64_t> hi = bound(e.c, step < 0 ? -1 : n);
    if (!hi.ok()) return hi.status();
    std::vector<int64_t> picked;
    for (int64_t i = *lo; step > 0 ? i < *hi : i > *hi;) {
      picked.push_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    if (obj.is_list()) {
      List out;
      out.reserve(picked.size());
      for (int64_t i : picked) out.push_back(obj.as_list()[i]);
      return Value(std::move(out));
    }
    const std::string& str = obj.as_string();
    std::string out;
    for (int64_t i : picked) out.append(str, starts[i], starts[i + 1] - starts[i]);
    return Value(std::move(out));
  }

  absl::StatusOr<Value> Call(const Expr& e) {
    absl::StatusOr<std::vector<Value>> args = EvalArgs(e);
    if (!args.ok()) return args.status();
    absl::StatusOr<jinja::Kwargs> kwargs = EvalKwargs(e);
    if (!kwargs.ok()) return kwargs.status();
    if (e.a->kind == Expr::Kind::kAttr) {
      absl::StatusOr<Value> obj = Eval(*e.a->a);
      if (!obj.ok()) return obj.status();
      absl::StatusOr<Value> r = jinja::CallMethod(*obj, e.a->name, *args);
      if (r.ok() || !absl::IsNotFound(r.status())) return r;
      return Error(e, std::string(r.status().message()));
    }
    if (e.a->kind != Expr::Kind::kName)
      return Error(e, "only named functions and methods can be called");
    const std::string& fn = e.a->name;
    if (fn == "raise_exception") {
      return absl::InvalidArgumentError(args->empty() ? "raise_exception" : (*args)[0].ToString());
    }
    if (fn == "namespace") {
      Map m;
      for (auto& [k, v] : *kwargs) {
        if (v.is_namespace()) return Error(e, "a namespace() cannot be stored in another");
        m.emplace_back(k, std::move(v));
      }
      return Value::MakeMap(std::move(m), /*is_namespace=*/true);
    }
    if (fn == "range") {
      int64_t lo = 0, hi = 0;
      if (args->size() == 1 && (*args)[0].is_int()) hi = (*args)[0].as_int();
      if (args->size() == 2 && (*args)[0].is_int() && (*args)[1].is_int()) {
        lo = (*args)[0].as_int();
        hi = (*args)[1].as_int();
      }
      int64_t span = 0;
      if (hi > lo && (__builtin_sub_overflow(hi, lo, &span) || span > limits_.max_iterations)) {
        return Error(e, "range() too long");
      }
      List out;
      for (int64_t i = lo; i < hi; ++i) out.emplace_back(i);
      return Value(std::move(out));
    }
    return Error(e, absl::StrCat("unknown function '", fn, "'"));
  }

  absl::StatusOr<Value> Arithmetic(const Expr& e, const std::string& op, const Value& a,
                                   const Value& b) {
    if (op == "+" && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (op == "+" && a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
    if (op == "*" && a.is_string() && b.is_int()) {
      // Python: a count below 1 gives "".
      const std::string& unit = a.as_string();
      const int64_t count = std::max<int64_t>(b.as_int(), 0);
      if (!unit.empty() && static_cast<uint64_t>(count) > jinja::kMaxValueBytes / unit.size()) {
        return Error(e, "string repetition too long");
      }
      std::string out;
      out.reserve(unit.size() * static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) out += unit;
      return Value(std::move(out));
    }
    const bool numeric = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
    if (!numeric) {
      return Error(e, absl::StrCat("unsupported operand types for ", op, ": '", a.TypeName(),
                                   "' and '", b.TypeName(), "'"));
    }
    const bool ints = !a.is_double() && !b.is_double();
    if (ints) {
      const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
      const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
      if (op == "+")
        return Value(static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y)));
      if (op == "-")
        return Value(static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y)));
      if (op == "*")
        return Value(static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)));
      if (y == 0) return Error(e, "division by zero");
      if (op == "/") return Value(static_cast<double>(x) / static_cast<double>(y));
      if (x == INT64_MIN && y == -1) return Error(e, "integer overflow");
      if (op == "//") return Value(FloorDiv(x, y));
      return Value(FloorMod(x, y));
    }
    const double x = a.as_double();
    const double y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (y == 0) return Error(e, "division by zero");
    if (op == "/") return Value(x / y);
    if (op == "//") return Value(std::floor(x / y));
    return Value(x - std::floor(x / y) * y);
  }

  absl::StatusOr<Value> Compare(const Expr& e, const std::string& op, const Value& a,
                                const Value& b) {
    if (op == "==" || op == "!=") {
      if (absl::Status s = Charge(e, std::min(a.weight(), b.weight())); !s.ok()) return s;
      return Value(a.Equals(b) == (op == "=="));
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string() && a.is_string()) {
        if (absl::Status s = Charge(e, b.weight()); !s.ok()) return s;
        found = jinja::FindSubstring(b.as_string(), a.as_string()) != std::string::npos;
      } else if (b.is_list()) {
        // Each element comparison costs at most the smaller of the two weights.
        const size_t cost = std::min(b.weight(), b.as_list().size() * (a.weight() + 1));
        if (absl::Status s = Charge(e, cost); !s.ok()) return s;
        for (const Value& x : b.as_list()) {
          if (x.Equals(a)) {
            found = true;
            break;
          }
        }
      } else if (b.is_map()) {
        found = a.is_string() && !b.Get(a.as_string()).is_undefined();
      } else {
        return Error(e, absl::StrCat("'in' needs a string, list or dict, not ", b.TypeName()));
      }
      return Value(found == (op == "in"));
    }
    int cmp = 0;
    if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
      cmp = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      cmp = a.as_string().compare(b.as_string());
    } else {
      return Error(e, absl::StrCat("'", op, "' not supported between '", a.TypeName(), "' and '",
                                   b.TypeName(), "'"));
    }
    if (op == "<") return Value(cmp < 0);
    if (op == ">") return Value(cmp > 0);
    if (op == "<=") return Value(cmp <= 0);
    return Value(cmp >= 0);
  }

  absl::StatusOr<Value> Binary(const Expr& e) {
    absl::StatusOr<Value> a = Eval(*e.a);
    if (!a.ok()) return a;
    // and/or short-circuit and return an operand, as in Python.
    if (e.name == "and") return a->Truthy() ? Eval(*e.b) : a;
    if (e.name == "or") return a->Truthy() ? a : Eval(*e.b);
    absl::StatusOr<Value> b = Eval(*e.b);
    if (!b.ok()) return b;
    if (e.name == "~") return Value(a->ToString() + b->ToString());
    if (e.name == "+" || e.name == "-" || e.name == "*" || e.name == "/" || e.name == "//" ||
        e.name == "%") {
      return Arithmetic(e, e.name, *a, *b);
    }
    return Compare(e, e.name, *a, *b);
  }

  // Evaluates `e` and holds its value to the render's bounds: no value over kMaxValueBytes
  // (by weight) or nested deeper than kMaxValueDepth, and the work budget.
  absl::StatusOr<Value> Eval(const Expr& e) {
    if (absl::Status s = Count(e, 1); !s.ok()) return s;
    absl::StatusOr<Value> v = EvalExpr(e);
    if (!v.ok()) return v;
    if (v->weight() > jinja::kMaxValueBytes) return Error(e, "value larger than 64 MiB");
    if (v->depth() > jinja::kMaxValueDepth) {
      return Error(e, "values nested deeper than 128 levels");
    }
    size_t cost = 1;
    if (v->is_string()) cost += v->as_string().size();
    if (v->is_list()) cost += v->as_list().size();
    if (v->is_map()) cost += v->as_map().size();
    if (absl::Status s = Charge(e, cost); !s.ok()) return s;
    return v;
  }

  absl::StatusOr<Value> EvalExpr(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kAttr: {
        absl::StatusOr<Value> obj = Eval(*e.a);
        if (!obj.ok()) return obj;
        if (obj->is_undefined())
          return Error(e, absl::StrCat("'", e.name, "' of an undefined value"));
        return obj->Get(e.name);
      }
      case Expr::Kind::kItem: {
        absl::StatusOr<Value> obj = Eval(*e.a);
        if (!obj.ok()) return obj;
        absl::StatusOr<Value> key = Eval(*e.b);
        if (!key.ok()) return key;
        return Subscript(e, *obj, *key);
      }
      case Expr::Kind::kSlice: {
        absl::StatusOr<Value> obj = Eval(*e.a);
        if (!obj.ok()) return obj;
        return Slice(e, *obj);
      }
      case Expr::Kind::kCall:
        return Call(e);
      case Expr::Kind::kFilter: {
        absl::StatusOr<Value> v = Eval(*e.a);
        if (!v.ok()) return v;
        absl::StatusOr<std::vector<Value>> args = EvalArgs(e);
        if (!args.ok()) return args.status();
        absl::StatusOr<jinja::Kwargs> kwargs = EvalKwargs(e);
        if (!kwargs.ok()) return kwargs.status();
        absl::StatusOr<Value> r = jinja::ApplyFilter(e.name, *v, *args, *kwargs);
        if (!r.ok()) return Error(e, std::string(r.status().message()));
        return r;
      }
      case Expr::Kind::kTest: {
        absl::StatusOr<Value> v = Eval(*e.a);
        if (!v.ok()) return v;
        absl::StatusOr<std::vector<Value>> args = EvalArgs(e);
        if (!args.ok()) return args.status();
        if (!args->empty()) {  // eq / equalto / sameas compare
          if (absl::Status s = Charge(e, std::min(v->weight(), (*args)[0].weight())); !s.ok()) {
            return s;
          }
        }
        absl::StatusOr<bool> r = jinja::ApplyTest(e.name, *v, *args);
        if (!r.ok()) return Error(e, std::string(r.status().message()));
        return Value(*r != e.negate);
      }
      case Expr::Kind::kNot: {
        absl::StatusOr<Value> v = Eval(*e.a);
        if (!v.ok()) return v;
        return Value(!v->Truthy());
      }
      case Expr::Kind::kNeg: {
        absl::StatusOr<Value> v = Eval(*e.a);
        if (!v.ok()) return v;
        return Arithmetic(e, "-", Value(int64_t{0}), *v);
      }
      case Expr::Kind::kBinary:
        return Binary(e);
      case Expr::Kind::kCondition: {
        absl::StatusOr<Value> c = Eval(*e.b);
        if (!c.ok()) return c;
        if (c->Truthy()) return Eval(*e.a);
        return e.c == nullptr ? absl::StatusOr<Value>(Value()) : Eval(*e.c);
      }
      case Expr::Kind::kList: {
        absl::StatusOr<std::vector<Value>> items = EvalArgs(e);
        if (!items.ok()) return items.status();
        for (const Value& item : *items) {
          if (item.is_namespace()) return Error(e, "a namespace() cannot be stored in a list");
        }
        return Value(List(*std::move(items)));
      }
      case Expr::Kind::kDict: {
        Map m;
        for (size_t i = 0; i < e.args.size(); ++i) {
          absl::StatusOr<Value> k = Eval(*e.args[i]);
          if (!k.ok()) return k;
          absl::StatusOr<Value> v = Eval(*e.kwargs[i].second);
          if (!v.ok()) return v;
          if (v->is_namespace()) return Error(e, "a namespace() cannot be stored in a dict");
          m.emplace_back(k->ToString(), *std::move(v));
        }
        return Value::MakeMap(std::move(m));
      }
    }
    return Value();
  }

  std::string_view source_;
  const ChatTemplate::Limits limits_;
  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  std::string out_;
  int64_t iterations_ = 0;
  size_t work_ = 0;
  int64_t evaluations_ = 0;
};

}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  ChatTemplate t;
  t.source_ = std::string(source);
  absl::StatusOr<Body> body = jinja::ParseTemplate(t.source_);
  if (!body.ok()) return body.status();
  t.body_ = std::make_unique<Body>(*std::move(body));
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 const std::string& bos_token,
                                                 const std::string& eos_token,
                                                 const Limits& limits) const {
  List msgs;
  for (const ChatMessage& m : messages) {
    msgs.push_back(Value::MakeMap(Map{{"role", Value(m.role)}, {"content", Value(m.content)}}));
  }
  return RenderGlobals(Map{{"messages", Value(std::move(msgs))},
                           {"add_generation_prompt", Value(add_generation_prompt)},
                           {"bos_token", Value(bos_token)},
                           {"eos_token", Value(eos_token)}},
                       limits);
}

absl::StatusOr<std::string> ChatTemplate::RenderJson(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& extra, bool add_generation_prompt, const std::string& bos_token,
    const std::string& eos_token, const Limits& limits) const {
  if (!messages.is_array())
    return absl::InvalidArgumentError("chat template: messages must be a list");
  if (!tools.is_array() && !tools.is_null()) {
    return absl::InvalidArgumentError("chat template: tools must be a list or null");
  }
  if (!extra.is_object()) {
    return absl::InvalidArgumentError("chat template: template variables must be an object");
  }
  static constexpr std::string_view kReserved[] = {"messages", "tools", "add_generation_prompt",
                                                   "bos_token", "eos_token"};
  Map globals;
  for (const auto& [key, value] : extra.items()) {
    if (std::find(std::begin(kReserved), std::end(kReserved), key) != std::end(kReserved)) {
      continue;
    }
    absl::StatusOr<Value> v = jinja::ValueFromJson(value);
    if (!v.ok()) return v.status();
    globals.emplace_back(key, *std::move(v));
  }
  absl::StatusOr<Value> msgs = jinja::ValueFromJson(messages);
  if (!msgs.ok()) return msgs.status();
  absl::StatusOr<Value> tool_list = jinja::ValueFromJson(tools);
  if (!tool_list.ok()) return tool_list.status();
  globals.emplace_back("messages", *std::move(msgs));
  globals.emplace_back("tools", *std::move(tool_list));
  globals.emplace_back("add_generation_prompt", Value(add_generation_prompt));
  globals.emplace_back("bos_token", Value(bos_token));
  globals.emplace_back("eos_token", Value(eos_token));
  return RenderGlobals(std::move(globals), limits);
}

absl::StatusOr<std::string> ChatTemplate::RenderGlobals(Map globals, const Limits& limits) const {
  Renderer r(source_, std::move(globals), limits);
  absl::Status s = r.Run(*body_);
  if (!s.ok()) return s;
  return r.TakeOutput();
}

}  // namespace vllm::frontend
