// POST /v1/messages: Anthropic's Messages API over the chat-completion path, as vLLM 0.33
// serves it (vllm/entrypoints/anthropic/serving.py): the request becomes a chat completion
// request, its answer (or stream) becomes Anthropic's message (or SSE events: message_start,
// content_block_start / _delta / _stop, message_delta, message_stop, error).
//
// Supported: model, messages (string content or text / thinking blocks; the "system" role),
// system (string or text blocks), max_tokens, stop_sequences, stream, temperature, top_p,
// top_k, metadata (ignored, as vLLM). Refused with a 400 naming the field: tools,
// tool_choice, thinking, output_config, and image / tool_use / tool_result blocks (not
// implemented here yet). Thread-safety: functions are pure; an AnthropicStream belongs to one
// generation.
#ifndef VLLM_FRONTEND_OPENAI_ANTHROPIC_MESSAGES_H_
#define VLLM_FRONTEND_OPENAI_ANTHROPIC_MESSAGES_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// The chat completion request body for an Anthropic Messages body. InvalidArgument naming
// the field for a body vLLM refuses (a missing model / messages / max_tokens, wrong types)
// or one this server does not support.
[[nodiscard]] absl::StatusOr<std::string> AnthropicToChatRequest(std::string_view body);

// The Anthropic message for a (non-streaming) chat completion response body.
std::string AnthropicMessageFromChat(const std::string& chat_json);

// Anthropic's error body ({"type": "error", "error": {"type", "message"}}), the error type
// from the HTTP status as vLLM's translate_error_type.
std::string AnthropicErrorJson(const absl::Status& status);

// Turns a chat completion's SSE text (any number of "data: ..." events, "[DONE]" included)
// into Anthropic's events.
class AnthropicStream {
 public:
  std::string Convert(std::string_view openai_sse);

 private:
  std::string OnChunk(const std::string& data);
  std::string StopBlock();
  std::string MessageDelta(const nlohmann::json& usage);  // usage: Anthropic's

  bool started_ = false;
  bool block_open_ = false;
  bool delta_sent_ = false;
  int32_t block_index_ = 0;
  std::string finish_reason_;
  std::optional<std::string> stop_sequence_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_ANTHROPIC_MESSAGES_H_
