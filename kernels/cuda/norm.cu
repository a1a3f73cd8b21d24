// RMSNorm and vLLM's fused residual-add RMSNorm (Llama's or Gemma's weighting): one block per
// token, 16-byte loads, a block-wide float reduction of the sum of squares, then a second pass
// over the row (served from L1/L2) that writes the normalised output.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;
using detail::Vec;

constexpr int kMaxThreads = 1024;

// 1 / sqrt(sum_sq / hidden + eps), rounded as the CPU does it (float variance).
__device__ __forceinline__ float InverseRms(float sum_sq, int64_t hidden, float eps) {
  const float variance = sum_sq / static_cast<float>(hidden);
  return 1.0f / sqrtf(variance + eps);
}

// Llama: weight · T(x · inv_rms), in Hugging Face's order. Gemma: T(x · inv_rms · (1 +
// weight)), all in float (Gemma's RMSNorm rounds once, at the end).
template <typename T, bool kGemma>
__device__ __forceinline__ T Normalize(float x, T w, float inv_rms) {
  if constexpr (kGemma) {
    return FromFloat<T>((x * inv_rms) * (1.0f + ToFloat(w)));
  } else {
    return FromFloat<T>(ToFloat(w) * ToFloat(FromFloat<T>(x * inv_rms)));
  }
}

// One block per row of `hidden` elements. Row b starts at (b / rows_per_group) ·
// group_stride + (b % rows_per_group) · hidden in both x and out: packed rows when
// rows_per_group is 1 and group_stride is hidden, heads of strided token rows otherwise.
template <typename T, int N, bool kGemma>
__global__ void RmsNormKernel(const T* x, const T* __restrict__ weight, T* out, int64_t hidden,
                              int64_t rows_per_group, int64_t group_stride, float eps) {
  using V = Vec<T, N>;
  const int64_t num_vec = hidden / N;
  const int64_t b = blockIdx.x;
  const int64_t start = (b / rows_per_group) * group_stride + (b % rows_per_group) * hidden;
  const V* row = reinterpret_cast<const V*>(x + start);
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) {
    const V v = row[i];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float f = ToFloat(v.v[j]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = InverseRms(detail::BlockReduceSum(sum_sq), hidden, eps);
  const V* w = reinterpret_cast<const V*>(weight);
  V* dst = reinterpret_cast<V*>(out + start);
  for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) {
    const V v = row[i];
    const V wv = w[i];
    V o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = Normalize<T, kGemma>(ToFloat(v.v[j]), wv.v[j], inv_rms);
    dst[i] = o;
  }
}

template <typename T, int N, bool kGemma>
__global__ void FusedAddRmsNormKernel(T* x, T* residual, const T* __restrict__ weight,
                                      int64_t hidden, float eps) {
  using V = Vec<T, N>;
  const int64_t num_vec = hidden / N;
  V* x_row = reinterpret_cast<V*>(x + blockIdx.x * hidden);
  V* res_row = reinterpret_cast<V*>(residual + blockIdx.x * hidden);
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) {
    const V a = x_row[i];
    V r = res_row[i];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      r.v[j] = FromFloat<T>(ToFloat(a.v[j]) + ToFloat(r.v[j]));
      const float f = ToFloat(r.v[j]);  // the stored (rounded) residual, as vLLM
      sum_sq += f * f;
    }
    res_row[i] = r;
  }
  const float inv_rms = InverseRms(detail::BlockReduceSum(sum_sq), hidden, eps);
  const V* w = reinterpret_cast<const V*>(weight);
  // Each thread reads back only the residual elements it wrote itself: no barrier needed.
  for (int64_t i = threadIdx.x; i < num_vec; i += blockDim.x) {
    const V r = res_row[i];
    const V wv = w[i];
    V o;
#pragma unroll
    for (int j = 0; j < N; ++j) o.v[j] = Normalize<T, kGemma>(ToFloat(r.v[j]), wv.v[j], inv_rms);
    x_row[i] = o;
  }
}

