#include "structured_output/params.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "structured_output/json_schema_walk.h"
#include "structured_output/xgrammar_row.h"
#include "xgrammar/xgrammar.h"

namespace vllm::structured_output {
namespace {

using Json = nlohmann::json;

// The deepest nesting of [ and { in JSON text, outside strings; stops counting past `limit`
// (so that a hostile document is refused before a recursive parser sees it).
int JsonDepth(std::string_view text, int limit) {
  int depth = 0;
  int max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

// Keywords XGrammar 0.2.8's JSON-schema converter ignores wherever they appear (it logs a
// warning and generates values that may break them).
constexpr std::string_view kIgnoredKeywords[] = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
};
// The string formats XGrammar generates (others it ignores).
constexpr std::string_view kXgrammarFormats[] = {
    "email",         "date",
    "time",          "date-time",
    "duration",      "ipv4",
    "ipv6",          "hostname",
    "uuid",          "uri",
    "uri-reference", "uri-template",
    "json-pointer",  "relative-json-pointer",
};

bool HasType(const Json& schema, std::string_view type) {
  const auto it = schema.find("type");
  if (it == schema.end()) return false;
  if (it->is_string()) return it->get_ref<const std::string&>() == type;
  if (!it->is_array()) return false;
  for (const Json& t : *it) {
    if (t.is_string() && t.get_ref<const std::string&>() == type) return true;
  }
  return false;
}

bool PatternWithLength(const Json& schema) {
  return (schema.contains("pattern") || schema.contains("format")) &&
         (schema.contains("minLength") || schema.contains("maxLength"));
}

// Why XGrammar cannot honour this node (vLLM's has_xgrammar_unsupported_json_features, plus
// the keywords XGrammar ignores), or "".
std::string Unsupported(const Json& schema) {
  for (std::string_view keyword : kIgnoredKeywords) {
    if (schema.contains(keyword)) return std::string(keyword);
  }
  if ((HasType(schema, "integer") || HasType(schema, "number")) && schema.contains("multipleOf")) {
    return "multipleOf";
  }
  if (HasType(schema, "array")) {
    for (const char* keyword : {"uniqueItems", "contains", "minContains", "maxContains"}) {
      if (schema.contains(keyword)) return keyword;
    }
  }
  if (HasType(schema, "string")) {
    const auto format = schema.find("format");
    if (format != schema.end()) {
      const bool known =
          format->is_string() &&
          std::find(std::begin(kXgrammarFormats), std::end(kXgrammarFormats),
                    format->get_ref<const std::string&>()) != std::end(kXgrammarFormats);
      if (!known) return absl::StrCat("format ", format->dump());
    }
    if (PatternWithLength(schema)) return "pattern or format with minLength/maxLength";
  }
  if (HasType(schema, "object")) {
    const auto names = schema.find("propertyNames");
    if (names != schema.end()) {
      if (names->is_object() && PatternWithLength(*names)) {
        return "propertyNames with a pattern or format and a length";
      }
      const auto additional = schema.find("additionalProperties");
      const auto unevaluated = schema.find("unevaluatedProperties");
      if (schema.contains("properties") || schema.contains("patternProperties") ||
          (additional != schema.end() && additional->is_object()) ||
          (unevaluated != schema.end() && *unevaluated != true)) {
        return "propertyNames beside properties";
      }
    }
    const auto pattern_properties = schema.find("patternProperties");
    if (pattern_properties != schema.end() && pattern_properties->is_object() &&
        (schema.contains("properties") || pattern_properties->size() > 1)) {
      return "patternProperties beside properties, or several patterns";
    }
  }
  return "";
}

// Walks the subschemas of `schema`. InvalidArgument naming the first construct XGrammar
// cannot honour, with its path.
absl::Status CheckSchemaKeywords(const Json& schema, const std::string& path) {
  if (!schema.is_object()) return absl::OkStatus();
  if (std::string why = Unsupported(schema); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the schema uses ", why, " at ", path,
                                                   ", which the xgrammar backend does not "
                                                   "support"));
  }
  absl::Status status;
  ForEachSubschema(schema, path, [&status](const Json& sub, const std::string& sub_path) {
    if (status.ok()) status = CheckSchemaKeywords(sub, sub_path);
  });
  return status;
}

absl::Status CheckJsonSchema(const std::string& text) {
  if (JsonDepth(text, kMaxSchemaDepth) > kMaxSchemaDepth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the schema nests deeper than %d levels", kMaxSchemaDepth));
  }
  Json schema = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("the schema is not valid JSON");
  if (!schema.is_object() && !schema.is_boolean()) {
    return absl::InvalidArgumentError("the schema must be a JSON object or a boolean");
  }
  return CheckSchemaKeywords(schema, "#");
}

