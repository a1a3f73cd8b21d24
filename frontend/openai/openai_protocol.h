// The OpenAI-compatible wire protocol (vLLM's vllm/entrypoints/openai/protocol.py):
// request parsing and validation for /v1/completions and /v1/chat/completions, the error
// body, and the response and SSE-chunk builders. Pure functions over nlohmann::json; no I/O,
// no threads, so every rule is unit-testable.
//
// Errors are absl::Status values: InvalidArgument (HTTP 400 BadRequestError), NotFound (404
// NotFoundError), Unauthenticated (401), ResourceExhausted (413), Unavailable (503), others
// 500. The offending field travels as a payload (InvalidParam / ErrorParam,
// frontend/engine/engine_client.h) and becomes the body's "param".
#ifndef VLLM_FRONTEND_OPENAI_OPENAI_PROTOCOL_H_
#define VLLM_FRONTEND_OPENAI_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/sampling_params.h"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/chat_output.h"
#include "frontend/openai/request_limits.h"
#include "kv_transfer/types.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// Limits on request sizes (a request beyond them is rejected with 400, not truncated); n, the
// prompts of a list and the stop strings follow vLLM's variables (request_limits.h).
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr int32_t kMaxChatMessages = 4096;

// ---- Errors -------------------------------------------------------------------------------

// InvalidParam / ErrorParam (the request field at fault) are frontend/engine/engine_client.h's.
// The HTTP status code for a non-OK status (see the file comment).
int HttpStatusFor(const absl::Status& status);
// vLLM's (and OpenAI's) error body: {"error": {"message", "type", "param", "code"}}, with the
// HTTP status as "code". The same shape is sent as an SSE event when a stream fails, which is
// what makes the OpenAI SDKs raise mid-stream.
nlohmann::json ErrorBody(const absl::Status& status);
nlohmann::json ErrorBody(int http_code, absl::string_view type, absl::string_view message,
                         const std::optional<std::string>& param = std::nullopt);

// Serializes without throwing: invalid UTF-8 (a partial token) becomes U+FFFD.
std::string DumpJson(const nlohmann::json& value);
// Parses a request body; InvalidArgument (400) when it is not JSON (syntax, a number out of
// double range such as 1e309), nests deeper than base::kMaxJsonDepth, or is not an object.
// Never throws.
// Keys stay in the body's order (base::ParseOrderedJson): schemas and tools reach XGrammar and
// the chat template as the client wrote them, as in vLLM.
[[nodiscard]] absl::StatusOr<nlohmann::ordered_json> ParseJsonObject(std::string_view body);

// ---- Requests -----------------------------------------------------------------------------

