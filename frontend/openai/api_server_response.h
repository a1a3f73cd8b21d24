// ResponseAssembler: turns the deltas of one HTTP generation request's engine requests
// (prompts x n choices) into response bytes: SSE events while streaming, one JSON body
// otherwise. No I/O; the API server's session owns one per in-flight request and calls it
// from its strand only (not thread-safe).
#ifndef VLLM_FRONTEND_OPENAI_API_SERVER_RESPONSE_H_
#define VLLM_FRONTEND_OPENAI_API_SERVER_RESPONSE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/chat_output.h"
#include "frontend/openai/chat_tools.h"
#include "frontend/openai/openai_protocol.h"

namespace vllm::frontend {

enum class ApiKind { kCompletion, kChat };

// Expands a request into its engine requests, choice-major within each prompt: choice
// p * n + i is prompt p's i-th sample, with id "<response_id>-<choice>" and, when a seed is
// given, seed + i (as vLLM V1's parallel sampling does).
std::vector<GenerateRequest> FanOut(const std::vector<Prompt>& prompts,
                                    const GenerationOptions& options,
                                    const std::string& response_id, double arrival_time);

// A generation request as the server runs it: the body parsed and validated, the chat template
// applied and tokenized (chat: one token-id prompt, EngineClient::TokenizeChat's ids).
struct ParsedGeneration {
  ApiKind kind = ApiKind::kCompletion;
  std::vector<Prompt> prompts;
  GenerationOptions options;
  bool logprobs = false;  // choices carry a logprobs object
  // echo: per prompt, the text its choices start with (a text prompt as given, a token-id
  // prompt decoded with its special tokens, as vLLM); empty without echo.
  std::vector<std::string> echo_texts;
  // echo with logprobs: each choice's logprobs start with its prompt's (vLLM's echo).
  bool echo_logprobs = false;
  // Chat: how each choice's text becomes its message (reasoning, tool calls).
  ChatOutputOptions chat_output;
};

// Parses a /v1/completions or /v1/chat/completions body against `engine`'s model and chat
// template. Every failure is a Status for the error body (400 for a malformed or invalid body,
// 404 for another model); never throws. CPU-heavy for large bodies (JSON, chat template): the
// server runs it off its I/O threads.
// `parsers`: the server's tool-call and reasoning parsers (chat only).
[[nodiscard]] absl::StatusOr<ParsedGeneration> ParseGeneration(ApiKind kind, std::string_view body,
                                                               const EngineClient& engine,
                                                               const ChatParsers& parsers = {});

// POST /tokenize and POST /detokenize: the body parsed, tokenized or decoded by `engine`, and
// vLLM's response body (see openai_protocol.h). Failures are Statuses for the error body
// (400 for a bad body or an id outside the vocabulary, 404 for another model). CPU-heavy for
// large bodies: the server runs them off its I/O threads.
[[nodiscard]] absl::StatusOr<nlohmann::json> HandleTokenize(std::string_view body,
                                                            const EngineClient& engine);
[[nodiscard]] absl::StatusOr<nlohmann::json> HandleDetokenize(std::string_view body,
                                                              const EngineClient& engine);

class ResponseAssembler {
 public:
  // `num_choices` = prompts x `n`; choice i belongs to prompt i / n. `logprobs` says whether
  // choices carry a logprobs object.
  ResponseAssembler(ApiKind kind, ResponseMeta meta, int32_t num_choices, int32_t n, bool stream,
                    bool include_usage, bool logprobs);

  // echo: choice i's text starts with prompt_texts[i / n] (streaming: in its first chunk).
  // Call before the first OnOutput.
  void SetEcho(std::vector<std::string> prompt_texts);
  // Logprobs' tokens become "token_id:<id>" (vLLM's return_tokens_as_token_ids).
  void SetTokensAsTokenIds(bool value) { tokens_as_ids_ = value; }
  // echo with logprobs: a choice's logprobs start with its prompt_logprobs (the first prompt
  // token with null logprobs, then at most `num_top` alternatives each). Call before the
  // first OnOutput.
  void SetEchoLogprobs(int32_t num_top) { echo_logprobs_top_ = num_top; }
  // Chat: parse each choice's text into reasoning, content and tool calls. Call before the
  // first OnOutput.
  void SetChatOutput(ChatOutputOptions options);
  // vLLM's return_token_ids (choices' token_ids, prompt_token_ids), continuous_usage_stats
  // (usage in every chunk) and request_id (the response id) of `options`, and the server's
  // response flags it carries (response_role, prompt_tokens_details, per_request_metrics,
  // log_outputs). Call before Start().
  void SetOptions(const GenerationOptions& options);
  // Streaming: a choice's deltas are held until they carry `tokens` new tokens (vLLM's
  // stream_interval); its first and last deltas go out at once. Call before the first OnOutput.
  void SetStreamInterval(int32_t tokens) { stream_interval_ = tokens; }

