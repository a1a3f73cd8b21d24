// ChatTemplateInput: what a chat template renders for an OpenAI chat request (transformers'
// apply_chat_template arguments, as vLLM's serving_chat builds them) and the prompt it renders.
// Pure functions over the request's JSON, shared by the API server (chat completions,
// /tokenize) and the router (kv_aware tokenizes prompts as the workers do), so both render the
// same text: the same token ids.
#ifndef VLLM_FRONTEND_JINJA_CHAT_TEMPLATE_INPUT_H_
#define VLLM_FRONTEND_JINJA_CHAT_TEMPLATE_INPUT_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "frontend/jinja/chat_template.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// At most this many tool_calls in one assistant message of the history (as the tool parsers'
// parsers::kMaxToolCalls for an output).
inline constexpr size_t kMaxTemplateToolCalls = 1024;

// What a chat's template renders (see ChatTemplate::RenderJson): the messages as the template
// sees them (TemplateMessages), the request's tools (an array, or null), its template variables
// (TemplateKwargs), and the prompt flags.
struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: the template sees `tools` as none
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
};

// The messages as the chat template sees them (vLLM's parse_chat_messages with the "string"
// content format): content parts joined with "\n", assistant tool_calls with their
// arguments parsed into objects ({} for empty, malformed or non-object arguments), empty
// tool_calls dropped, reasoning / reasoning_content as both names, tool_call_id and name
// kept. The API server checked the body's messages already (ParseChatCompletionRequest or
// ParseTokenizeRequest); InvalidParam (base/status_param.h) for a malformed message or tool
// call.
[[nodiscard]] absl::StatusOr<nlohmann::ordered_json> TemplateMessages(
    const nlohmann::ordered_json& body);

// The template's extra variables: the request's chat_template_kwargs, and reasoning_effort
// (with enable_thinking = effort != "none" when the kwargs do not set it, as vLLM).
[[nodiscard]] absl::StatusOr<nlohmann::ordered_json> TemplateKwargs(
    const nlohmann::ordered_json& body);

// What the chat template renders for `body`: TemplateMessages, TemplateKwargs, `tools` (an
// array, or null) and the prompt flags.
[[nodiscard]] absl::StatusOr<ChatTemplateInput> TemplateInputFor(const nlohmann::ordered_json& body,
                                                                 nlohmann::ordered_json tools,
                                                                 bool add_generation_prompt,
                                                                 bool continue_final_message,
                                                                 bool add_special_tokens);

// The prompt text `input` renders to (tokenize it with input.add_special_tokens): with
// continue_final_message, cut after the final message's content (what the template appended
// after it, end-of-turn tokens, dropped). InvalidArgument when continue_final_message and
// add_generation_prompt are both set; the template's errors otherwise.
[[nodiscard]] absl::StatusOr<std::string> RenderChatPrompt(const ChatTemplate& chat_template,
                                                           const ChatTemplateInput& input,
                                                           const std::string& bos_token,
                                                           const std::string& eos_token);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_JINJA_CHAT_TEMPLATE_INPUT_H_
