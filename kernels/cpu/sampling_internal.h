// Private to kernels/cpu: SampleRow's filtering and draw (sampling.cc), shared with the
// rejection sampler (rejection_sampler.cc) so that both draw from the same distribution, bit
// for bit: SampleRow is FilterRow followed by DrawRanked.
#ifndef VLLM_KERNELS_CPU_SAMPLING_INTERNAL_H_
#define VLLM_KERNELS_CPU_SAMPLING_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace vllm::kernels::cpu::internal {

// vLLM's _SAMPLING_EPS: temperatures below it are greedy (dividing by them would overflow).
inline constexpr float kGreedyTemperature = 1e-5f;

struct Candidate {
  float prob;  // unnormalised (for a filtered row: exp(logit - max logit), the best has 1)
  int32_t id;
};

// The unnormalised probability of a temperature-scaled logit, as the filter computes it: the
// rejection sampler recomputes a kept token's probability with it and gets the filter's float.
inline float UnnormalisedProb(float scaled_logit, float max_scaled_logit) {
  return std::exp(scaled_logit - max_scaled_logit);
}

// Candidates in sampling order (probability desc, id asc), sorted lazily: [0, sorted_) is in
// final order and every element there ranks before every element after it. A peaked
// distribution then costs a partial sort of a few dozen entries instead of a full sort of the
// vocabulary.
class RankedCandidates {
 public:
  explicit RankedCandidates(std::vector<Candidate> c) : c_(std::move(c)) {}

  int64_t size() const { return static_cast<int64_t>(c_.size()); }

  // Every candidate, in no particular order (for order-free passes that must not sort).
  const std::vector<Candidate>& unordered() const { return c_; }

  // Σ prob over every candidate, in storage order.
  double Mass() const;

  // The i-th most likely candidate (i < size()).
  const Candidate& At(int64_t i);

  // Keeps the n most likely candidates.
  void Truncate(int64_t n);

 private:
  void SortPrefix(int64_t n);

  std::vector<Candidate> c_;
  int64_t sorted_ = 0;
};

// The first maximum of the row (ties to the lowest id): SampleRow's greedy token.
int32_t Argmax(const float* logits, int64_t vocab_size);

// A non-greedy row after SampleRow's filter.
struct FilteredRow {
  RankedCandidates kept;  // the tokens left, with unnormalised probabilities
  double total;           // their mass: the draw's normaliser
  float max_logit;        // the scaled row's maximum (a kept token's prob: UnnormalisedProb)
};

// SampleRow's filter for a non-greedy row (row.temperature >= kGreedyTemperature), in place:
// logits / temperature, then min-p, top-k, top-p; dropped tokens become -inf in the row (so a
// token's probability is UnnormalisedProb(logits[id], max_logit) / total, 0 when dropped).
// Aborts (VLLM_CHECK) on a row with no finite logit.
FilteredRow FilterRow(float* logits, int64_t vocab_size, const SamplingRow& row);

// SampleRow's draw: the candidate where the cumulative probability in ranked order first
// exceeds u × total (the last one if rounding keeps the sum below it). c must be non-empty.
int32_t DrawRanked(RankedCandidates& c, double total, double u);

}  // namespace vllm::kernels::cpu::internal

#endif  // VLLM_KERNELS_CPU_SAMPLING_INTERNAL_H_
