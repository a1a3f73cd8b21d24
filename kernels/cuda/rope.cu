// GPT-NeoX rotary embedding from a precomputed cos/sin table: one block per token, one
// thread per (head, rotated pair). Products are rounded separately (no FMA contraction) so
// float32 results equal the CPU's bit for bit.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kMaxThreads = 512;

template <typename T>
__global__ void RotaryKernel(const int32_t* __restrict__ positions, T* q, int64_t q_stride,
                             int32_t num_q_heads, T* k, int64_t k_stride, int32_t num_kv_heads,
                             int32_t head_dim, const float* __restrict__ cos_sin,
                             int64_t max_position) {
  const int64_t token = blockIdx.x;
  const int64_t pos = positions[token];
  if (pos < 0 || pos >= max_position) return;
  const int32_t half = head_dim / 2;
  const float* cos = cos_sin + pos * head_dim;
  const float* sin = cos + half;
  const int32_t pairs = (num_q_heads + num_kv_heads) * half;
  for (int32_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t head = p / half;
    const int32_t i = p - head * half;
    T* x = head < num_q_heads ? q + token * q_stride + head * head_dim
                              : k + token * k_stride + (head - num_q_heads) * head_dim;
    const float x1 = ToFloat(x[i]);
    const float x2 = ToFloat(x[i + half]);
    const float c = cos[i];
    const float s = sin[i];
    x[i] = FromFloat<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    x[i + half] = FromFloat<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

}  // namespace

template <typename T>
cudaError_t RotaryEmbedding(const int32_t* positions, int64_t num_tokens, T* q, int64_t q_stride,
                            int32_t num_q_heads, T* k, int64_t k_stride, int32_t num_kv_heads,
                            int32_t head_dim, const float* cos_sin, int64_t max_position,
                            cudaStream_t stream) {
  if (num_tokens <= 0 || head_dim < 2) return cudaSuccess;
  const int threads = detail::ThreadsFor(
      static_cast<int64_t>(num_q_heads + num_kv_heads) * (head_dim / 2), kMaxThreads);
  RotaryKernel<T><<<num_tokens, threads, 0, stream>>>(positions, q, q_stride, num_q_heads, k,
                                                      k_stride, num_kv_heads, head_dim, cos_sin,
                                                      max_position);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_ROPE(T)                                                             \
  template cudaError_t RotaryEmbedding<T>(const int32_t*, int64_t, T*, int64_t, int32_t, T*, \
                                          int64_t, int32_t, int32_t, const float*, int64_t,  \
                                          cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_ROPE)

}  // namespace vllm::kernels::cuda
