#include "frontend/jinja/chat_template_input.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/ordered_json.h"
#include "base/status_param.h"

namespace vllm::frontend {
namespace {

using base::InvalidParam;
// Request bodies keep the client's key order (base/ordered_json.h), and so does what is built
// from them.
using json = nlohmann::ordered_json;
using nlohmann::ordered_json;

// The text of a message's content as the "string" content format renders it.
std::string ContentText(const json& message) {
  const json* content = base::FindField(message, "content");
  if (content == nullptr) return "";
  if (content->is_string()) return content->get<std::string>();
  std::string out;
  bool first = true;
  if (content->is_array()) {
    for (const json& part : *content) {
      const json* text = part.is_object() ? base::FindField(part, "text") : nullptr;
      if (text == nullptr || !text->is_string()) continue;
      if (!first) out += "\n";
      out += text->get<std::string>();
      first = false;
    }
  }
  return out;
}

// An assistant message's tool_calls with their arguments as objects (vLLM's
// _postprocess_messages).
absl::StatusOr<ordered_json> TemplateToolCalls(const json& calls) {
  if (!calls.is_array()) return base::WrongTypeParam("messages", "tool_calls as a list", calls);
  if (calls.size() > kMaxTemplateToolCalls) {
    return InvalidParam(
        "messages", absl::StrCat("an assistant message has ", calls.size(), " tool_calls; at most ",
                                 kMaxTemplateToolCalls, " are allowed"));
  }
  ordered_json out = ordered_json::array();
  for (const json& call : calls) {
    const json* function = call.is_object() ? base::FindField(call, "function") : nullptr;
    const json* type = call.is_object() ? base::FindField(call, "type") : nullptr;
    if (!call.is_object()) {
      return InvalidParam("tool_calls", "assistant tool_calls entries must be objects.");
    }
    if ((type != nullptr && *type != "function") || function == nullptr || !function->is_object()) {
      return InvalidParam("tool_calls",
                          "chat completions only support assistant tool_calls of type "
                          "'function'.");
    }
    ordered_json entry(call);
    ordered_json arguments = ordered_json::object();
    if (const json* a = base::FindField(*function, "arguments"); a != nullptr) {
      if (a->is_object()) {
        arguments = ordered_json(*a);
      } else if (a->is_string() && !a->get<std::string>().empty()) {
        // Malformed arguments in the history become {} so the conversation can go on.
        absl::StatusOr<ordered_json> parsed =
            base::ParseOrderedJson(a->get<std::string>(), "arguments");
        if (parsed.ok() && parsed->is_object()) arguments = ordered_json(*parsed);
      }
    }
    entry["function"]["arguments"] = std::move(arguments);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

absl::StatusOr<ordered_json> TemplateMessages(const json& body) {
  const json* messages = base::FindField(body, "messages");
  if (messages == nullptr || !messages->is_array()) {
    return InvalidParam("messages", "messages is required");
  }
  ordered_json out = ordered_json::array();
  for (const json& m : *messages) {
    if (!m.is_object()) return base::WrongTypeParam("messages", "a list of message objects", m);
    const json* role = base::FindField(m, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidParam("messages", "every message needs a string \"role\"");
    }
    ordered_json entry{{"role", *role}, {"content", ContentText(m)}};
    if (*role == "assistant") {
      if (const json* calls = base::FindField(m, "tool_calls"); calls != nullptr) {
        auto converted = TemplateToolCalls(*calls);
        if (!converted.ok()) return converted.status();
        if (!converted->empty()) entry["tool_calls"] = std::move(*converted);
      }
      const json* reasoning = base::FindField(m, "reasoning");
      if (reasoning == nullptr) reasoning = base::FindField(m, "reasoning_content");
      if (reasoning != nullptr) {
        if (!reasoning->is_string())
          return base::WrongTypeParam("messages", "reasoning as a string", *reasoning);
        entry["reasoning"] = *reasoning;
        entry["reasoning_content"] = *reasoning;
      }
    } else if (*role == "tool") {
      if (const json* id = base::FindField(m, "tool_call_id"); id != nullptr) {
        if (!id->is_string())
          return base::WrongTypeParam("messages", "tool_call_id as a string", *id);
        entry["tool_call_id"] = *id;
      }
    }
    if (const json* name = base::FindField(m, "name"); name != nullptr && name->is_string()) {
      entry["name"] = *name;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

absl::StatusOr<ordered_json> TemplateKwargs(const json& body) {
  ordered_json kwargs = ordered_json::object();
  const json* user = base::FindField(body, "chat_template_kwargs");
  if (user != nullptr) {
    if (!user->is_object()) return base::WrongTypeParam("chat_template_kwargs", "an object", *user);
    kwargs = ordered_json(*user);
  }
  if (const json* effort = base::FindField(body, "reasoning_effort"); effort != nullptr) {
    static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium",
                                               "high", "xhigh",   "max"};
    bool known = false;
    for (const char* e : kEfforts) known |= *effort == e;
    if (!known) {
      return InvalidParam("reasoning_effort",
                          absl::StrCat("reasoning_effort must be one of none, minimal, low, "
                                       "medium, high, xhigh, max; got ",
                                       effort->dump()));
    }
    kwargs["reasoning_effort"] = *effort;
    if (user == nullptr || !user->contains("enable_thinking")) {
      kwargs["enable_thinking"] = *effort != "none";
    }
  }
  return kwargs;
}

absl::StatusOr<ChatTemplateInput> TemplateInputFor(const json& body, ordered_json tools,
                                                   bool add_generation_prompt,
                                                   bool continue_final_message,
                                                   bool add_special_tokens) {
  ChatTemplateInput input;
  auto messages = TemplateMessages(body);
  if (!messages.ok()) return messages.status();
  auto kwargs = TemplateKwargs(body);
  if (!kwargs.ok()) return kwargs.status();
  input.messages = *std::move(messages);
  input.kwargs = *std::move(kwargs);
  input.tools = std::move(tools);
  input.add_generation_prompt = add_generation_prompt;
  input.continue_final_message = continue_final_message;
  input.add_special_tokens = add_special_tokens;
  return input;
}

absl::StatusOr<std::string> RenderChatPrompt(const ChatTemplate& chat_template,
                                             const ChatTemplateInput& input,
                                             const std::string& bos_token,
                                             const std::string& eos_token) {
  if (input.continue_final_message && input.add_generation_prompt) {
    return absl::InvalidArgumentError(
        "continue_final_message and add_generation_prompt cannot both be true");
  }
  absl::StatusOr<std::string> prompt = chat_template.RenderJson(
      input.messages, input.tools, input.kwargs, input.add_generation_prompt, bos_token, eos_token);
  if (!prompt.ok()) return prompt.status();
  if (input.continue_final_message && input.messages.is_array() && !input.messages.empty()) {
    // Cut what the template appended after the final message's content (end-of-turn tokens).
    const auto& content = input.messages.back().find("content");
    if (content != input.messages.back().end() && content->is_string()) {
      const std::string last = content->get<std::string>();
      const size_t at = prompt->rfind(last);
      if (at != std::string::npos) prompt->resize(at + last.size());
    }
  }
  return prompt;
}

}  // namespace vllm::frontend