// A grammar that admits no string (a $ref cycle with no way out, an empty enum) parses, but
// has no first token to allow: compiled over a 256-byte vocabulary (cheap), its first mask is
// empty. InvalidArgument then. The compiler is per thread (the API server validates on several).
absl::Status CheckAdmitsSomething(const xgrammar::Grammar& grammar) {
  thread_local const std::unique_ptr<xgrammar::GrammarCompiler> kCompiler = [] {
    std::vector<std::string> bytes(257);
    for (int b = 0; b < 256; ++b)
      bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
    bytes[256] = "";  // the stop token
    xgrammar::TokenizerInfo info(bytes, xgrammar::VocabType::RAW, 257, std::vector<int32_t>{256});
    return std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/1,
                                                       /*cache_enabled=*/false);
  }();
  xgrammar::CompiledGrammar compiled = kCompiler->CompileGrammar(grammar);
  xgrammar::GrammarMatcher matcher(compiled);
  int32_t words[9] = {};
  FillRow(matcher, words);
  for (int32_t w : words) {
    if (w != 0) return absl::OkStatus();
  }
  return absl::InvalidArgumentError("the constraint admits no output at all");
}

// Runs an XGrammar parse (a function returning the Grammar), then CheckAdmitsSomething, turning
// XGrammar's exceptions into InvalidArgument.
template <class F>
absl::Status Parse(F&& parse) {
  try {
    return CheckAdmitsSomething(parse());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(XgrammarMessage(e.what()));
  }
}

}  // namespace

std::string XgrammarMessage(const char* what) {
  std::string_view m(what);
  if (!m.empty() && m.front() == '[') {
    const size_t cc = m.find(".cc:");
    const size_t colon = cc == std::string_view::npos ? cc : m.find(": ", cc);
    if (colon != std::string_view::npos) m.remove_prefix(colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.remove_suffix(1);
  return std::string(m);
}

const char* ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJson:
      return "json";
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kGrammar:
      return "grammar";
    case ConstraintKind::kStructuralTag:
      return "structural_tag";
  }
  return "?";
}

std::string GrammarSpec::Key() const {
  return absl::StrCat(static_cast<int>(kind), any_whitespace ? "w" : "n", ":", text);
}

absl::Status ValidateStructuredOutputsParams(const StructuredOutputsParams& params) {
  const int count =
      static_cast<int>(params.json.has_value()) + static_cast<int>(params.regex.has_value()) +
      static_cast<int>(params.choice.has_value()) + static_cast<int>(params.grammar.has_value()) +
      static_cast<int>(params.json_object) + static_cast<int>(params.structural_tag.has_value());
  if (count == 0) {
    return absl::InvalidArgumentError(
        "structured_outputs: set one of json, regex, choice, grammar, json_object, structural_tag");
  }
  if (count > 1) {
    return absl::InvalidArgumentError(
        "structured_outputs: you can only use one kind of structured outputs constraint, but "
        "several of json, regex, choice, grammar, json_object, structural_tag are set");
  }
  if (params.whitespace_pattern.has_value()) {
    return absl::InvalidArgumentError(
        "structured_outputs.whitespace_pattern: the xgrammar backend does not support a "
        "whitespace pattern (use disable_any_whitespace for compact JSON)");
  }
  auto check_size = [](const std::optional<std::string>& text, const char* field) {
    if (text.has_value() && text->size() > kMaxSpecBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "structured_outputs.%s: %d bytes; at most %d", field, text->size(), kMaxSpecBytes));
    }
    return absl::OkStatus();
  };
  for (const absl::Status& s : {check_size(params.json, "json"), check_size(params.regex, "regex"),
                                check_size(params.grammar, "grammar"),
                                check_size(params.structural_tag, "structural_tag")}) {
    if (!s.ok()) return s;
  }
  if (params.choice.has_value()) {
    if (params.choice->empty()) {
      return absl::InvalidArgumentError("structured_outputs.choice: the list is empty");
    }
    if (params.choice->size() > kMaxChoices) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "structured_outputs.choice: %d choices; at most %d", params.choice->size(), kMaxChoices));
    }
    for (const std::string& c : *params.choice) {
      if (c.size() > kMaxChoiceBytes) {
        return absl::InvalidArgumentError(
            absl::StrFormat("structured_outputs.choice: a choice of %d bytes; at most %d", c.size(),
                            kMaxChoiceBytes));
      }
    }
  }
  return absl::OkStatus();
}

