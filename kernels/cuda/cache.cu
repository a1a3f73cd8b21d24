// vLLM's reshape_and_cache: one block per token copies its K and V rows into the paged
// cache. The cache is [num_blocks, block_size, num_kv_heads, head_dim], so slot s starts at
// s · num_kv_heads · head_dim whatever the block size: one contiguous row per token.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

using detail::Vec;

constexpr int kMaxThreads = 256;

template <typename T, int N>
__global__ void ReshapeAndCacheKernel(const T* __restrict__ k, const T* __restrict__ v,
                                      T* __restrict__ k_cache, T* __restrict__ v_cache,
                                      const int64_t* __restrict__ slot_mapping, int64_t row) {
  using V = Vec<T, N>;
  const int64_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;  // padding token
  const int64_t num_vec = row / N;
  const V* k_src = reinterpret_cast<const V*>(k + blockIdx.x * row);
  const V* v_src = reinterpret_cast<const V*>(v + blockIdx.x * row);
  V* k_dst = reinterpret_cast<V*>(k_cache + slot * row);
  V* v_dst = reinterpret_cast<V*>(v_cache + slot * row);
  for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) {
    k_dst[i] = k_src[i];
    v_dst[i] = v_src[i];
  }
}

}  // namespace

template <typename T>
cudaError_t ReshapeAndCache(const T* k, const T* v, T* k_cache, T* v_cache,
                            const int64_t* slot_mapping, int64_t num_tokens, int32_t num_kv_heads,
                            int32_t head_dim, int32_t block_size, cudaStream_t stream) {
  (void)block_size;  // the layout makes slot · row the address; kept for parity with the CPU
  if (num_tokens <= 0 || num_kv_heads <= 0 || head_dim <= 0) return cudaSuccess;
  const int64_t row = static_cast<int64_t>(num_kv_heads) * head_dim;
  constexpr int kN = detail::kVec16<T>;
  if (detail::CanVectorize<T>(row, {k, v, k_cache, v_cache})) {
    ReshapeAndCacheKernel<T, kN>
        <<<num_tokens, detail::ThreadsFor(row / kN, kMaxThreads), 0, stream>>>(
            k, v, k_cache, v_cache, slot_mapping, row);
  } else {
    ReshapeAndCacheKernel<T, 1><<<num_tokens, detail::ThreadsFor(row, kMaxThreads), 0, stream>>>(
        k, v, k_cache, v_cache, slot_mapping, row);
  }
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_CACHE(T)                                                              \
  template cudaError_t ReshapeAndCache<T>(const T*, const T*, T*, T*, const int64_t*, int64_t, \
                                          int32_t, int32_t, int32_t, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_CACHE)

}  // namespace vllm::kernels::cuda