// Options shared by completions and chat completions.
struct GenerationOptions {
  // Sampling parameters with n = 1 (validated by core::ValidateSamplingParams).
  core::SamplingParams params;
  int32_t n = 1;  // choices per prompt, in [1, GetRequestLimits().max_n]
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t priority = 0;
  std::optional<std::string> user;
  // Logprobs' tokens are rendered "token_id:<id>" (vLLM's return_tokens_as_token_ids).
  bool return_tokens_as_token_ids = false;
  // Disaggregated prefill/decode (vLLM's kv_transfer_params; kv_transfer_params.h parses it).
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
  // vLLM 0.33's own fields (request_fields.h parses them; logit_bias and allowed_token_ids
  // are params'). bad_words: tokenized by the engine client (GenerateRequest::bad_words).
  std::vector<std::string> bad_words;
  // truncate_prompt_tokens (-1: max_model_len - 1) and truncation_side (default "left").
  std::optional<int64_t> truncate_prompt_tokens;
  bool truncate_left = true;
  // Completions: the tokenizer's special tokens (BOS) added to a text prompt (default true).
  bool add_special_tokens = true;
  // Choices carry token_ids, and prompt_token_ids (vLLM's return_token_ids).
  bool return_token_ids = false;
  // stream_options.continuous_usage_stats (with include_usage): usage in every chunk.
  bool continuous_usage_stats = false;
  // The response id is "cmpl-<request_id>" / "chatcmpl-<request_id>" (vLLM's request_id).
  std::optional<std::string> request_id;
  // Salts the prefix cache's first block hash (vLLM's cache_salt).
  std::optional<std::string> cache_salt;
  // Chat: the text of the last message, when echo is set and its role is the response's.
  std::optional<std::string> chat_echo;
  // vLLM's use_beam_search (n is the beam width) and length_penalty (beam_search.h).
  bool use_beam_search = false;
  double length_penalty = 1.0;
  // Streaming: tokens per chunk, the first and last excepted (vLLM's stream_interval; the
  // server's --stream-interval raises it).
  int32_t stream_interval = 1;
  // Chat's return_prompt_text: the response carries the rendered chat prompt (prompt_text).
  bool return_prompt_text = false;
  // The server's response flags (request_defaults.h; not request fields): a chat response's
  // role (--response-role with add_generation_prompt, else the last message's role),
  // usage.prompt_tokens_details (--enable-prompt-tokens-details), vLLM's per-request
  // `metrics` (--enable-per-request-metrics), and the output log lines (--enable-log-outputs,
  // --enable-log-deltas; cut to log_max_len code points / ids).
  std::string response_role = "assistant";
  bool prompt_tokens_details = false;
  bool per_request_metrics = false;
  bool log_outputs = false;
  bool log_deltas = true;
  std::optional<int64_t> log_max_len;
  std::optional<std::string> prompt_text;
};

// One prompt of a completion request: text, or token ids when `text` is unset.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

// A parsed POST /v1/completions body. `best_of` > 1 and `suffix` are rejected (400): the
// server does not implement them. `prompt_logprobs` (both endpoints) is
// options.params.prompt_logprobs, refused with stream unless 0 (as vLLM); `echo` with
// `logprobs` sets it to `logprobs` when unset (vLLM then returns the prompt tokens' logprobs
// first in the choice's logprobs).
struct CompletionRequest {
  std::string model;
  std::vector<Prompt> prompts;  // 1..GetRequestLimits().max_prompts
  GenerationOptions options;
  // Each choice's text starts with its prompt's text (vLLM's echo).
  bool echo = false;
};

// A parsed POST /v1/chat/completions body. The chat `logprobs` (bool) and `top_logprobs`
// map to options.params.logprobs (unset unless logprobs is true).
struct ChatCompletionRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // 1..kMaxChatMessages
  GenerationOptions options;
  bool logprobs = false;
  // From chat_template_kwargs or the top-level fields of the same names (vLLM accepts both).
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // The tokenizer's special tokens added to the rendered chat (vLLM's default: false, the
  // template writes BOS itself).
  bool add_special_tokens = false;
};

// A parsed POST /tokenize body, vLLM's TokenizeCompletionRequest ({"prompt": str}) or, when
// "messages" is present, TokenizeChatRequest. A "chat_template" of the request is refused
// (400), as vLLM does without --trust-request-chat-template.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;  // the completion form; unset for the chat form
  std::vector<ChatMessage> messages;  // the chat form: 1..kMaxChatMessages
  // Default true for the completion form, false for the chat form (as vLLM).
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool return_token_strs = false;
};

// A parsed POST /detokenize body ({"model"?, "tokens": [int]}); ids are range-checked
// against the vocabulary by the engine client, not here.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Parse and validate a request body against the served model's name. A "model" other than
// `served_model` is NotFound ("The model `x` does not exist."); a missing "model" means the
// served one. Every other problem is InvalidArgument naming the field, the value and the
// accepted range. Unknown fields are ignored (as in vLLM).
[[nodiscard]] absl::StatusOr<CompletionRequest> ParseCompletionRequest(
    const nlohmann::ordered_json& body, absl::string_view served_model);