std::string ChoiceAsGrammar(const std::vector<std::string>& choices) {
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += " | ";
    out += '"';
    for (char c : choices[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out;
}

GrammarSpec ToGrammarSpec(const StructuredOutputsParams& params, bool disable_any_whitespace) {
  GrammarSpec spec;
  spec.any_whitespace = !(disable_any_whitespace || params.disable_any_whitespace);
  if (params.json.has_value()) {
    spec.kind = ConstraintKind::kJson;
    spec.text = *params.json;
  } else if (params.regex.has_value()) {
    spec.kind = ConstraintKind::kRegex;
    spec.text = *params.regex;
  } else if (params.choice.has_value()) {
    spec.kind = ConstraintKind::kChoice;
    spec.text = ChoiceAsGrammar(*params.choice);
  } else if (params.grammar.has_value()) {
    spec.kind = ConstraintKind::kGrammar;
    spec.text = *params.grammar;
  } else if (params.structural_tag.has_value()) {
    spec.kind = ConstraintKind::kStructuralTag;
    spec.text = *params.structural_tag;
  } else {
    spec.kind = ConstraintKind::kJsonObject;
  }
  return spec;
}

namespace {

absl::Status ValidateUncached(const GrammarSpec& spec) {
  switch (spec.kind) {
    case ConstraintKind::kJson: {
      const absl::Status s = CheckJsonSchema(spec.text);
      if (!s.ok()) return s;
      return Parse(
          [&] { return xgrammar::Grammar::FromJSONSchema(spec.text, spec.any_whitespace); });
    }
    case ConstraintKind::kJsonObject:
      return absl::OkStatus();
    case ConstraintKind::kRegex:
      return Parse([&] { return xgrammar::Grammar::FromRegex(spec.text); });
    case ConstraintKind::kChoice:
    case ConstraintKind::kGrammar:
      return Parse([&] { return xgrammar::Grammar::FromEBNF(spec.text); });
    case ConstraintKind::kStructuralTag: {
      if (JsonDepth(spec.text, kMaxSchemaDepth) > kMaxSchemaDepth) {
        return absl::InvalidArgumentError(
            absl::StrFormat("the structural tag nests deeper than %d levels", kMaxSchemaDepth));
      }
      try {
        auto result = xgrammar::Grammar::FromStructuralTag(spec.text);
        if (std::holds_alternative<xgrammar::StructuralTagError>(result)) {
          return absl::InvalidArgumentError(
              std::visit([](const auto& e) { return XgrammarMessage(e.what()); },
                         std::get<xgrammar::StructuralTagError>(result)));
        }
        return CheckAdmitsSomething(std::get<xgrammar::Grammar>(result));
      } catch (const std::exception& e) {
        return absl::InvalidArgumentError(XgrammarMessage(e.what()));
      }
    }
  }
  return absl::InvalidArgumentError("unknown constraint kind");
}

// The results of recent checks by spec: clients send the same schema again and again, and a
// check is an XGrammar compile (about 1 ms of CPU for a small schema, more for large ones),
// which the API server would otherwise pay on every request. Oldest first out past kMaxBytes
// of keys.
class ValidationCache {
 public:
  static ValidationCache& Get() {
    static ValidationCache* cache = new ValidationCache();
    return *cache;
  }
  std::optional<absl::Status> Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    const auto it = results_.find(key);
    if (it == results_.end()) return std::nullopt;
    ++hits_;
    return it->second;
  }
  void Add(const std::string& key, const absl::Status& result) {
    if (key.size() > kMaxBytes / 4) return;
    absl::MutexLock lock(&mu_);
    if (!results_.emplace(key, result).second) return;
    order_.push_back(key);
    bytes_ += key.size();
    while (bytes_ > kMaxBytes && !order_.empty()) {
      bytes_ -= order_.front().size();
      results_.erase(order_.front());
      order_.pop_front();
    }
  }
  int64_t hits() {
    absl::MutexLock lock(&mu_);
    return hits_;
  }

 private:
  static constexpr size_t kMaxBytes = size_t{8} << 20;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::Status> results_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::Status ValidateGrammarSpec(const GrammarSpec& spec) {
  const std::string key = spec.Key();
  ValidationCache& cache = ValidationCache::Get();
  if (std::optional<absl::Status> known = cache.Find(key); known.has_value()) return *known;
  absl::Status result = ValidateUncached(spec);
  // Out of memory is not a property of the spec.
  if (result.code() != absl::StatusCode::kResourceExhausted) cache.Add(key, result);
  return result;
}

int64_t ValidationCacheHits() { return ValidationCache::Get().hits(); }

}  // namespace vllm::structured_output
