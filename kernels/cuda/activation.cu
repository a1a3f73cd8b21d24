// SiLU-and-mul and GELU(tanh)-and-mul over vLLM's merged gate_up projection: grid (token,
// chunk of the row), 16-byte accesses when the row allows. Gemma's soft cap and scaling:
// grid-stride elementwise.
#include <algorithm>

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

struct Silu {
  // x / (1 + e^-x), as the CPU: a clean -0 instead of 0 · inf for very negative x.
  __device__ __forceinline__ static float Apply(float x) { return x / (1.0f + expf(-x)); }
};

struct GeluTanh {
  // PyTorch's gelu(approximate="tanh") constants and order, as kernels::cpu::GeluTanhAndMul.
  __device__ __forceinline__ static float Apply(float x) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const float inner = kBeta * (x + kKappa * (x * x * x));
    return 0.5f * x * (1.0f + tanhf(inner));
  }
};

template <typename T, int N, typename Act>
__global__ void ActAndMulKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t d) {
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
      o.v[j] = FromFloat<T>(Act::Apply(ToFloat(g.v[j])) * ToFloat(u.v[j]));
    }
    dst[i] = o;
  }
}

template <typename T, int N, typename Act>
cudaError_t Launch(const T* gate_up, T* out, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  const int64_t num_vec = d / N;
  const int64_t per_block = static_cast<int64_t>(kThreads) * kPerThread;
  const dim3 grid(static_cast<unsigned>(num_tokens),
                  static_cast<unsigned>((num_vec + per_block - 1) / per_block));
  ActAndMulKernel<T, N, Act><<<grid, kThreads, 0, stream>>>(gate_up, out, d);
  return cudaGetLastError();
}

template <typename T, typename Act>
cudaError_t ActAndMul(const T* gate_up, T* out, int64_t num_tokens, int64_t d,
                      cudaStream_t stream) {
  if (num_tokens <= 0 || d <= 0) return cudaSuccess;
  if (detail::CanVectorize<T>(d, {gate_up, out})) {
    return Launch<T, detail::kVec16<T>, Act>(gate_up, out, num_tokens, d, stream);
  }
  return Launch<T, 1, Act>(gate_up, out, num_tokens, d, stream);
}

template <typename T>
__global__ void SoftCapKernel(T* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = FromFloat<T>(tanhf(ToFloat(x[i]) / cap) * cap);
  }
}

template <typename T>
__global__ void ScaleKernel(T* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = FromFloat<T>(ToFloat(x[i]) * factor);
  }
}

// Blocks for a grid-stride loop over n elements (capped: each thread then takes several).
unsigned GridFor(int64_t n) {
  constexpr int64_t kMaxBlocks = 4096;
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

}  // namespace

template <typename T>
cudaError_t SiluAndMul(const T* gate_up, T* out, int64_t num_tokens, int64_t d,
                       cudaStream_t stream) {
  return ActAndMul<T, Silu>(gate_up, out, num_tokens, d, stream);
}

template <typename T>
cudaError_t GeluTanhAndMul(const T* gate_up, T* out, int64_t num_tokens, int64_t d,
                           cudaStream_t stream) {
  return ActAndMul<T, GeluTanh>(gate_up, out, num_tokens, d, stream);
}

template <typename T>
cudaError_t SoftCap(T* x, int64_t n, float cap, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!(cap > 0.0f)) return cudaErrorInvalidValue;
  SoftCapKernel<T><<<GridFor(n), kThreads, 0, stream>>>(x, n, cap);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Scale(T* x, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<T><<<GridFor(n), kThreads, 0, stream>>>(x, n, factor);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_ACTIVATION(T)                                                  \
  template cudaError_t SiluAndMul<T>(const T*, T*, int64_t, int64_t, cudaStream_t);     \
  template cudaError_t GeluTanhAndMul<T>(const T*, T*, int64_t, int64_t, cudaStream_t); \
  template cudaError_t SoftCap<T>(T*, int64_t, float, cudaStream_t);                    \
  template cudaError_t Scale<T>(T*, int64_t, float, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_ACTIVATION)

}  // namespace vllm::kernels::cuda
