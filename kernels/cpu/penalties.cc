// vLLM's repetition / frequency / presence penalties on one row of logits
// (vllm/model_executor/layers/utils.py apply_penalties).
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace vllm::kernels::cpu {
namespace {

// The ids of `a` (and `b`) inside [0, vocab_size), sorted, duplicates kept. Sorting a copy
// of the few hundred or thousand context ids is cheaper than a vocab-sized count array per
// row per step.
std::vector<int32_t> SortedInRange(std::span<const int32_t> a, std::span<const int32_t> b,
                                   int64_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(a.size() + b.size());
  for (std::span<const int32_t> part : {a, b}) {
    for (int32_t id : part) {
      if (id >= 0 && id < vocab_size) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

void ApplyPenalties(float* logits, int64_t vocab_size, std::span<const int32_t> prompt_ids,
                    std::span<const int32_t> output_ids, const SamplingRow& row) {
  if (row.repetition_penalty != 1.0f) {
    // Once per distinct id seen in the prompt or the output, however often it occurs.
    std::vector<int32_t> seen = SortedInRange(prompt_ids, output_ids, vocab_size);
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      float& logit = logits[id];
      if (logit > 0.0f) {
        logit /= row.repetition_penalty;
      } else {
        logit *= row.repetition_penalty;
      }
    }
  }
  if (row.frequency_penalty == 0.0f && row.presence_penalty == 0.0f) return;
  // Frequency and presence look at the output only (vLLM's output_bin_counts / output_mask).
  const std::vector<int32_t> out = SortedInRange(output_ids, {}, vocab_size);
  for (size_t i = 0; i < out.size();) {
    size_t j = i;
    while (j < out.size() && out[j] == out[i]) ++j;
    const auto count = static_cast<float>(j - i);
    // Two subtractions in vLLM's order, so the float rounding is the same.
    logits[out[i]] -= row.frequency_penalty * count;
    logits[out[i]] -= row.presence_penalty;
    i = j;
  }
}

}  // namespace vllm::kernels::cpu
