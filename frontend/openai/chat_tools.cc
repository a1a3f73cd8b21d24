#include "frontend/openai/chat_tools.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/ordered_json.h"
#include "frontend/engine/engine_client.h"
#include "structured_output/params.h"

namespace vllm::frontend {
namespace {

// Request bodies keep the client's key order (base/ordered_json.h), and so does what is built
// from them.
using json = nlohmann::ordered_json;
using nlohmann::ordered_json;

constexpr char kNamedUsage[] =
    "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";

absl::Status CheckTool(const json& tool, size_t index) {
  const std::string field = absl::StrCat("tools[", index, "]");
  if (!tool.is_object()) return base::WrongTypeParam(field, "an object", tool);
  if (const json* type = base::FindField(tool, "type"); type != nullptr && *type != "function") {
    return InvalidParam("tools", absl::StrCat(field, ".type must be \"function\""));
  }
  const json* function = base::FindField(tool, "function");
  if (function == nullptr || !function->is_object()) {
    return InvalidParam("tools", absl::StrCat(field, " needs a \"function\" object"));
  }
  const json* name = base::FindField(*function, "name");
  if (name == nullptr || !name->is_string()) {
    return InvalidParam("tools", absl::StrCat(field, ".function needs a string \"name\""));
  }
  if (const json* d = base::FindField(*function, "description"); d != nullptr && !d->is_string()) {
    return base::WrongTypeParam(field + ".function.description", "a string", *d);
  }
  if (const json* p = base::FindField(*function, "parameters"); p != nullptr && !p->is_object()) {
    return base::WrongTypeParam(field + ".function.parameters", "an object (a JSON schema)", *p);
  }
  if (const json* s = base::FindField(*function, "strict"); s != nullptr && !s->is_boolean()) {
    return base::WrongTypeParam(field + ".function.strict", "a boolean", *s);
  }
  return absl::OkStatus();
}

// The named form of tool_choice: the function's name (vLLM's messages).
absl::StatusOr<std::string> NamedFunction(const json& choice, const json& tools) {
  const json* function = base::FindField(choice, "function");
  if (function == nullptr || !function->is_object()) {
    return InvalidParam(
        "tool_choice.function",
        absl::StrCat("Invalid value for `function` in `tool_choice`! ", kNamedUsage));
  }
  const json* name = base::FindField(*function, "name");
  if (name == nullptr) {
    return InvalidParam(
        "tool_choice.function.name",
        absl::StrCat("Expected field `name` in `function` in `tool_choice`! ", kNamedUsage));
  }
  if (!name->is_string() || name->get<std::string>().empty()) {
    return InvalidParam(
        "tool_choice.function.name",
        absl::StrCat("Invalid `name` in `function` in `tool_choice`! ", kNamedUsage));
  }
  for (const json& tool : tools) {
    if (tool["function"]["name"] == *name) return name->get<std::string>();
  }
  return InvalidParam("tool_choice",
                      "The tool specified in `tool_choice` does not match any of the specified "
                      "`tools`");
}

absl::StatusOr<ToolChoice> ParseChoice(const json& body, const json& tools, std::string* function) {
  const auto it = body.find("tool_choice");
  const bool has_tools = !tools.is_null();
  if (it == body.end()) return has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  const json& choice = *it;
  if (choice.is_null()) return has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (choice == "none") return ToolChoice::kNone;
  if (!has_tools) {
    return InvalidParam("tool_choice", "When using `tool_choice`, `tools` must be set.");
  }
  if (choice == "auto") return ToolChoice::kAuto;
  if (choice == "required") return ToolChoice::kRequired;
  if (!choice.is_object()) {
    return InvalidParam("tool_choice",
                        absl::StrCat("Invalid value for `tool_choice`: ", choice.dump(), "! ",
                                     "Only named tools, \"none\", \"auto\" or \"required\" "
                                     "are supported."));
  }
  auto name = NamedFunction(choice, tools);
  if (!name.ok()) return name.status();
  *function = std::move(*name);
  return ToolChoice::kNamed;
}

// vLLM's _params_or_empty_object: missing, null or empty parameters still constrain the
// arguments to an object.
ordered_json ParamsOrEmptyObject(ordered_json params) {
  if (params.is_null() || params.empty()) {
    return ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
  }
  return params;
}

absl::StatusOr<ordered_json> RequiredSchema(const ToolRequest& tools) {
  ordered_json any_of = ordered_json::array();
  ordered_json defs = ordered_json::object();
  for (const ordered_json& tool : tools.tools) {
    const ordered_json& function = tool["function"];
    const std::string name = function["name"].get<std::string>();
    ordered_json params = ordered_json::object();
    if (const auto p = function.find("parameters"); p != function.end() && !p->is_null()) {
      params = *p;
    }
    if (const auto d = params.find("$defs"); d != params.end()) {
      if (!d->is_object()) {
        return InvalidParam("tools", absl::StrCat("`$defs` in the parameters of tool '", name,
                                                  "' must be an object"));
      }
      for (const auto& [def_name, def_schema] : d->items()) {
        if (const auto have = defs.find(def_name); have != defs.end() && *have != def_schema) {
          return InvalidParam("tools", absl::StrCat("Tool definition '", def_name,
                                                    "' has multiple schemas, which is not "
                                                    "supported."));
        }
        defs[def_name] = def_schema;
      }
      params.erase("$defs");
    }
    any_of.push_back(ordered_json{{"properties",
                                   {{"name", {{"type", "string"}, {"enum", {name}}}},
                                    {"parameters", ParamsOrEmptyObject(std::move(params))}}},
                                  {"required", {"name", "parameters"}}});
  }
  ordered_json schema{{"type", "array"},
                      {"minItems", 1},
                      {"items", {{"type", "object"}, {"anyOf", std::move(any_of)}}}};
  if (!tools.parallel_tool_calls) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return schema;
}

// A history's assistant message may hold as many calls as an output.
static_assert(kMaxTemplateToolCalls == static_cast<size_t>(parsers::kMaxToolCalls));

}  // namespace

absl::StatusOr<ToolRequest> ParseToolRequest(const json& body, const ChatParsers& parsers) {
  for (const char* field : {"functions", "function_call"}) {
    if (base::FindField(body, field) != nullptr) {
      return InvalidParam(field, absl::StrCat(field,
                                              " (OpenAI's deprecated function calling) is not "
                                              "supported; send tools and tool_choice"));
    }
  }
  ToolRequest request;
  json tools;
  if (const json* t = base::FindField(body, "tools"); t != nullptr) {
    if (!t->is_array()) return base::WrongTypeParam("tools", "a list of tools", *t);
    if (t->empty()) {
      return InvalidParam("tools",
                          "`tools` must not be an empty array. Either provide at least one tool "
                          "or omit the field entirely.");
    }
    if (t->size() > kMaxTools) {
      return InvalidParam("tools", absl::StrCat("tools has ", t->size(), " entries; at most ",
                                                kMaxTools, " are allowed"));
    }
    for (size_t i = 0; i < t->size(); ++i) {
      if (absl::Status s = CheckTool((*t)[i], i); !s.ok()) return s;
    }
    tools = *t;
    request.tools = ordered_json(*t);
  }
  auto choice = ParseChoice(body, tools, &request.function);
  if (!choice.ok()) return choice.status();
  request.choice = *choice;
  if (const json* p = base::FindField(body, "parallel_tool_calls"); p != nullptr) {
    if (!p->is_boolean()) return base::WrongTypeParam("parallel_tool_calls", "a boolean", *p);
    request.parallel_tool_calls = p->get<bool>();
  }
  if (request.choice == ToolChoice::kAuto && parsers.tool_parser == nullptr) {
    // An explicit null tool_choice falls back to plain text; "auto" (or tools without a
    // tool_choice, which means "auto") needs the parser.
    const auto it = body.find("tool_choice");
    if (it == body.end() || !it->is_null()) {
      return InvalidParam("tool_choice",
                          "\"auto\" tool choice requires --enable-auto-tool-choice and "
                          "--tool-call-parser to be set");
    }
    request.choice = ToolChoice::kNone;
  }
  if ((request.choice == ToolChoice::kRequired || request.choice == ToolChoice::kNamed) &&
      parsers.tool_parser == nullptr) {
    const std::string what = request.choice == ToolChoice::kRequired
                                 ? std::string("\"required\"")
                                 : absl::StrCat("function \"", request.function, "\"");
    return InvalidParam("tool_choice", absl::StrCat("tool_choice=", what,
                                                    " requires --tool-call-parser to be set (with "
                                                    "--enable-auto-tool-choice)"));
  }
  return request;
}

absl::Status ApplyToolChoiceGrammar(const json& body, const ToolRequest& tools,
                                    core::SamplingParams* params) {
  if (tools.choice != ToolChoice::kRequired && tools.choice != ToolChoice::kNamed) {
    return absl::OkStatus();
  }
  if (tools.choice == ToolChoice::kNamed) {
    const json* so = base::FindField(body, "structured_outputs");
    bool constrained =
        so != nullptr && so->is_object() &&
        (base::FindField(*so, "json") != nullptr || base::FindField(*so, "regex") != nullptr ||
         base::FindField(*so, "choice") != nullptr);
    for (const char* alias : {"guided_json", "guided_regex", "guided_choice"}) {
      constrained |= base::FindField(body, alias) != nullptr;
    }
    if (constrained) {
      return InvalidParam("tool_choice",
                          "You can only either use constraints for structured outputs or tools, "
                          "not both.");
    }
  }
  ordered_json schema;
  if (tools.choice == ToolChoice::kRequired) {
    auto required = RequiredSchema(tools);
    if (!required.ok()) return required.status();
    schema = std::move(*required);
  } else {
    for (const ordered_json& tool : tools.tools) {
      const ordered_json& function = tool["function"];
      if (function["name"] != tools.function) continue;
      schema = ParamsOrEmptyObject(function.value("parameters", ordered_json()));
      break;
    }
  }
  structured_output::StructuredOutputsParams p;
  p.json = schema.dump();
  if (absl::Status s = structured_output::ValidateStructuredOutputsParams(p); !s.ok()) {
    return InvalidParam("tools", absl::StrCat("tools: ", s.message()));
  }
  if (absl::Status s = structured_output::ValidateGrammarSpec(structured_output::ToGrammarSpec(p));
      !s.ok()) {
    return InvalidParam("tools",
                        absl::StrCat("tools: the function's parameters schema: ", s.message()));
  }
  params->structured_outputs = std::move(p);
  return absl::OkStatus();
}

absl::StatusOr<ChatOutputOptions> ChatOutputFor(const json& body, const ToolRequest& tools,
                                                const ordered_json& kwargs,
                                                const ChatParsers& parsers) {
  ChatOutputOptions out;
  out.reasoning = parsers.reasoning_parser;
  if (const json* include = base::FindField(body, "include_reasoning"); include != nullptr) {
    if (!include->is_boolean())
      return base::WrongTypeParam("include_reasoning", "a boolean", *include);
    out.include_reasoning = include->get<bool>();
  }
  if (const auto it = kwargs.find("enable_thinking"); it != kwargs.end() && *it == false) {
    out.reasoning_options.enable_thinking = false;
  }
  out.parallel_tool_calls = tools.parallel_tool_calls;
  switch (tools.choice) {
    case ToolChoice::kNone:
      break;
    case ToolChoice::kAuto:
      if (parsers.tool_parser != nullptr) {
        // The server's parser, shared (not owned).
        out.tools = std::shared_ptr<const parsers::ToolParser>(std::shared_ptr<void>(),
                                                               parsers.tool_parser);
      }
      break;
    case ToolChoice::kRequired:
      out.tools = parsers::MakeRequiredToolParser();
      out.forced = true;
      break;
    case ToolChoice::kNamed:
      out.tools = parsers::MakeNamedToolParser(tools.function);
      out.forced = true;
      out.named = true;
      break;
  }
  return out;
}

}  // namespace vllm::frontend