[[nodiscard]] absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(
    const nlohmann::ordered_json& body, absl::string_view served_model);
[[nodiscard]] absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(
    const nlohmann::ordered_json& body, absl::string_view served_model);
[[nodiscard]] absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(
    const nlohmann::ordered_json& body, absl::string_view served_model);

// ---- Responses ----------------------------------------------------------------------------

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // With --enable-prompt-tokens-details: prompt_tokens_details {"cached_tokens": N}, and
  // for chat "created_cache_tokens": M (prompt tokens written to the prefix cache).
  std::optional<int64_t> cached_tokens = std::nullopt;
  std::optional<int64_t> created_cache_tokens = std::nullopt;
};

// One finished (or, for chunks, partial) choice.
struct Choice {
  int32_t index = 0;
  std::string text;
  std::optional<core::FinishReason> finish_reason;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  // Present when the request asked for logprobs.
  std::optional<std::vector<PositionLogprobs>> logprobs;
  // Length of the choice's text before `text` (for completion logprobs' text_offset).
  size_t text_offset = 0;
  // vLLM's prompt_logprobs (one entry per prompt token, the first no_logprob): in the choice
  // of a completion, at the top level of a chat response (its first choice's); in a stream,
  // in the choice's first chunk.
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  // Chat with output parsing (a reasoning parser, tool calls): the message's fields (a chunk:
  // this step's delta of them); unset: `text` is the content.
  std::optional<ChatMessageParts> chat;
  // finish_reason "tool_calls" in place of "stop": the choice made calls (tool_choice not a
  // named function).
  bool tool_calls_finish = false;
  // The engine's kv_transfer_params, on a finished choice (a chunk: the one finishing it).
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
};

// Identity of one response, shared by all its chunks.
struct ResponseMeta {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // seconds since the epoch
  std::string model;
  std::string role = "assistant";  // chat: the message's role (vLLM's get_chat_request_role)
};

// Non-streaming bodies ("text_completion" / "chat.completion"). Their top-level
// "kv_transfer_params" is the first choice's (vLLM: the first prompt's), null when it has none.
nlohmann::json BuildCompletionResponse(const ResponseMeta& meta, const std::vector<Choice>& choices,
                                       const Usage& usage);
nlohmann::json BuildChatCompletionResponse(const ResponseMeta& meta,
                                           const std::vector<Choice>& choices, const Usage& usage);

// One streaming chunk with one choice. For chat, `first` adds the assistant role to the
// delta (vLLM sends it in a chunk of its own, with empty content). As in vLLM, every chunk but
// the role chunk has a top-level "kv_transfer_params": the choice's on the chunk finishing it,
// null otherwise.
nlohmann::json BuildCompletionChunk(const ResponseMeta& meta, const Choice& choice);
nlohmann::json BuildChatChunk(const ResponseMeta& meta, const Choice& choice, bool first);
// The final usage chunk (choices: []) of a stream with include_usage; `object` is
// "text_completion" or "chat.completion.chunk".
nlohmann::json BuildUsageChunk(const ResponseMeta& meta, absl::string_view object,
                               const Usage& usage);

// vLLM's TokenizeResponse {"count", "max_model_len", "tokens", "token_strs"} (token_strs
// null unless given) and DetokenizeResponse {"prompt"}.
nlohmann::json BuildTokenizeResponse(const std::vector<int32_t>& tokens, int32_t max_model_len,
                                     const std::optional<std::vector<std::string>>& token_strs);
nlohmann::json BuildDetokenizeResponse(const std::string& prompt);

// vLLM's rendering of a logprobs token with return_tokens_as_token_ids: "token_id:<id>".
std::string TokenIdString(int32_t token_id);

// "data: <json>\n\n" and the terminating "data: [DONE]\n\n".
std::string SseEvent(const nlohmann::json& value);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_OPENAI_PROTOCOL_H_