  // Streaming: the events that open the stream (chat: one role chunk per choice).
  std::string Start();
  // Applies one delta of choice `index` (0 <= index < num_choices, not yet finished).
  // Streaming: returns the SSE events to send now (possibly empty); otherwise "".
  std::string OnOutput(int32_t index, const GenerateOutput& output);
  bool AllFinished() const { return num_finished_ == static_cast<int32_t>(choices_.size()); }
  // Call once AllFinished(). Streaming: the closing events (usage chunk when asked, then
  // [DONE]); otherwise the JSON response body.
  std::string Finish() const;
  // Streaming: the events ending a stream that failed (vLLM's error event, then [DONE]).
  static std::string StreamError(const absl::Status& status);

  const ResponseMeta& meta() const { return meta_; }

 private:
  struct ChoiceState {
    Choice choice;  // accumulated text, logprobs and finish state
    int32_t prompt_tokens = 0;
    int32_t output_tokens = 0;
    bool finished = false;
    std::string echo;  // text still to put before the choice's next text (echo)
    std::unique_ptr<ChatOutputStream> parser;  // a stream's output parsing (SetChatOutput)
    std::vector<int32_t> prompt_token_ids;     // return_token_ids: from the first delta
    std::vector<int32_t> token_ids;            // return_token_ids: the output so far
    bool started = false;                      // a stream: its first chunk went out
    // A stream with SetStreamInterval: the deltas held back (merged), and the output tokens
    // sent so far (-1: nothing sent yet).
    std::optional<GenerateOutput> held;
    int32_t sent_tokens = -1;
    // The latest delta's prefix-cache hits and engine timestamps (per-request metrics), and
    // the raw output text (the output log).
    int32_t cached_tokens = 0;
    int32_t created_cache_tokens = 0;
    double queued_ts = 0.0, scheduled_ts = 0.0, first_token_ts = 0.0, last_token_ts = 0.0;
    std::string log_text;
  };
  // A stream's chunk of choice `index` with what SetOptions asked for (token ids, usage).
  std::string StreamChunk(const ChoiceState& state, const Choice& delta,
                          const GenerateOutput& output, bool first_chunk) const;
  // OnOutput without the stream interval.
  std::string Apply(int32_t index, const GenerateOutput& output);
  // return_token_ids on a finished non-streaming body.
  void AddTokenIds(nlohmann::json* body) const;
  // A streamed chat choice's delta through its output parser.
  void ParseDelta(ChoiceState& state, const GenerateOutput& output, Choice* delta);

  Usage TotalUsage() const;
  // vLLM's PerRequestMetrics of the single choice (build_per_request_timing_metrics); a
  // stream's leaves out the fields it cannot compute (null in a body).
  nlohmann::json MetricsJson(bool drop_null) const;
  // --enable-log-outputs: vLLM's RequestLogger.log_outputs lines for a stream's delta, and
  // for the finished response.
  void LogDelta(const Choice& delta, const GenerateOutput& output) const;
  void LogFinished() const;

  const ApiKind kind_;
  ResponseMeta meta_;
  const int32_t n_;
  const bool stream_;
  const bool include_usage_;
  const bool logprobs_;
  bool tokens_as_ids_ = false;
  bool return_token_ids_ = false;
  bool continuous_usage_ = false;
  bool echo_ = false;  // completions: token_ids start with the prompt's (vLLM's echo)
  // Chat streams with token ids or continuous usage: each choice's role chunk waits for its
  // first delta (it carries the prompt's ids and token count).
  bool lazy_role_ = false;
  int32_t echo_logprobs_top_ = -1;  // -1: no echo logprobs
  int32_t stream_interval_ = 1;
  bool prompt_tokens_details_ = false;  // usage.prompt_tokens_details
  bool per_request_metrics_ = false;    // the response's `metrics`
  bool log_outputs_ = false;            // output log lines, deltas too with log_deltas_
  bool log_deltas_ = true;
  std::optional<int64_t> log_max_len_;
  std::optional<std::string> prompt_text_;  // chat's return_prompt_text
  ChatOutputOptions chat_output_;           // the streams' parsers refer to it
  std::vector<ChoiceState> choices_;
  int32_t num_finished_ = 0;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_API_SERVER_RESPONSE_H_
