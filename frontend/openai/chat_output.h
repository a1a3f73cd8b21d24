// How a chat choice's generated text becomes its assistant message, as vLLM's serving_chat
// does it: the reasoning parser splits off the <think> part first (`reasoning`), then the
// request's tool parser finds the function calls in the rest — the server's
// --tool-call-parser for tool_choice "auto", the forced choices' own parsers for "required"
// and a named function (frontend/parsers/tool_parser.h). Whole (a non-streaming response) or
// delta by delta (a stream). No I/O.
#ifndef VLLM_FRONTEND_OPENAI_CHAT_OUTPUT_H_
#define VLLM_FRONTEND_OPENAI_CHAT_OUTPUT_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/parsers/reasoning_parser.h"
#include "frontend/parsers/tool_parser.h"

namespace vllm::frontend {

// A request's output parsing (none of it: the text is the content).
struct ChatOutputOptions {
  const parsers::ReasoningParser* reasoning = nullptr;  // the server's, shared
  parsers::ReasoningRequestOptions reasoning_options;
  bool include_reasoning = true;  // false: reasoning is split off and not sent
  // The request's tool calls: the server's parser (auto) or a forced choice's own.
  std::shared_ptr<const parsers::ToolParser> tools;
  // "required" or a named function: the message has calls and content "" (vLLM).
  bool forced = false;
  // A named function: finish_reason stays "stop" (OpenAI's, and vLLM's, rule).
  bool named = false;
  // false: only the first call is kept.
  bool parallel_tool_calls = true;

  bool active() const { return reasoning != nullptr || tools != nullptr; }
};

// One choice's message fields (a whole message, or one stream step's delta of them). Each is
// sent only when set (tool calls only when any).
struct ChatMessageParts {
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<parsers::ToolCall> tool_calls;             // a whole message
  std::vector<parsers::ToolCallDelta> tool_call_deltas;  // a stream step

  bool empty() const {
    return !content.has_value() && !reasoning.has_value() && tool_calls.empty() &&
           tool_call_deltas.empty();
  }
  void Append(ChatMessageParts other);
};

// A whole output's message.
ChatMessageParts ParseChatOutput(const ChatOutputOptions& options, std::string_view text);

// One streamed choice. Not thread-safe.
class ChatOutputStream {
 public:
  explicit ChatOutputStream(const ChatOutputOptions& options);
  // The next text delta: what can be sent now (text that may still be a tag or a call is
  // held back).
  ChatMessageParts Feed(std::string_view delta);
  // The output ended: what was held back.
  ChatMessageParts Finish();
  // Whether a call has been sent (finish_reason "tool_calls" unless named).
  bool tools_called() const { return tools_ != nullptr && tools_->tools_called(); }

 private:
  // Passes reasoning-split text on to the tool stream (or through).
  void Route(parsers::ReasoningDelta r, ChatMessageParts* out);
  void AddToolDelta(parsers::DeltaMessage m, ChatMessageParts* out) const;

  const ChatOutputOptions& options_;
  std::unique_ptr<parsers::ReasoningStreamParser> reasoning_;
  std::unique_ptr<parsers::ToolStreamParser> tools_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_CHAT_OUTPUT_H_
