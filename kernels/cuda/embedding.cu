// Token embedding lookup on one vocabulary shard: one block per token copies its table row,
// or writes zeros for an id this shard does not hold.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

using detail::Vec;

constexpr int kMaxThreads = 512;

template <typename T, int N>
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const T* __restrict__ table,
                                int64_t vocab_start, int64_t vocab_size, int64_t hidden,
                                T* __restrict__ out) {
  using V = Vec<T, N>;
  const int64_t num_vec = hidden / N;
  const int64_t local = static_cast<int64_t>(ids[blockIdx.x]) - vocab_start;
  V* dst = reinterpret_cast<V*>(out + blockIdx.x * hidden);
  if (local < 0 || local >= vocab_size) {
    // Another shard's id (or padding) contributes zeros; the TP all-reduce sums the shards.
    V zero;
#pragma unroll
    for (int j = 0; j < N; ++j) zero.v[j] = detail::FromFloat<T>(0.0f);
    for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) dst[i] = zero;
    return;
  }
  const V* src = reinterpret_cast<const V*>(table + local * hidden);
  for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

template <typename T>
cudaError_t Embedding(const int32_t* ids, int64_t num_tokens, const T* table, int64_t vocab_start,
                      int64_t vocab_size, int64_t hidden, T* out, cudaStream_t stream) {
  if (num_tokens <= 0 || hidden <= 0) return cudaSuccess;
  constexpr int kN = detail::kVec16<T>;
  if (detail::CanVectorize<T>(hidden, {table, out})) {
    EmbeddingKernel<T, kN><<<num_tokens, detail::ThreadsFor(hidden / kN, kMaxThreads), 0, stream>>>(
        ids, table, vocab_start, vocab_size, hidden, out);
  } else {
    EmbeddingKernel<T, 1><<<num_tokens, detail::ThreadsFor(hidden, kMaxThreads), 0, stream>>>(
        ids, table, vocab_start, vocab_size, hidden, out);
  }
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_EMBEDDING(T)                                                             \
  template cudaError_t Embedding<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, \
                                    T*, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_EMBEDDING)

}  // namespace vllm::kernels::cuda
