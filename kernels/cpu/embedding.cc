// Token embedding lookup (vLLM's VocabParallelEmbedding on one shard).
#include <algorithm>
#include <cstdint>

#include "base/status_macros.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {

void Embedding(const int32_t* ids, int64_t num_tokens, const float* table, int64_t vocab_start,
               int64_t vocab_size, int64_t hidden, float* out) {
  VLLM_CHECK(num_tokens >= 0 && vocab_size >= 0 && hidden >= 0) << "Embedding: negative shape";
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = out + t * hidden;
    const int64_t local = static_cast<int64_t>(ids[t]) - vocab_start;
    // Another shard's id (or padding) contributes zeros; the TP all-reduce sums the shards.
    if (local < 0 || local >= vocab_size) {
      std::fill(row, row + hidden, 0.0f);
      continue;
    }
    const float* src = table + local * hidden;
    std::copy(src, src + hidden, row);
  }
}

}  // namespace vllm::kernels::cpu
