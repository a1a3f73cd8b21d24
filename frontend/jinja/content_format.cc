#include "frontend/jinja/content_format.h"

#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "frontend/jinja/ast.h"
#include "frontend/jinja/parser.h"

namespace vllm::frontend::jinja {
namespace {

// Every node of `body`, depth first (bodies of if branches, loops and their else parts).
void Walk(const Body& body, const std::function<void(const Node&)>& visit) {
  for (const auto& node : body) {
    visit(*node);
    for (const auto& [cond, branch] : node->branches) Walk(branch, visit);
    Walk(node->body, visit);
    Walk(node->else_body, visit);
  }
}

// vLLM's _is_var_access: `name`, or for a dotted name `ns.rest` the attribute chain.
bool IsVar(const Expr* e, const std::string& var) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kName) return e->name == var;
  const size_t dot = var.rfind('.');
  if (e->kind == Expr::Kind::kAttr && dot != std::string::npos) {
    return e->name == var.substr(dot + 1) && IsVar(e->a.get(), var.substr(0, dot));
  }
  return false;
}

// vLLM's _is_var_or_elems_access: through filters, tests and slices, `var` itself or, with a
// key, var[key] / var.key.
bool IsVarOrElems(const Expr* e, const std::string& var, const std::string& key = "") {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kFilter || e->kind == Expr::Kind::kTest ||
      e->kind == Expr::Kind::kSlice) {
    return IsVarOrElems(e->a.get(), var, key);
  }
  if (key.empty()) return IsVar(e, var);
  if (e->kind == Expr::Kind::kAttr) return e->name == key && IsVar(e->a.get(), var);
  if (e->kind == Expr::Kind::kItem) {
    const Expr* arg = e->b.get();
    return arg != nullptr && arg->kind == Expr::Kind::kLiteral && arg->value.is_string() &&
           arg->value.as_string() == key && IsVar(e->a.get(), var);
  }
  return false;
}

// `messages` and every variable assigned from it (vLLM's _iter_nodes_assign_var_or_elems).
std::vector<std::string> MessagesVars(const Body& body) {
  std::vector<std::string> out{"messages"};
  std::set<std::string> seen{"messages"};
  std::deque<std::string> queue{"messages"};
  auto add = [&](const std::string& name) {
    if (seen.insert(name).second) {
      out.push_back(name);
      queue.push_back(name);
    }
  };
  while (!queue.empty()) {
    const std::string var = queue.front();
    queue.pop_front();
    Walk(body, [&](const Node& n) {
      if (n.kind != Node::Kind::kSet || n.targets.size() != 1 || n.expr == nullptr) return;
      const Expr* rhs = n.expr.get();
      if (!n.attr.empty()) {  // ns.rest = messages
        if (IsVarOrElems(rhs, var)) add(n.targets[0] + "." + n.attr);
        return;
      }
      if (IsVarOrElems(rhs, var)) add(n.targets[0]);
      // ns = namespace(rest=messages)
      if (rhs->kind == Expr::Kind::kCall && rhs->a != nullptr &&
          rhs->a->kind == Expr::Kind::kName && rhs->a->name == "namespace") {
        for (const auto& [key, value] : rhs->kwargs) {
          if (IsVarOrElems(value.get(), var)) add(n.targets[0] + "." + key);
        }
      }
    });
  }
  return out;
}

}  // namespace

bool TemplateIteratesMessageContent(std::string_view source) {
  absl::StatusOr<Body> body = ParseTemplate(source);
  if (!body.ok()) return false;
  const std::vector<std::string> messages = MessagesVars(*body);
  std::vector<std::string> message_vars;  // targets of loops over the messages
  Walk(*body, [&](const Node& n) {
    if (n.kind != Node::Kind::kFor || n.targets.size() != 1) return;
    for (const std::string& m : messages) {
      if (IsVarOrElems(n.expr.get(), m)) {
        message_vars.push_back(n.targets[0]);
        break;
      }
    }
  });
  bool found = false;
  Walk(*body, [&](const Node& n) {
    if (found || n.kind != Node::Kind::kFor || n.expr == nullptr) return;
    if (n.expr->kind == Expr::Kind::kName && n.expr->name == "content") found = true;
    for (const std::string& m : message_vars) found |= IsVarOrElems(n.expr.get(), m, "content");
  });
  return found;
}

}  // namespace vllm::frontend::jinja
