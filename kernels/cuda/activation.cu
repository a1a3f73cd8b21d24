// SiLU-and-mul over vLLM's merged gate_up projection: grid (token, chunk of the row), 16-byte
// accesses when the row allows.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;
using detail::Vec;

constexpr int kThreads = 256;
// Vectors per thread per block along the row: a block covers kThreads · kPerThread vectors.
constexpr int kPerThread = 4;

template <typename T, int N>
__global__ void SiluAndMulKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t d) {
  using V = Vec<T, N>;
  const int64_t num_vec = d / N;
  const V* gate = reinterpret_cast<const V*>(gate_up + blockIdx.x * 2 * d);
  const V* up = reinterpret_cast<const V*>(gate_up + blockIdx.x * 2 * d + d);
  V* dst = reinterpret_cast<V*>(out + blockIdx.x * d);
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * blockDim.x * kPerThread;
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t i = begin + r * blockDim.x + threadIdx.x;
    if (i >= num_vec) break;
    const V g = gate[i];
    const V u = up[i];
    V o;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float x = ToFloat(g.v[j]);
      // x / (1 + e^-x), as the CPU: a clean -0 instead of 0 · inf for very negative x.
      o.v[j] = FromFloat<T>(x / (1.0f + expf(-x)) * ToFloat(u.v[j]));
    }
    dst[i] = o;
  }
}

template <typename T, int N>
cudaError_t Launch(const T* gate_up, T* out, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  const int64_t num_vec = d / N;
  const int64_t per_block = static_cast<int64_t>(kThreads) * kPerThread;
  const dim3 grid(static_cast<unsigned>(num_tokens),
                  static_cast<unsigned>((num_vec + per_block - 1) / per_block));
  SiluAndMulKernel<T, N><<<grid, kThreads, 0, stream>>>(gate_up, out, d);
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t SiluAndMul(const T* gate_up, T* out, int64_t num_tokens, int64_t d,
                       cudaStream_t stream) {
  if (num_tokens <= 0 || d <= 0) return cudaSuccess;
  if (detail::CanVectorize<T>(d, {gate_up, out})) {
    return Launch<T, detail::kVec16<T>>(gate_up, out, num_tokens, d, stream);
  }
  return Launch<T, 1>(gate_up, out, num_tokens, d, stream);
}

#define VLLM_INSTANTIATE_ACTIVATION(T) \
  template cudaError_t SiluAndMul<T>(const T*, T*, int64_t, int64_t, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_ACTIVATION)

}  // namespace vllm::kernels::cuda
