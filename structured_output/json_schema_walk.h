// The subschema positions of a JSON schema (internal to structured_output/): keywords whose
// value is a subschema, a list of them or a map of them. A walk over these never mistakes a
// property named "not" for the keyword.
#ifndef VLLM_STRUCTURED_OUTPUT_JSON_SCHEMA_WALK_H_
#define VLLM_STRUCTURED_OUTPUT_JSON_SCHEMA_WALK_H_

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vllm::structured_output {

inline constexpr std::string_view kSubschemaKeywords[] = {"items",
                                                          "additionalProperties",
                                                          "additionalItems",
                                                          "unevaluatedProperties",
                                                          "unevaluatedItems",
                                                          "propertyNames",
                                                          "not",
                                                          "if",
                                                          "then",
                                                          "else",
                                                          "contains"};
inline constexpr std::string_view kSubschemaListKeywords[] = {"anyOf", "oneOf", "allOf",
                                                              "prefixItems"};
inline constexpr std::string_view kSubschemaMapKeywords[] = {
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};

// Calls fn(subschema, path) for every direct subschema of `schema` (an object; anything else
// has none). `Json` is nlohmann::json or const nlohmann::json; the caller recurses.
template <class Json, class F>
void ForEachSubschema(Json& schema, const std::string& path, F&& fn) {
  if (!schema.is_object()) return;
  for (std::string_view keyword : kSubschemaKeywords) {
    auto it = schema.find(keyword);
    if (it != schema.end()) fn(*it, absl::StrCat(path, "/", std::string(keyword)));
  }
  for (std::string_view keyword : kSubschemaListKeywords) {
    auto it = schema.find(keyword);
    if (it == schema.end() || !it->is_array()) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      fn((*it)[i], absl::StrCat(path, "/", std::string(keyword), "/", i));
    }
  }
  for (std::string_view keyword : kSubschemaMapKeywords) {
    auto it = schema.find(keyword);
    if (it == schema.end() || !it->is_object()) continue;
    for (auto sub = it->begin(); sub != it->end(); ++sub) {
      fn(sub.value(), absl::StrCat(path, "/", std::string(keyword), "/", sub.key()));
    }
  }
}

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_JSON_SCHEMA_WALK_H_
