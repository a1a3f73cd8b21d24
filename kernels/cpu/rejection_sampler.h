// CPU rejection sampler of speculative decoding (vLLM V1's vllm/v1/sample/rejection_sampler.py;
// Leviathan et al., arXiv 2211.17192): verifies one request's k draft tokens against the target
// model's k + 1 rows of logits and emits between 1 and k + 1 tokens whose distribution is
// exactly the one non-speculative sampling (SampleRow, one token at a time) would give.
//
// Greedy rows (temperature < 1e-5, as SampleRow): draft j is accepted while it equals row j's
// argmax (ties to the lowest id); the first mismatch emits the argmax instead, and when all k
// match the bonus token is row k's argmax. The output is token-identical to greedy decoding.
//
// Random rows: p_j is row j's distribution after SampleRow's filter (temperature, min-p,
// top-k, top-p), q_j the proposer's distribution for draft j. Draft j is accepted iff
// u_accept[j] < p_j(d) / q_j(d) (so with probability min(1, p/q); a token the filter dropped
// is never accepted; q_j(d) <= 0 or NaN rejects, as vLLM). At the first rejection the
// correction is drawn from normalise(max(p_j - q_j, 0)) with u_sample[j], by SampleRow's
// inverse-CDF convention (walk in descending residual probability, ties by lower id); when all
// k are accepted the bonus token is SampleRow(row k, u_sample[k]).
//
// Two points where we differ from vLLM 0.33, both so that the distribution is exact:
//   - min-p filters every row here; vLLM applies only temperature, top-k and top-p to the
//     draft positions (min-p reaches its bonus token alone).
//   - vLLM accepts iff p/q >= u, which with u = 0 accepts a token of target probability 0; we
//     accept iff u < p/q (the two agree except on that null set).
//   A draft id outside [0, vocab_size) (vLLM pads with -1) is rejected without being read,
//   and its correction is drawn from p_j itself: a draft rejected regardless of the draws
//   carries no information, so the residual would bias the output.
//
// Thread-safety: reentrant; requests are independent and may be verified in parallel.
#ifndef VLLM_KERNELS_CPU_REJECTION_SAMPLER_H_
#define VLLM_KERNELS_CPU_REJECTION_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace vllm::kernels::cpu {

// Verifies one request's k = draft.size() draft tokens.
//   logits       (k + 1) × vocab_size, row-major: row j is the target's distribution for the
//                token after draft[0..j); row k the bonus token's. Penalties and grammar masks,
//                if any, were applied per row by the caller. Rows are filtered in place as
//                SampleRow filters them up to the row that decided the last token; later rows
//                are left as they were. Greedy rows are never modified.
//   draft_probs  k × vocab_size: the proposer's probabilities (row j: q_j), or null for
//                proposers that propose without them (n-gram, suffix): q_j is then one-hot at
//                draft[j]. Read only for random rows.
//   u_accept     k uniform draws in [0, 1); u_sample: k + 1 (the caller derives both from
//                the request's seed and position, CounterUniform). Both unused (and may be
//                empty) for greedy rows.
// Appends to `out` the accepted drafts, then one more token (the correction at the first
// rejection, or the bonus token when all k were accepted); returns the number of drafts
// accepted (0..k), so out grows by the return value + 1. k = 0 samples one token.
// Aborts (VLLM_CHECK) on an empty vocabulary, draw spans of the wrong size for a random row,
// or a row with no finite logit (SampleRow's contract).
int32_t RejectionSample(float* logits, int64_t vocab_size, std::span<const int32_t> draft,
                        const float* draft_probs, const SamplingRow& row,
                        std::span<const double> u_accept, std::span<const double> u_sample,
                        std::vector<int32_t>* out);

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_REJECTION_SAMPLER_H_
