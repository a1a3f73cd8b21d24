#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "worker/cuda/model_kernels.h"

namespace vllm::worker {
namespace {

using kernels::cuda::detail::FromFloat;  // kernels/cuda/common.cuh

// splitmix64: a bijective mix, good enough for dummy weights.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr int kThreads = 256;

int GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65535 * 8));
}

template <typename T>
__global__ void FillUniformKernel(T* out, int64_t rows, int64_t cols, int64_t full_cols,
                                  int64_t row_offset, int64_t col_offset, uint64_t seed,
                                  float scale) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    const uint64_t index = static_cast<uint64_t>((row_offset + r) * full_cols + col_offset + c);
    const uint64_t bits = Mix(seed ^ Mix(index));
    // 24 random bits -> [0, 1) -> [-scale, scale).
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
    out[i] = FromFloat<T>((2.0f * u - 1.0f) * scale);
  }
}

template <typename T>
__global__ void FillConstantKernel(T* out, int64_t n, float value) {
  const T v = FromFloat<T>(value);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = v;
  }
}

template <typename T>
__global__ void GatherRowsKernel(const T* __restrict__ src, const int32_t* __restrict__ indices,
                                 int64_t cols, T* __restrict__ dst) {
  const int64_t row = blockIdx.x;
  const T* s = src + static_cast<int64_t>(indices[row]) * cols;
  T* d = dst + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

}  // namespace

template <typename T>
cudaError_t FillUniformDummy(T* out, int64_t rows, int64_t cols, int64_t full_cols,
                             int64_t row_offset, int64_t col_offset, uint64_t seed, float scale,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  FillUniformKernel<T><<<GridFor(rows * cols), kThreads, 0, stream>>>(
      out, rows, cols, full_cols, row_offset, col_offset, seed, scale);
  return cudaGetLastError();
}

template <typename T>
cudaError_t FillConstant(T* out, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillConstantKernel<T><<<GridFor(n), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

template <typename T>
cudaError_t GatherRows(const T* src, const int32_t* indices, int64_t num_rows, int64_t cols, T* dst,
                       cudaStream_t stream) {
  if (num_rows <= 0 || cols <= 0) return cudaSuccess;
  const int threads = static_cast<int>(std::min<int64_t>(1024, (cols + 31) / 32 * 32));
  GatherRowsKernel<T>
      <<<static_cast<unsigned>(num_rows), threads, 0, stream>>>(src, indices, cols, dst);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE(T)                                                                 \
  template cudaError_t FillUniformDummy<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                           uint64_t, float, cudaStream_t);                  \
  template cudaError_t FillConstant<T>(T*, int64_t, float, cudaStream_t);                   \
  template cudaError_t GatherRows<T>(const T*, const int32_t*, int64_t, int64_t, T*, cudaStream_t);
VLLM_INSTANTIATE(float)
VLLM_INSTANTIATE(__half)
VLLM_INSTANTIATE(__nv_bfloat16)
#undef VLLM_INSTANTIATE

}  // namespace vllm::worker
