// The request limits that are vLLM's environment variables (config/vllm_envs.h), with vLLM's
// defaults and messages: VLLM_MAX_N_SEQUENCES (n, best_of, beam_width),
// VLLM_MAX_COMPLETION_PROMPTS (a list of prompts in /v1/completions), VLLM_MAX_STOP_STRINGS
// (the entries of a `stop` list). The serve path sets them once at start-up, before the server
// takes requests (SetRequestLimits); without it (unit tests, fuzzers) they are vLLM's defaults.
#ifndef VLLM_FRONTEND_OPENAI_REQUEST_LIMITS_H_
#define VLLM_FRONTEND_OPENAI_REQUEST_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace vllm::frontend {

struct RequestLimits {
  int32_t max_n = 16384;         // VLLM_MAX_N_SEQUENCES
  int32_t max_prompts = 1024;    // VLLM_MAX_COMPLETION_PROMPTS
  int32_t max_stop_strings = 4;  // VLLM_MAX_STOP_STRINGS
};
const RequestLimits& GetRequestLimits();
// Before the server starts (not synchronised with readers).
void SetRequestLimits(const RequestLimits& limits);

// Our bound on prompts x n in one request (each choice is one engine request), beyond vLLM's
// (which has none): vLLM's default n limit, or max_n when that is larger, so that every n
// vLLM accepts fits with one prompt.
inline constexpr int32_t kMaxChoicesPerRequest = 16384;

// vLLM's _verify_num_sequences for `name` (n, beam_width): at least 1 and at most max_n, with
// vLLM's messages ("... set the VLLM_MAX_N_SEQUENCES environment variable."); InvalidParam
// naming the field otherwise.
[[nodiscard]] absl::Status CheckNumSequences(int64_t value, const char* name);
// VLLM_MAX_COMPLETION_PROMPTS on a list of `count` prompts (vLLM's
// validate_prompt_list_length and its message); InvalidParam("prompt").
[[nodiscard]] absl::Status CheckPromptCount(size_t count);
// VLLM_MAX_STOP_STRINGS on a `stop` list of `count` entries (pydantic's max_length message, as
// vLLM's 400 carries it); InvalidParam("stop").
[[nodiscard]] absl::Status CheckStopStringCount(size_t count);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_REQUEST_LIMITS_H_
