// CPU sampling: from one row of logits to one token id, with vLLM V1's sampler semantics
// (vllm/v1/sample/sampler.py): penalties, then temperature, then min-p, then top-k and
// top-p, then a draw. Greedy (temperature 0) is argmax (ties to the lowest id).
//
// Randomness is explicit: the caller passes the uniform draw `u` in [0, 1), so a
// per-request seed gives the same token whatever else is in the batch and after a
// preemption (the model runner derives u from (seed, position) with CounterUniform).
//
// Thread-safety: reentrant. Rows are independent; the caller may sample rows in parallel.
#ifndef VLLM_KERNELS_CPU_SAMPLING_H_
#define VLLM_KERNELS_CPU_SAMPLING_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace vllm::kernels::cpu {

// One request's sampling settings, already validated (core/sampling_params.h ranges).
struct SamplingRow {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1: off
};

// vLLM's penalties, in place on one row of `vocab_size` logits:
//   repetition: for every token id in the prompt or the output, logit /= r when positive,
//               logit *= r otherwise;
//   frequency:  logit -= frequency_penalty × (times the id occurs in the output);
//   presence:   logit -= presence_penalty when the id occurs in the output at all.
// Ids outside [0, vocab_size) are ignored. A no-op when all three are off.
void ApplyPenalties(float* logits, int64_t vocab_size, std::span<const int32_t> prompt_ids,
                    std::span<const int32_t> output_ids, const SamplingRow& row);

// vLLM's allowed_token_ids, bad_words and logit_bias (in vLLM's order: the allowed-ids mask,
// then bad words, then the bias), in place on one row of `vocab_size` logits:
//   allowed: every id not in `allowed_ids` gets -inf (empty: no mask);
//   bad words: for each sequence, its last token gets -inf when `output_ids` ends with the
//              sequence's other tokens (a one-token word is always banned);
//   bias: logits[id] += bias.
// Ids outside [0, vocab_size) are ignored. A no-op when all three are empty. When the masks
// leave no finite logit, id 0 gets logit 0 (vLLM samples id 0 from such a row).
void ApplyTokenConstraints(float* logits, int64_t vocab_size, std::span<const int32_t> allowed_ids,
                           std::span<const std::vector<int32_t>> bad_words,
                           std::span<const std::pair<int32_t, float>> logit_bias,
                           std::span<const int32_t> output_ids);

// Structured outputs: sets the logits of the tokens `bitmask` disallows to -inf, in place
// (vLLM's apply_grammar_bitmask; XGrammar's packed layout: bit j of word w is token 32w + j,
// set when allowed; ceil(vocab_size / 32) words). A mask that allows no token of the
// vocabulary is not applied (false): the row is sampled free and the grammar then refuses the
// token, which fails that request alone (a row of -inf would have no token to sample).
bool ApplyTokenBitmask(float* logits, int64_t vocab_size, const int32_t* bitmask);

// Samples one token from `logits` (modified in place: the row is scaled and filtered).
// Greedy when row.temperature < 1e-5, vLLM's _SAMPLING_EPS (u unused, the row untouched).
// Otherwise: logits / temperature; softmax; drop tokens with p < min_p × p_max; keep the top_k most
// likely; keep the smallest set of most likely tokens whose mass reaches top_p (at least one);
// renormalise; return the token where the cumulative probability (in descending-probability order,
// ties by lower id) first exceeds u × total.
int32_t SampleRow(float* logits, int64_t vocab_size, const SamplingRow& row, double u);

// Log-probabilities of one row (log_softmax of the raw logits, before penalties and
// temperature, as vLLM returns by default): the sampled token first, then the
// `num_logprobs` most likely tokens in descending order (ties by lower id). `rank` is the
// sampled token's 1-based rank among all tokens.
struct RowLogprobs {
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  int32_t sampled_token_rank = 0;
};
RowLogprobs ComputeLogprobs(const float* logits, int64_t vocab_size, int32_t sampled_token,
                            int32_t num_logprobs);

// A uniform double in [0, 1) that depends only on (seed, counter): a counter-based generator
// (SplitMix64 finaliser over both words), so draws are reproducible per request and position.
double CounterUniform(uint64_t seed, uint64_t counter);

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_SAMPLING_H_
