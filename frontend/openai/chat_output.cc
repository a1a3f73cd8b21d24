#include "frontend/openai/chat_output.h"

#include <utility>

namespace vllm::frontend {
namespace {

// Python's str.strip() on ASCII whitespace leaves nothing.
bool IsBlank(const std::string& text) {
  return text.find_first_not_of(" \t\n\r\v\f") == std::string::npos;
}

void AppendText(std::optional<std::string>* to, std::optional<std::string> text) {
  if (!text.has_value()) return;
  if (to->has_value()) {
    (*to)->append(*text);
  } else {
    *to = std::move(text);
  }
}

}  // namespace

void ChatMessageParts::Append(ChatMessageParts other) {
  AppendText(&content, std::move(other.content));
  AppendText(&reasoning, std::move(other.reasoning));
  for (auto& c : other.tool_calls) tool_calls.push_back(std::move(c));
  for (auto& d : other.tool_call_deltas) tool_call_deltas.push_back(std::move(d));
}

ChatMessageParts ParseChatOutput(const ChatOutputOptions& options, std::string_view text) {
  ChatMessageParts out;
  std::optional<std::string> content = std::string(text);
  if (options.reasoning != nullptr) {
    parsers::ReasoningResult r = options.reasoning->Extract(text, options.reasoning_options);
    if (options.include_reasoning) out.reasoning = std::move(r.reasoning_content);
    content = std::move(r.content);
  }
  if (options.tools != nullptr) {
    parsers::ExtractedToolCalls calls = options.tools->Extract(content.value_or(""));
    if (calls.tools_called) {
      out.tool_calls = std::move(calls.tool_calls);
      content = std::move(calls.content);
      if (content.has_value() && IsBlank(*content)) content.reset();
      if (!options.parallel_tool_calls && out.tool_calls.size() > 1) out.tool_calls.resize(1);
    }
  }
  if (options.forced) {
    out.content = std::string();  // vLLM: `content or ""`, the calls carry the output
  } else {
    out.content = std::move(content);
  }
  return out;
}

ChatOutputStream::ChatOutputStream(const ChatOutputOptions& options) : options_(options) {
  if (options.reasoning != nullptr) {
    reasoning_ = options.reasoning->NewStream(options.reasoning_options);
  }
  if (options.tools != nullptr) tools_ = options.tools->NewStream();
}

void ChatOutputStream::AddToolDelta(parsers::DeltaMessage m, ChatMessageParts* out) const {
  // Forced choices send calls only (a required array that turned out malformed sends none).
  if (!options_.forced && m.content.has_value()) AppendText(&out->content, std::move(m.content));
  for (parsers::ToolCallDelta& d : m.tool_calls) {
    if (!options_.parallel_tool_calls && d.index > 0) continue;
    out->tool_call_deltas.push_back(std::move(d));
  }
}

void ChatOutputStream::Route(parsers::ReasoningDelta r, ChatMessageParts* out) {
  if (options_.include_reasoning) AppendText(&out->reasoning, std::move(r.reasoning_content));
  if (!r.content.has_value()) return;
  if (tools_ == nullptr) {
    AppendText(&out->content, std::move(r.content));
    return;
  }
  AddToolDelta(tools_->Feed(*r.content), out);
}

ChatMessageParts ChatOutputStream::Feed(std::string_view delta) {
  ChatMessageParts out;
  if (delta.empty()) return out;
  parsers::ReasoningDelta r;
  if (reasoning_ != nullptr) {
    r = reasoning_->Feed(delta);
  } else {
    r.content = std::string(delta);
  }
  Route(std::move(r), &out);
  return out;
}

ChatMessageParts ChatOutputStream::Finish() {
  ChatMessageParts out;
  if (reasoning_ != nullptr) Route(reasoning_->Finish(), &out);
  if (tools_ != nullptr) AddToolDelta(tools_->Finish(), &out);
  return out;
}

}  // namespace vllm::frontend
