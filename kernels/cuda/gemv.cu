// The skinny decode GEMM of gemv.h. Each warp owns one output feature (row of w): its lanes
// stride the row in 16-byte vectors, four loads in flight before the first use, multiply them
// with the m rows of x (small, served from L1/L2) in float, then reduce across the warp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.h"

namespace vllm::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;
using detail::Vec;

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;

template <typename T, int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    SkinnyGemvKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                     T* __restrict__ y, int n, int k) {
  constexpr int N = detail::kVec16<T>;
  using V = Vec<T, N>;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;
  const int vecs = k / N;  // 16-byte vectors per row
  const V* wrow = reinterpret_cast<const V*>(w + static_cast<int64_t>(row) * k);
  const V* xv = reinterpret_cast<const V*>(x);
  float acc[M];
#pragma unroll
  for (int j = 0; j < M; ++j) acc[j] = 0.0f;

  auto fma_vec = [&](const V& wv, int i) {
#pragma unroll
    for (int j = 0; j < M; ++j) {
      const V a = xv[j * vecs + i];
#pragma unroll
      for (int e = 0; e < N; ++e) acc[j] += ToFloat(wv.v[e]) * ToFloat(a.v[e]);
    }
  };
  int i = lane;
  for (; i + (kUnroll - 1) * 32 < vecs; i += kUnroll * 32) {
    V wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = wrow[i + u * 32];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_vec(wv[u], i + u * 32);
  }
  for (; i < vecs; i += 32) fma_vec(wrow[i], i);

#pragma unroll
  for (int j = 0; j < M; ++j) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
  }
  if (lane == 0) {
    const float b = bias != nullptr ? ToFloat(bias[row]) : 0.0f;
#pragma unroll
    for (int j = 0; j < M; ++j) y[static_cast<int64_t>(j) * n + row] = FromFloat<T>(acc[j] + b);
  }
}

template <typename T, int M>
cudaError_t Launch(const void* x, const void* w, const void* bias, void* y, int64_t n, int64_t k,
                   cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  SkinnyGemvKernel<T, M><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
      static_cast<T*>(y), static_cast<int>(n), static_cast<int>(k));
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchFor(int64_t m, const void* x, const void* w, const void* bias, void* y, int64_t n,
                      int64_t k, cudaStream_t stream) {
  using Fn =
      cudaError_t (*)(const void*, const void*, const void*, void*, int64_t, int64_t, cudaStream_t);
  static constexpr Fn kByM[kSkinnyGemvMaxM] = {Launch<T, 1>, Launch<T, 2>, Launch<T, 3>,
                                               Launch<T, 4>, Launch<T, 5>, Launch<T, 6>,
                                               Launch<T, 7>, Launch<T, 8>};
  if (m < 1 || m > kSkinnyGemvMaxM) return cudaErrorInvalidValue;
  return kByM[m - 1](x, w, bias, y, n, k, stream);
}

}  // namespace

bool SkinnyGemvSupports(GemmDType dtype, int64_t m, int64_t n, int64_t k) {
  return (dtype == GemmDType::kBFloat16 || dtype == GemmDType::kFloat16) && m >= 1 &&
         m <= kSkinnyGemvMaxM && n >= 1 && n < (int64_t{1} << 31) && k >= 8 && k % 8 == 0 &&
         k < (int64_t{1} << 31) / kSkinnyGemvMaxM;
}

cudaError_t LaunchSkinnyGemv(GemmDType dtype, const void* x, const void* w, const void* bias,
                             void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (!SkinnyGemvSupports(dtype, m, n, k)) return cudaErrorInvalidValue;
  if (dtype == GemmDType::kBFloat16) {
    return LaunchFor<__nv_bfloat16>(m, x, w, bias, y, n, k, stream);
  }
  return LaunchFor<__half>(m, x, w, bias, y, n, k, stream);
}

}  // namespace vllm::kernels::cuda
