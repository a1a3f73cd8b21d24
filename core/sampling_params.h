// SamplingParams: how one request's tokens are sampled and when it stops (vLLM's
// vllm.SamplingParams, minus what the frontend handles: stop strings, detokenization).
//
// A plain value type; copyable, no invariants until ValidateSamplingParams() accepts it.
#ifndef VLLM_CORE_SAMPLING_PARAMS_H_
#define VLLM_CORE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "config/vllm_config.h"
#include "structured_output/params.h"

namespace vllm::core {

struct SamplingParams {
  // Number of output sequences; only 1 is supported by the engine core (the frontend fans
  // out n > 1 into several requests, as vLLM V1 does).
  int32_t n = 1;
  // 0 means greedy.
  double temperature = 1.0;
  // Nucleus sampling mass in (0, 1].
  double top_p = 1.0;
  // -1 or 0 disables top-k; otherwise >= 1.
  int32_t top_k = 0;
  // Minimum probability relative to the most likely token, in [0, 1].
  double min_p = 0.0;
  double presence_penalty = 0.0;    // [-2, 2]
  double frequency_penalty = 0.0;   // [-2, 2]
  double repetition_penalty = 1.0;  // > 0
  // Per-request sampler seed; unset means non-deterministic.
  std::optional<int64_t> seed;
  // Maximum number of generated tokens. Unset: up to max_model_len (see
  // ResolveMaxTokens()).
  std::optional<int32_t> max_tokens;
  // Stop conditions (EOS, stop_token_ids) are ignored until this many tokens were generated.
  int32_t min_tokens = 0;
  // Generating any of these ends the request with FinishReason::kStop and the token id as
  // stop_reason.
  std::vector<int32_t> stop_token_ids;
  // When true, the EOS token does not stop the request.
  bool ignore_eos = false;
  // Number of log-probabilities to return per generated token; unset returns none.
  std::optional<int32_t> logprobs;
  // Number of log-probabilities to return per prompt position (vLLM's prompt_logprobs): for
  // every prompt token after the first, its logprob given the tokens before it, its rank and
  // the top `prompt_logprobs` alternatives, from the raw logits. Unset returns none. A request
  // asking for them never reads the prefix cache (the cached positions' logits are gone).
  std::optional<int32_t> prompt_logprobs;
  // The output's constraint (JSON schema, regex, choice, grammar, ...; vLLM's
  // structured_outputs); unset for free text. Only the engine core reads it: the scheduler
  // strips it from the copy workers get (they receive the step's token bitmask instead).
  std::optional<structured_output::StructuredOutputsParams> structured_outputs;
  // vLLM's logits processors, applied to the logits the sampler sees (after the grammar
  // bitmask, before penalties and temperature; logprobs stay those of the raw logits):
  //   allowed_token_ids: only these ids may be sampled (empty: every id);
  //   bad_words_token_ids: each a token sequence (vLLM's _bad_words_token_ids, tokenized by
  //     the frontend); its last token is banned where the output ends with the others;
  //   logit_bias: (token id, bias) pairs added to the logits, bias in [-100, 100], ids
  //     unique and ascending.
  std::vector<int32_t> allowed_token_ids;
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  std::vector<std::pair<int32_t, float>> logit_bias;

  friend bool operator==(const SamplingParams&, const SamplingParams&) = default;
};

// Upper bounds on user-facing sizes (a request beyond them is rejected, not truncated).
inline constexpr int32_t kMaxStopTokenIds = 1024;
// allowed_token_ids and logit_bias entries (a vocabulary's worth), bad-word sequences (vLLM's
// VLLM_MAX_NUM_BAD_WORDS default) and tokens per sequence.
inline constexpr int32_t kMaxTokenIdList = 1 << 18;
inline constexpr int32_t kMaxBadWords = 128;
inline constexpr int32_t kMaxBadWordTokens = 256;
// Bounds logprobs and prompt_logprobs alike: the most --max-logprobs may allow (the engine
// client refuses more than the configured --max-logprobs: frontend::CheckMaxLogprobs).
inline constexpr int32_t kMaxLogprobs = config::kMaxLogprobsLimit;

// Returns OK when every field is in range, otherwise InvalidArgument naming the field, the
// value and the accepted range (for example "top_p must be in (0, 1], got 1.5").
[[nodiscard]] absl::Status ValidateSamplingParams(const SamplingParams& params);

}  // namespace vllm::core

#endif  // VLLM_CORE_SAMPLING_PARAMS_H_
