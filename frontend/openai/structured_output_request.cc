#include "frontend/openai/structured_output_request.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/ordered_json.h"
#include "frontend/engine/engine_client.h"
#include "spdlog/spdlog.h"
#include "structured_output/params.h"

namespace vllm::frontend {
namespace {

// Request bodies keep the client's key order (base/ordered_json.h).
using json = nlohmann::ordered_json;
using structured_output::StructuredOutputsParams;

// Where each constraint came from, for the error message's field.
struct Sources {
  std::string json = "structured_outputs.json";
  std::string regex = "structured_outputs.regex";
  std::string choice = "structured_outputs.choice";
  std::string grammar = "structured_outputs.grammar";
  std::string json_object = "structured_outputs.json_object";
  std::string structural_tag = "structured_outputs.structural_tag";
};

// A schema (or a structural tag) given as an object, or as JSON text: the text.
absl::StatusOr<std::string> JsonText(const std::string& field, const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() || value.is_boolean()) return value.dump();
  return base::WrongTypeParam(field, "an object or a JSON string", value);
}

absl::StatusOr<std::string> Text(const std::string& field, const json& value) {
  if (!value.is_string()) return base::WrongTypeParam(field, "a string", value);
  return value.get<std::string>();
}

absl::StatusOr<std::vector<std::string>> Choices(const std::string& field, const json& value) {
  if (!value.is_array()) return base::WrongTypeParam(field, "a list of strings", value);
  std::vector<std::string> choices;
  choices.reserve(value.size());
  for (const json& c : value) {
    if (!c.is_string()) return base::WrongTypeParam(field, "a list of strings", value);
    choices.push_back(c.get<std::string>());
  }
  return choices;
}

// The Set* helpers read `value` as the field's type into *out.
absl::Status SetText(const std::string& field, const json& value, std::optional<std::string>* out) {
  auto text = Text(field, value);
  if (!text.ok()) return text.status();
  *out = std::move(*text);
  return absl::OkStatus();
}

absl::Status SetJsonText(const std::string& field, const json& value,
                         std::optional<std::string>* out) {
  auto text = JsonText(field, value);
  if (!text.ok()) return text.status();
  *out = std::move(*text);
  return absl::OkStatus();
}

absl::Status SetChoices(const std::string& field, const json& value,
                        std::optional<std::vector<std::string>>* out) {
  auto choices = Choices(field, value);
  if (!choices.ok()) return choices.status();
  *out = std::move(*choices);
  return absl::OkStatus();
}

absl::Status Bool(const std::string& field, const json& value, bool* out) {
  if (!value.is_boolean()) return base::WrongTypeParam(field, "a boolean", value);
  *out = value.get<bool>();
  return absl::OkStatus();
}

// structured_outputs: vLLM's StructuredOutputsParams, strictly (an unknown key is refused).
absl::Status ParseStructuredOutputsField(const json& so, StructuredOutputsParams* p) {
  if (so.is_null()) return absl::OkStatus();
  if (!so.is_object()) return base::WrongTypeParam("structured_outputs", "an object", so);
  for (const auto& [key, value] : so.items()) {
    const std::string field = absl::StrCat("structured_outputs.", key);
    if (value.is_null()) continue;
    absl::Status s;
    if (key == "json") {
      s = SetJsonText(field, value, &p->json);
    } else if (key == "regex") {
      s = SetText(field, value, &p->regex);
    } else if (key == "choice") {
      s = SetChoices(field, value, &p->choice);
    } else if (key == "grammar") {
      s = SetText(field, value, &p->grammar);
    } else if (key == "structural_tag") {
      s = SetJsonText(field, value, &p->structural_tag);
    } else if (key == "whitespace_pattern") {
      s = SetText(field, value, &p->whitespace_pattern);
    } else if (key == "json_object") {
      s = Bool(field, value, &p->json_object);
    } else if (key == "disable_any_whitespace") {
      s = Bool(field, value, &p->disable_any_whitespace);
    } else if (key == "disable_additional_properties") {
      s = Bool(field, value, &p->disable_additional_properties);
    } else if (key == "disable_fallback") {
      s = Bool(field, value, &p->disable_fallback);
    } else {
      return InvalidParam(field, absl::StrCat(field, " is not a structured_outputs field"));
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// response_format (OpenAI): text, json_object, json_schema {name, schema, strict,
// description}, structural_tag (the whole object is XGrammar's structural tag, as vLLM passes
// it).
absl::Status ParseResponseFormat(const json& body, StructuredOutputsParams* p, Sources* src) {
  const auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  const json& rf = *it;
  if (!rf.is_object()) return base::WrongTypeParam("response_format", "an object", rf);
  const auto type = rf.find("type");
  if (type == rf.end() || !type->is_string()) {
    return InvalidParam("response_format.type",
                        "response_format.type must be one of text, json_object, json_schema, "
                        "structural_tag");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return absl::OkStatus();
  if (t == "json_object") {
    p->json_object = true;
    src->json_object = "response_format";
    return absl::OkStatus();
  }
  if (t == "json_schema") {
    const auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) {
      return InvalidParam("response_format.json_schema",
                          "response_format.json_schema must be an object when type is json_schema");
    }
    const auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      // OpenAI's schema is optional; vLLM then constrains to any JSON object.
      p->json_object = true;
      src->json_object = "response_format.json_schema";
      return absl::OkStatus();
    }
    if (absl::Status s = SetJsonText("response_format.json_schema.schema", *schema, &p->json);
        !s.ok()) {
      return s;
    }
    src->json = "response_format.json_schema.schema";
    return absl::OkStatus();
  }
  if (t == "structural_tag") {
    p->structural_tag = rf.dump();
    src->structural_tag = "response_format";
    return absl::OkStatus();
  }
  return InvalidParam("response_format.type",
                      absl::StrCat("response_format.type '", t,
                                   "' is not one of text, json_object, json_schema, "
                                   "structural_tag"));
}

// The pre-0.12 fields (vLLM 0.12 dropped them and now ignores them with a log line): old
// clients that send them want the constraint, so they are honoured as aliases.
absl::Status ParseGuidedFields(const json& body, StructuredOutputsParams* p, Sources* src) {
  auto deprecated = [](const char* field, const char* replacement) {
    spdlog::warn("{} is deprecated (removed in vLLM 0.12); honoured as {}", field, replacement);
  };
  for (const auto& [key, value] : body.items()) {
    if (key.rfind("guided_", 0) != 0 || value.is_null()) continue;
    if (key == "guided_json") {
      deprecated("guided_json", "structured_outputs.json");
      if (absl::Status s = SetJsonText(key, value, &p->json); !s.ok()) return s;
      src->json = key;
    } else if (key == "guided_regex") {
      deprecated("guided_regex", "structured_outputs.regex");
      if (absl::Status s = SetText(key, value, &p->regex); !s.ok()) return s;
      src->regex = key;
    } else if (key == "guided_choice") {
      deprecated("guided_choice", "structured_outputs.choice");
      if (absl::Status s = SetChoices(key, value, &p->choice); !s.ok()) return s;
      src->choice = key;
    } else if (key == "guided_grammar") {
      deprecated("guided_grammar", "structured_outputs.grammar");
      if (absl::Status s = SetText(key, value, &p->grammar); !s.ok()) return s;
      src->grammar = key;
    } else if (key == "guided_whitespace_pattern") {
      deprecated("guided_whitespace_pattern", "structured_outputs.whitespace_pattern");
      if (absl::Status s = SetText(key, value, &p->whitespace_pattern); !s.ok()) return s;
    } else if (key == "guided_decoding_backend") {
      auto text = Text(key, value);
      if (!text.ok()) return text.status();
      if (*text != "auto" && *text != "xgrammar") {
        return InvalidParam(
            key, absl::StrCat(key, " '", *text, "': this server's only backend is xgrammar"));
      }
    } else {
      return InvalidParam(key, absl::StrCat(key, " is not a field of this API"));
    }
  }
  return absl::OkStatus();
}

// The field a constraint kind came from.
const std::string& SourceOf(structured_output::ConstraintKind kind, const Sources& src) {
  switch (kind) {
    case structured_output::ConstraintKind::kJson:
      return src.json;
    case structured_output::ConstraintKind::kRegex:
      return src.regex;
    case structured_output::ConstraintKind::kChoice:
      return src.choice;
    case structured_output::ConstraintKind::kGrammar:
      return src.grammar;
    case structured_output::ConstraintKind::kStructuralTag:
      return src.structural_tag;
    case structured_output::ConstraintKind::kJsonObject:
      break;
  }
  return src.json_object;
}

}  // namespace

absl::Status ParseStructuredOutputs(const json& body, core::SamplingParams* params) {
  StructuredOutputsParams p;
  Sources src;
  if (const auto it = body.find("structured_outputs"); it != body.end()) {
    if (absl::Status s = ParseStructuredOutputsField(*it, &p); !s.ok()) return s;
  }
  if (absl::Status s = ParseResponseFormat(body, &p, &src); !s.ok()) return s;
  if (absl::Status s = ParseGuidedFields(body, &p, &src); !s.ok()) return s;
  if (p == StructuredOutputsParams{}) return absl::OkStatus();  // nothing constrains
  if (absl::Status s = structured_output::ValidateStructuredOutputsParams(p); !s.ok()) {
    std::string message(s.message());
    const std::string field = message.substr(0, message.find(':'));
    return InvalidParam(field, message);
  }
  const structured_output::GrammarSpec spec = structured_output::ToGrammarSpec(p);
  if (absl::Status s = structured_output::ValidateGrammarSpec(spec); !s.ok()) {
    const std::string& field = SourceOf(spec.kind, src);
    return InvalidParam(field, absl::StrCat(field, ": ", s.message()));
  }
  params->structured_outputs = std::move(p);
  return absl::OkStatus();
}

absl::Status RejectUnhonouredFields(const json& body, bool chat) {
  auto set = [&body](const char* field) {
    const auto it = body.find(field);
    return it != body.end() && !it->is_null() && !(it->is_array() && it->empty());
  };
  if (chat) return absl::OkStatus();  // tools: ParseToolRequest (frontend/openai/chat_tools.h)
  for (const char* field : {"tools", "functions", "function_call"}) {
    if (set(field)) {
      return InvalidParam(field, absl::StrCat(field,
                                              " is a chat completions field: send it to "
                                              "/v1/chat/completions"));
    }
  }
  if (const auto it = body.find("tool_choice");
      it != body.end() && !it->is_null() && *it != "none") {
    return InvalidParam("tool_choice",
                        "tool_choice is a chat completions field: send it to "
                        "/v1/chat/completions");
  }
  return absl::OkStatus();
}

}  // namespace vllm::frontend
