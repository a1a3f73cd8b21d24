// The tool-calling and reasoning side of a chat request, as vLLM's serving_chat does it: the
// request's `tools`, `tool_choice` and `parallel_tool_calls` checked against the server's
// --enable-auto-tool-choice / --tool-call-parser; the grammar a forced tool choice constrains
// the output with (vLLM's get_json_schema_from_tools); the messages and template variables
// the chat template renders (tool calls with their arguments as objects, tool results, the
// request's chat_template_kwargs). Pure functions over JSON; no I/O.
#ifndef VLLM_FRONTEND_OPENAI_CHAT_TOOLS_H_
#define VLLM_FRONTEND_OPENAI_CHAT_TOOLS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sampling_params.h"
#include "frontend/engine/engine_client.h"
#include "frontend/jinja/chat_template_input.h"
#include "frontend/openai/chat_output.h"
#include "frontend/openai/request_defaults.h"
#include "frontend/parsers/reasoning_parser.h"
#include "frontend/parsers/tool_parser.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// At most this many tools in one request (each is a function schema in the prompt).
inline constexpr size_t kMaxTools = 1024;

// The server's parsers (ApiServerOptions: --tool-call-parser, --enable-auto-tool-choice,
// --exclude-tools-when-tool-choice-none, --reasoning-parser). Immutable, shared by requests.
struct ChatParsers {
  // Set only with --enable-auto-tool-choice and --tool-call-parser (as vLLM 0.33 loads it).
  const parsers::ToolParser* tool_parser = nullptr;
  bool exclude_tools_when_tool_choice_none = false;
  const parsers::ReasoningParser* reasoning_parser = nullptr;  // unset: no --reasoning-parser
  // The server's request defaults (--generation-config, --chat-template-content-format; both
  // endpoints); unset: none.
  const RequestDefaults* defaults = nullptr;
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// A chat request's tool calling, parsed and checked.
struct ToolRequest {
  // The request's tools (an array of {"type": "function", "function": {...}}), or null.
  nlohmann::ordered_json tools;
  // vLLM's default: "auto" when tools are given, "none" otherwise.
  ToolChoice choice = ToolChoice::kNone;
  std::string function;  // kNamed: the function's name
  // Only an explicit false limits the output to one call.
  bool parallel_tool_calls = true;
};

// Reads tools / tool_choice / parallel_tool_calls (vLLM's check_tool_usage) and checks the
// choice against the server: "auto" needs --enable-auto-tool-choice and --tool-call-parser,
// "required" and a named function --tool-call-parser (vLLM 0.33's messages). InvalidParam
// naming the field otherwise; an explicit null tool_choice without a parser is "none". `functions`
// and `function_call` (OpenAI's deprecated form) are refused by name.
[[nodiscard]] absl::StatusOr<ToolRequest> ParseToolRequest(const nlohmann::ordered_json& body,
                                                           const ChatParsers& parsers);

// "required" and a named function: the JSON schema the output must follow (a named
// function's parameters; for "required" an array of {"name", "parameters"} objects, at most
// one with parallel_tool_calls false, the tools' $defs merged), set as the request's
// structured output in place of any structured_outputs / response_format it had (as vLLM's
// adjust_request). A named choice beside json/regex/choice constraints is refused, as vLLM
// does. The schema is checked as structured_outputs.json is: InvalidParam naming "tools".
[[nodiscard]] absl::Status ApplyToolChoiceGrammar(const nlohmann::ordered_json& body,
                                                  const ToolRequest& tools,
                                                  core::SamplingParams* params);

// TemplateMessages, TemplateKwargs and TemplateInputFor (what the chat template renders for a
// request) live in frontend/jinja/chat_template_input.h, shared with the router.

// How the request's output is parsed (vLLM's serving_chat): the server's reasoning parser
// (include_reasoning false: split off and not sent; enable_thinking false in the kwargs: qwen3
// reads all as content), and tool calls by choice: "auto" with the server's parser when
// --enable-auto-tool-choice is on, "required" and a named function with their own parsers,
// "none" none. InvalidParam for a malformed include_reasoning.
[[nodiscard]] absl::StatusOr<ChatOutputOptions> ChatOutputFor(const nlohmann::ordered_json& body,
                                                              const ToolRequest& tools,
                                                              const nlohmann::ordered_json& kwargs,
                                                              const ChatParsers& parsers);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_CHAT_TOOLS_H_
