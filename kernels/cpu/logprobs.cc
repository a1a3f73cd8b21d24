// Log-probabilities of the raw logits for one row: the sampled token, its rank, the top-n.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cpu/sampling.h"

namespace vllm::kernels::cpu {

RowLogprobs ComputeLogprobs(const float* logits, int64_t vocab_size, int32_t sampled_token,
                            int32_t num_logprobs) {
  VLLM_CHECK(vocab_size > 0 && sampled_token >= 0 && sampled_token < vocab_size)
      << "ComputeLogprobs: sampled token " << sampled_token << " outside vocab " << vocab_size;
  VLLM_CHECK(num_logprobs >= 0) << "ComputeLogprobs: negative num_logprobs";
  // log_softmax with the max subtracted, in double: log Σ exp over 128K entries in float
  // would lose the low digits of the small log-probabilities.
  const double max_logit = *std::max_element(logits, logits + vocab_size);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(logits[i] - max_logit);
  const double log_normalizer = max_logit + std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[id]) - log_normalizer);
  };

  // Top-n by a bounded heap (front = the worst kept), O(V log n) without a vocab-sized copy.
  auto ranks_before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t n = std::min<int64_t>(num_logprobs, vocab_size);
  std::vector<int32_t> top;
  top.reserve(n + 1);
  int64_t greater = 0;  // tokens with a strictly larger logit than the sampled one
  const float sampled_logit = logits[sampled_token];
  for (int64_t i = 0; i < vocab_size; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (logits[i] > sampled_logit) ++greater;
    if (n == 0) continue;
    if (static_cast<int64_t>(top.size()) < n) {
      top.push_back(id);
      std::push_heap(top.begin(), top.end(), ranks_before);
    } else if (ranks_before(id, top.front())) {
      std::pop_heap(top.begin(), top.end(), ranks_before);
      top.back() = id;
      std::push_heap(top.begin(), top.end(), ranks_before);
    }
  }
  std::sort_heap(top.begin(), top.end(), ranks_before);

  RowLogprobs result;
  result.sampled_token_rank = static_cast<int32_t>(greater + 1);
  result.token_ids.reserve(n + 1);
  result.logprobs.reserve(n + 1);
  result.token_ids.push_back(sampled_token);
  result.logprobs.push_back(logprob(sampled_token));
  for (int32_t id : top) {
    result.token_ids.push_back(id);
    result.logprobs.push_back(logprob(id));
  }
  return result;
}

}  // namespace vllm::kernels::cpu