// Launchers of one kernel shape, the weight kind a template argument.
template <typename T, bool kGemma>
void LaunchRmsNorm(const T* x, const T* weight, T* out, int64_t rows, int64_t hidden,
                   int64_t rows_per_group, int64_t group_stride, bool vectorize, float eps,
                   cudaStream_t stream) {
  constexpr int kN = detail::kVec16<T>;
  if (vectorize) {
    const int threads = detail::ThreadsFor(hidden / kN, kMaxThreads);
    RmsNormKernel<T, kN, kGemma>
        <<<rows, threads, 0, stream>>>(x, weight, out, hidden, rows_per_group, group_stride, eps);
  } else {
    const int threads = detail::ThreadsFor(hidden, kMaxThreads);
    RmsNormKernel<T, 1, kGemma>
        <<<rows, threads, 0, stream>>>(x, weight, out, hidden, rows_per_group, group_stride, eps);
  }
}

template <typename T, bool kGemma>
void LaunchFusedAddRmsNorm(T* x, T* residual, const T* weight, int64_t num_tokens, int64_t hidden,
                           bool vectorize, float eps, cudaStream_t stream) {
  constexpr int kN = detail::kVec16<T>;
  if (vectorize) {
    const int threads = detail::ThreadsFor(hidden / kN, kMaxThreads);
    FusedAddRmsNormKernel<T, kN, kGemma>
        <<<num_tokens, threads, 0, stream>>>(x, residual, weight, hidden, eps);
  } else {
    const int threads = detail::ThreadsFor(hidden, kMaxThreads);
    FusedAddRmsNormKernel<T, 1, kGemma>
        <<<num_tokens, threads, 0, stream>>>(x, residual, weight, hidden, eps);
  }
}

}  // namespace

template <typename T>
cudaError_t RmsNorm(const T* x, const T* weight, T* out, int64_t num_tokens, int64_t hidden,
                    float eps, cudaStream_t stream, NormWeight kind) {
  if (num_tokens <= 0 || hidden <= 0) return cudaSuccess;
  const bool vectorize = detail::CanVectorize<T>(hidden, {x, weight, out});
  if (kind == NormWeight::kGemma) {
    LaunchRmsNorm<T, true>(x, weight, out, num_tokens, hidden, 1, hidden, vectorize, eps, stream);
  } else {
    LaunchRmsNorm<T, false>(x, weight, out, num_tokens, hidden, 1, hidden, vectorize, eps, stream);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t HeadRmsNorm(T* x, int64_t num_tokens, int64_t row_stride, int32_t num_heads,
                        int32_t head_dim, const T* weight, float eps, cudaStream_t stream,
                        NormWeight kind) {
  if (num_tokens <= 0 || num_heads <= 0 || head_dim <= 0) return cudaSuccess;
  constexpr int kN = detail::kVec16<T>;
  const int64_t rows = num_tokens * num_heads;
  const bool vectorize = detail::CanVectorize<T>(head_dim, {x, weight}) && row_stride % kN == 0;
  if (kind == NormWeight::kGemma) {
    LaunchRmsNorm<T, true>(x, weight, x, rows, head_dim, num_heads, row_stride, vectorize, eps,
                           stream);
  } else {
    LaunchRmsNorm<T, false>(x, weight, x, rows, head_dim, num_heads, row_stride, vectorize, eps,
                            stream);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t FusedAddRmsNorm(T* x, T* residual, const T* weight, int64_t num_tokens, int64_t hidden,
                            float eps, cudaStream_t stream, NormWeight kind) {
  if (num_tokens <= 0 || hidden <= 0) return cudaSuccess;
  const bool vectorize = detail::CanVectorize<T>(hidden, {x, residual, weight});
  if (kind == NormWeight::kGemma) {
    LaunchFusedAddRmsNorm<T, true>(x, residual, weight, num_tokens, hidden, vectorize, eps, stream);
  } else {
    LaunchFusedAddRmsNorm<T, false>(x, residual, weight, num_tokens, hidden, vectorize, eps,
                                    stream);
  }
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_NORM(T)                                                                   \
  template cudaError_t RmsNorm<T>(const T*, const T*, T*, int64_t, int64_t, float, cudaStream_t,   \
                                  NormWeight);                                                     \
  template cudaError_t HeadRmsNorm<T>(T*, int64_t, int64_t, int32_t, int32_t, const T*, float,     \
                                      cudaStream_t, NormWeight);                                   \
  template cudaError_t FusedAddRmsNorm<T>(T*, T*, const T*, int64_t, int64_t, float, cudaStream_t, \
                                          NormWeight);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_NORM)

}  // namespace vllm::kernels::cuda
