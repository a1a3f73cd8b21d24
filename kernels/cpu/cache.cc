// Writes new K/V rows into the paged cache (vLLM's reshape_and_cache).
#include <algorithm>
#include <cstdint>

#include "base/status_macros.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {

void ReshapeAndCache(const float* k, const float* v, float* k_cache, float* v_cache,
                     const int64_t* slot_mapping, int64_t num_tokens, int32_t num_kv_heads,
                     int32_t head_dim, int32_t block_size) {
  VLLM_CHECK(num_tokens >= 0 && num_kv_heads > 0 && head_dim > 0 && block_size > 0)
      << "ReshapeAndCache: bad shape";
  // The cache is [num_blocks, block_size, num_kv_heads, head_dim], so slot s (block
  // s / block_size, offset s % block_size) starts at s · num_kv_heads · head_dim: one
  // contiguous row per token, whatever the block size.
  const int64_t row = static_cast<int64_t>(num_kv_heads) * head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // padding token
    std::copy(k + t * row, k + (t + 1) * row, k_cache + slot * row);
    std::copy(v + t * row, v + (t + 1) * row, v_cache + slot * row);
  }
}

}  // namespace vllm::kernels::cpu
