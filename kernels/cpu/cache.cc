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
  // Per KV head: V's row is contiguous ([slot][dim]); K's dims are block_size apart
  // ([dim][slot]), so a token's key is a strided store (one per dim).
  const int64_t row = static_cast<int64_t>(num_kv_heads) * head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // padding token
    for (int32_t h = 0; h < num_kv_heads; ++h) {
      const float* src_k = k + t * row + static_cast<int64_t>(h) * head_dim;
      const float* src_v = v + t * row + static_cast<int64_t>(h) * head_dim;
      float* dst_k = k_cache + KCacheIndex(slot, h, 0, num_kv_heads, head_dim, block_size);
      for (int32_t i = 0; i < head_dim; ++i) dst_k[static_cast<int64_t>(i) * block_size] = src_k[i];
      std::copy(src_v, src_v + head_dim,
                v_cache + VCacheIndex(slot, h, 0, num_kv_heads, head_dim, block_size));
    }
  }
}

}  // namespace vllm::kernels::cpu
