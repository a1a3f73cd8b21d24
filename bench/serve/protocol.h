// The OpenAI wire format as `vllm bench serve` speaks it: the streaming request body for
// /v1/completions and /v1/chat/completions, and the parser that turns the server-sent-event
// stream of one response into a RequestOutput (TTFT, ITL, usage). No I/O; thread-compatible.
#ifndef VLLM_BENCH_SERVE_PROTOCOL_H_
#define VLLM_BENCH_SERVE_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "bench/serve/dataset.h"
#include "bench/serve/metrics.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {

// The two request formats of vLLM's benchmark.
enum class BenchBackend {
  kOpenAICompletions,  // "openai": POST /v1/completions, `prompt` (text or token ids)
  kOpenAIChat,         // "openai-chat": POST /v1/chat/completions, one user message
};

// Sampling fields shared by every request of a run.
struct RequestSettings {
  std::string model;
  // Sent only when given (vLLM's bench no longer sends temperature 0 by default).
  std::optional<double> temperature;
  bool ignore_eos = false;
  // Further body fields: --extra-body and vLLM's --top-p/--top-k/--min-p/--frequency-penalty/
  // --presence-penalty/--repetition-penalty (a JSON object, possibly empty).
  nlohmann::json extra_body = nlohmann::json::object();
};

// The JSON body vLLM's request functions send: "model", "prompt" (or "messages"),
// "max_tokens" (chat: "max_completion_tokens"), "stream": true,
// "stream_options": {"include_usage": true}, "ignore_eos" when set,
// "structured_outputs": {"json": schema} when the request has a JSON schema (vLLM's request
// field, which ours takes too, on both endpoints), then "temperature" when given and the
// extra_body fields, which override any of the above (vLLM's payload.update(extra_body)). Token-id
// prompts are sent as an array of ints; the chat backend needs a text prompt (checked by the
// caller).
std::string BuildRequestBody(BenchBackend backend, const RequestSettings& settings,
                             const SampleRequest& request);

// Accumulates one streamed response. Feed() takes body bytes as they arrive (any split), with
// the time they arrived in seconds since the request was sent; Finish() gives the result.
// A line is `data: {json}` or `data: [DONE]`; blank lines and SSE comments (":...") are
// skipped. A chunk with non-empty "choices" is a token chunk (the first sets TTFT, later ones
// add an ITL gap, its text is appended, a string "finish_reason" is kept); a chunk with "usage"
// sets the output (and, when the dataset did not know it, input) token count; a chunk with
// "error" or anything that is not such JSON makes the request fail with that message, like a
// malformed stream in vLLM.
class SseResponseParser {
 public:
  // `prompt_len`: the dataset's prompt length (0 if unknown: usage.prompt_tokens is used).
  SseResponseParser(BenchBackend backend, int64_t prompt_len);

  // Consumes body bytes received at `now_s`. Stops parsing after the first error.
  void Feed(absl::string_view bytes, double now_s);

  // True once a malformed line or an error chunk was seen.
  bool failed() const { return !output_.error.empty(); }

  // Ends the stream: handles a last line without a newline and decides success (at least one
  // token chunk and no error; otherwise fails with vLLM's "Never received a valid chunk"
  // message). Call once.
  RequestOutput Finish(double now_s);

 private:
  void HandleLine(absl::string_view line, double now_s);

  BenchBackend backend_;
  std::string pending_;  // bytes after the last newline
  RequestOutput output_;
  bool first_token_seen_ = false;
  bool usage_seen_ = false;
  int64_t token_chunks_ = 0;
  double last_token_s_ = 0.0;
};

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_PROTOCOL_H_
