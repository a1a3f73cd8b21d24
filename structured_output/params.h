// StructuredOutputsParams: one request's output constraint (vLLM's
// vllm.sampling_params.StructuredOutputsParams), and GrammarSpec, the canonical form the grammar
// compiler and its cache key take.
//
// Exactly one constraint is set: a JSON schema, a regex, a list of choices, an EBNF grammar
// (XGrammar's syntax), any JSON object, or a structural tag. Plain value types.
#ifndef VLLM_STRUCTURED_OUTPUT_PARAMS_H_
#define VLLM_STRUCTURED_OUTPUT_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vllm::structured_output {

struct StructuredOutputsParams {
  // A JSON schema, as JSON text (an object or a boolean).
  std::optional<std::string> json;
  std::optional<std::string> regex;
  std::optional<std::vector<std::string>> choice;
  // EBNF in XGrammar's syntax, root rule `root`.
  std::optional<std::string> grammar;
  // Any JSON object (OpenAI's response_format json_object).
  bool json_object = false;
  // XGrammar's structural tag, as JSON text.
  std::optional<std::string> structural_tag;
  // JSON without free whitespace between tokens (also the engine-wide default of
  // --structured-outputs-config disable_any_whitespace).
  bool disable_any_whitespace = false;
  // No properties beyond those a schema lists. XGrammar's strict mode, which we always use,
  // already generates none, so true and false constrain alike.
  bool disable_additional_properties = false;
  // Never fall back to another backend; we have one, so it never falls back.
  bool disable_fallback = false;
  // A regex for JSON whitespace: the xgrammar backend cannot honour it, so a request that sets
  // it is refused (ValidateStructuredOutputsParams).
  std::optional<std::string> whitespace_pattern;

  friend bool operator==(const StructuredOutputsParams&, const StructuredOutputsParams&) = default;
};

// Bounds on what a request may send (a larger one is refused, never truncated).
inline constexpr size_t kMaxSpecBytes = size_t{1} << 20;  // a schema, regex, grammar or tag
inline constexpr size_t kMaxChoices = 4096;
inline constexpr size_t kMaxChoiceBytes = 4096;
// JSON schemas nested deeper than this are refused before XGrammar sees them.
inline constexpr int kMaxSchemaDepth = 64;

enum class ConstraintKind : uint8_t {
  kJson,
  kJsonObject,
  kRegex,
  kChoice,
  kGrammar,
  kStructuralTag,
};
const char* ConstraintKindName(ConstraintKind kind);

// What the compiler needs: the kind, its text (choices already turned into an EBNF grammar,
// as vLLM does) and the JSON whitespace mode. Equal specs compile to the same grammar.
struct GrammarSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;
  bool any_whitespace = true;

  // A string that identifies the spec (the compile cache's key).
  std::string Key() const;
  friend bool operator==(const GrammarSpec&, const GrammarSpec&) = default;
};

// OK when exactly one constraint is set, every size is within the bounds above and no field
// the xgrammar backend cannot honour is set; otherwise InvalidArgument naming the field
// ("structured_outputs.whitespace_pattern: ..."). Does not parse the spec (ValidateGrammarSpec).
[[nodiscard]] absl::Status ValidateStructuredOutputsParams(const StructuredOutputsParams& params);

// The spec of validated params; `disable_any_whitespace` is the engine-wide default (ORed
// with the request's).
[[nodiscard]] GrammarSpec ToGrammarSpec(const StructuredOutputsParams& params,
                                        bool disable_any_whitespace = false);

// vLLM's choice_as_grammar: root ::= "a" | "b", with `"` and `\` escaped.
[[nodiscard]] std::string ChoiceAsGrammar(const std::vector<std::string>& choices);

// XGrammar's exception text without its log prefix ("[time] file.cc:line: ") and trailing
// newline.
[[nodiscard]] std::string XgrammarMessage(const char* what);

// Parses the spec with XGrammar (no tokenizer needed), as vLLM's frontend does before a
// request reaches the engine: InvalidArgument naming the field and XGrammar's message for a
// schema, regex, grammar or structural tag it cannot read, and for JSON-schema keywords XGrammar
// would silently ignore ("not", "if", "uniqueItems", ...; vLLM refuses them for xgrammar too).
[[nodiscard]] absl::Status ValidateGrammarSpec(const GrammarSpec& spec);
// ValidateGrammarSpec remembers its answers by spec (at most 8 MiB of specs, oldest out first;
// thread-safe), so a spec seen again costs a hash look-up: the checks answered so, since start.
int64_t ValidationCacheHits();

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_PARAMS_H_
