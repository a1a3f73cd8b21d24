// Paged attention, prefill path (first version): the decode kernel without a split, one block
// per (query row, head group) walking the row's whole context.
#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/common.cuh"

namespace vllm::kernels::cuda::detail {

template <typename T>
cudaError_t LaunchPrefillAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                                   T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                   int32_t num_kv_heads, int32_t head_dim, float scale,
                                   cudaStream_t stream) {
  AttentionPlan plan;
  plan.decode = true;
  plan.partition_size = meta.max_seq_len > 0 ? meta.max_seq_len : 1;
  plan.num_partitions = 1;
  return LaunchDecodeAttention(q, q_stride, k_cache, v_cache, out, meta, num_q_heads, num_kv_heads,
                               head_dim, scale, plan, nullptr, stream);
}

#define VLLM_INSTANTIATE_PREFILL(T)                                                                \
  template cudaError_t LaunchPrefillAttention<T>(const T*, int64_t, const T*, const T*, T*,        \
                                                 const DeviceAttentionMetadata&, int32_t, int32_t, \
                                                 int32_t, float, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_PREFILL)

}  // namespace vllm::kernels::cuda::detail
