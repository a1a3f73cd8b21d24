// vLLM's repetition / frequency / presence penalties on one row of logits
// (vllm/model_executor/layers/utils.py apply_penalties), and its allowed-token, bad-word and
// logit-bias logits processors (vllm/v1/sample/sampler.py apply_logits_processors).
#include <algorithm>
#include <cstdint>
#include <limits>
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

void ApplyTokenConstraints(float* logits, int64_t vocab_size, std::span<const int32_t> allowed_ids,
                           std::span<const std::vector<int32_t>> bad_words,
                           std::span<const std::pair<int32_t, float>> logit_bias,
                           std::span<const int32_t> output_ids) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!allowed_ids.empty()) {
    std::vector<bool> allowed(static_cast<size_t>(vocab_size), false);
    for (int32_t id : allowed_ids) {
      if (id >= 0 && id < vocab_size) allowed[static_cast<size_t>(id)] = true;
    }
    for (int64_t id = 0; id < vocab_size; ++id) {
      if (!allowed[static_cast<size_t>(id)]) logits[id] = kNegInf;
    }
  }
  for (const std::vector<int32_t>& word : bad_words) {
    if (word.empty() || word.size() > output_ids.size() + 1) continue;
    const size_t prefix = word.size() - 1;
    const auto tail = output_ids.subspan(output_ids.size() - prefix);
    if (!std::equal(tail.begin(), tail.end(), word.begin())) continue;
    const int32_t last = word.back();
    if (last >= 0 && last < vocab_size) logits[last] = kNegInf;
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id >= 0 && id < vocab_size) logits[id] += bias;
  }
  if (allowed_ids.empty() && bad_words.empty()) return;
  // Every token masked (allowed ids all banned as bad words, say): vLLM's sampler then picks
  // id 0 (the argmax of a row of -inf); so does this row, instead of a row with nothing to
  // sample.
  if (std::none_of(logits, logits + vocab_size, [](float x) { return x > kNegInf; })) {
    logits[0] = 0.0f;
  }
}

}  // namespace vllm::kernels::cpu
