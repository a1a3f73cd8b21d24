// Filters, tests and methods of the chat-template Jinja subset.
// Internal to frontend/jinja/ (its API is chat_template.h): tools/lint/check_layering.py
// refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_JINJA_BUILTINS_H_
#define VLLM_FRONTEND_JINJA_BUILTINS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/jinja/value.h"

namespace vllm::frontend::jinja {

// Keyword arguments of a call, in source order.
using Kwargs = std::vector<std::pair<std::string, Value>>;

// `value | name(args)`. Filters: trim, length/count, tojson(indent=), upper, lower,
// capitalize, first, last, string, default/d, join, list, reverse, int, items, select and
// reject (with a test's name and arguments).
// InvalidArgument for an unknown filter or a value of the wrong type.
[[nodiscard]] absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                                const std::vector<Value>& args,
                                                const Kwargs& kwargs);

// `value is name(args)`. Tests: defined, undefined, none, string, number, integer, float,
// boolean, mapping, iterable, sequence, true, false, odd, even, divisibleby, eq/equalto.
[[nodiscard]] absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value,
                                             const std::vector<Value>& args);

// `object.name(args)` for str (strip, lstrip, rstrip (with the characters to strip or
// none), upper, lower, startswith, endswith, split, replace, title) and dict (items, keys, values,
// get). NotFound when `object` has no such method (the caller then tries a plain attribute call).
[[nodiscard]] absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                               const std::vector<Value>& args);

}  // namespace vllm::frontend::jinja

#endif  // VLLM_FRONTEND_JINJA_BUILTINS_H_
