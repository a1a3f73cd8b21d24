// Mixture of experts on the CPU: softmax top-k routing and the per-expert grouped MLP.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {

void TopKSoftmax(const float* router_logits, int64_t num_tokens, int32_t num_experts, int32_t k,
                 bool renormalize, int32_t* topk_ids, float* topk_weights) {
  VLLM_CHECK(num_tokens >= 0 && k >= 1 && k <= num_experts) << "TopKSoftmax: bad shape";
  std::vector<float> probs(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* logits = router_logits + t * num_experts;
    const float max = *std::max_element(logits, logits + num_experts);
    float sum = 0.0f;
    for (int32_t e = 0; e < num_experts; ++e) {
      probs[e] = std::exp(logits[e] - max);
      sum += probs[e];
    }
    for (int32_t e = 0; e < num_experts; ++e) probs[e] /= sum;
    int32_t* ids = topk_ids + t * k;
    float* weights = topk_weights + t * k;
    // k passes of a strict-greater scan: the first maximum wins ties. Chosen experts are
    // marked by a probability of -1 (probabilities are >= 0).
    float chosen_sum = 0.0f;
    for (int32_t j = 0; j < k; ++j) {
      int32_t best = 0;
      for (int32_t e = 1; e < num_experts; ++e) {
        if (probs[e] > probs[best]) best = e;
      }
      ids[j] = best;
      weights[j] = probs[best];
      chosen_sum += probs[best];
      probs[best] = -1.0f;
    }
    if (renormalize) {
      for (int32_t j = 0; j < k; ++j) weights[j] /= chosen_sum;
    }
  }
}

void FusedMoe(const float* x, const int32_t* topk_ids, const float* topk_weights,
              const float* gate_up, const float* down, float* out, int64_t num_tokens,
              int64_t hidden, int64_t inter, int32_t num_experts, int32_t k, MoeScratch* scratch) {
  VLLM_CHECK(num_tokens >= 0 && hidden > 0 && inter > 0 && num_experts > 0 && k >= 1)
      << "FusedMoe: bad shape";
  std::fill(out, out + num_tokens * hidden, 0.0f);
  // Bucket the (token, weight) pairs by expert, tokens ascending within a bucket.
  std::vector<int32_t>& offsets = scratch->offsets;
  offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  const int64_t pairs = num_tokens * k;
  for (int64_t i = 0; i < pairs; ++i) {
    VLLM_CHECK(topk_ids[i] >= 0 && topk_ids[i] < num_experts) << "FusedMoe: expert id out of range";
    ++offsets[topk_ids[i] + 1];
  }
  for (int32_t e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  scratch->rows.resize(static_cast<size_t>(pairs));
  scratch->weights.resize(static_cast<size_t>(pairs));
  std::vector<int32_t> cursor(offsets.begin(), offsets.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t slot = cursor[topk_ids[i]]++;
    scratch->rows[slot] = static_cast<int32_t>(i / k);
    scratch->weights[slot] = topk_weights[i];
  }
  for (int32_t e = 0; e < num_experts; ++e) {
    const int64_t begin = offsets[e];
    const int64_t n = offsets[e + 1] - begin;
    if (n == 0) continue;
    if (scratch->x.size() < static_cast<size_t>(n * hidden)) scratch->x.resize(n * hidden);
    if (scratch->gate_up.size() < static_cast<size_t>(n * 2 * inter)) {
      scratch->gate_up.resize(n * 2 * inter);
    }
    if (scratch->act.size() < static_cast<size_t>(n * inter)) scratch->act.resize(n * inter);
    if (scratch->y.size() < static_cast<size_t>(n * hidden)) scratch->y.resize(n * hidden);
    float* xs = scratch->x.data();
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(xs + r * hidden, x + int64_t{scratch->rows[begin + r]} * hidden,
                  static_cast<size_t>(hidden) * sizeof(float));
    }
    Linear(xs, gate_up + e * 2 * inter * hidden, nullptr, scratch->gate_up.data(), n, 2 * inter,
           hidden);
    SiluAndMul(scratch->gate_up.data(), scratch->act.data(), n, inter);
    Linear(scratch->act.data(), down + e * hidden * inter, nullptr, scratch->y.data(), n, hidden,
           inter);
    for (int64_t r = 0; r < n; ++r) {
      float* dst = out + int64_t{scratch->rows[begin + r]} * hidden;
      const float* src = scratch->y.data() + r * hidden;
      const float w = scratch->weights[begin + r];
      for (int64_t j = 0; j < hidden; ++j) dst[j] += w * src[j];
    }
  }
}

}  // namespace vllm::kernels::cpu
