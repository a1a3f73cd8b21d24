// Mixture of experts on the GPU: the softmax top-k router (one warp per token) and the
// weighted accumulation of the experts' outputs in float.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.h"

namespace vllm::kernels::cuda {
namespace {

using detail::FromFloat;
using detail::ToFloat;

constexpr int kWarp = 32;

__device__ __forceinline__ float WarpReduceMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Grid: one block of one warp per token. probs (shared, num_experts floats) holds the
// softmax, then -1 for every expert already chosen (probabilities are >= 0).
template <typename T>
__global__ void MoeTopKSoftmaxKernel(const T* __restrict__ router_logits, int32_t num_experts,
                                     int32_t k, bool renormalize, float* __restrict__ weights) {
  extern __shared__ float probs[];
  const int lane = threadIdx.x;
  const T* row = router_logits + static_cast<int64_t>(blockIdx.x) * num_experts;
  float* out = weights + static_cast<int64_t>(blockIdx.x) * num_experts;
  float max = -__int_as_float(0x7f800000);
  for (int32_t e = lane; e < num_experts; e += kWarp) {
    const float x = ToFloat(row[e]);
    probs[e] = x;
    max = fmaxf(max, x);
  }
  max = WarpReduceMax(max);
  float sum = 0.0f;
  for (int32_t e = lane; e < num_experts; e += kWarp) {
    const float p = expf(probs[e] - max);
    probs[e] = p;
    sum += p;
  }
  sum = detail::WarpReduceSum(sum);
  for (int32_t e = lane; e < num_experts; e += kWarp) {
    probs[e] /= sum;
    out[e] = 0.0f;
  }
  __syncwarp();
  float chosen_sum = 0.0f;
  for (int32_t j = 0; j < k; ++j) {
    // Each lane scans its experts in ascending order (strict >: the lowest id wins a tie
    // within the lane), then the warp keeps the larger value, the lower id on a tie.
    float best = -1.0f;
    int32_t best_e = num_experts;
    for (int32_t e = lane; e < num_experts; e += kWarp) {
      if (probs[e] > best) {
        best = probs[e];
        best_e = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int32_t other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
    if (best_e >= num_experts) break;  // NaN logits: nothing left to choose
    if (lane == 0) {
      out[best_e] = best;
      probs[best_e] = -1.0f;
    }
    chosen_sum += best;
    __syncwarp();
  }
  if (!renormalize) return;
  for (int32_t e = lane; e < num_experts; e += kWarp) {
    if (probs[e] < 0.0f) out[e] /= chosen_sum;
  }
}

// Grid (token, chunk of the row); a token that did not choose `expert` returns at once.
template <typename T>
__global__ void MoeAccumulateKernel(const T* __restrict__ y, const float* __restrict__ weights,
                                    int32_t num_experts, int32_t expert, int64_t hidden,
                                    float* __restrict__ acc) {
  const int64_t t = blockIdx.x;
  const float w = weights[t * num_experts + expert];
  if (w == 0.0f) return;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= hidden) return;
  // Product then sum, as the CPU (no fused multiply-add: it would round once, not twice).
  acc[t * hidden + j] = __fadd_rn(acc[t * hidden + j], __fmul_rn(w, ToFloat(y[t * hidden + j])));
}

// Grid: one block of one warp per token.
template <typename T>
__global__ void MoeSharedExpertGateKernel(const T* __restrict__ x, const T* __restrict__ gate,
                                          int64_t hidden, float* __restrict__ out) {
  const T* row = x + static_cast<int64_t>(blockIdx.x) * hidden;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += kWarp) dot += ToFloat(row[j]) * ToFloat(gate[j]);
  dot = detail::WarpReduceSum(dot);
  if (threadIdx.x == 0) {
    const float logit = ToFloat(FromFloat<T>(dot));
    out[blockIdx.x] = 1.0f / (1.0f + expf(-logit));
  }
}

template <typename T>
__global__ void MoeFinalizeKernel(const float* __restrict__ acc, int64_t n, T* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = FromFloat<T>(acc[i]);
}

constexpr int kThreads = 256;

}  // namespace

template <typename T>
cudaError_t MoeTopKSoftmax(const T* router_logits, int64_t num_tokens, int32_t num_experts,
                           int32_t k, bool renormalize, float* weights, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMoeMaxExperts || k < 1 || k > num_experts) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens <= 0) return cudaSuccess;
  const size_t shared = static_cast<size_t>(num_experts) * sizeof(float);
  MoeTopKSoftmaxKernel<T><<<static_cast<unsigned>(num_tokens), kWarp, shared, stream>>>(
      router_logits, num_experts, k, renormalize, weights);
  return cudaGetLastError();
}

template <typename T>
cudaError_t MoeAccumulate(const T* y, const float* weights, int32_t num_experts, int32_t expert,
                          int64_t num_tokens, int64_t hidden, float* acc, cudaStream_t stream) {
  if (num_tokens <= 0 || hidden <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(num_tokens),
                  static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  MoeAccumulateKernel<T>
      <<<grid, kThreads, 0, stream>>>(y, weights, num_experts, expert, hidden, acc);
  return cudaGetLastError();
}

template <typename T>
cudaError_t MoeSharedExpertGate(const T* x, const T* gate, int64_t num_tokens, int64_t hidden,
                                float* out, cudaStream_t stream) {
  if (num_tokens <= 0 || hidden <= 0) return cudaSuccess;
  MoeSharedExpertGateKernel<T>
      <<<static_cast<unsigned>(num_tokens), kWarp, 0, stream>>>(x, gate, hidden, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t MoeFinalize(const float* acc, int64_t n, T* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  MoeFinalizeKernel<T>
      <<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(acc, n, out);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_MOE(T)                                                             \
  template cudaError_t MoeTopKSoftmax<T>(const T*, int64_t, int32_t, int32_t, bool, float*, \
                                         cudaStream_t);                                     \
  template cudaError_t MoeAccumulate<T>(const T*, const float*, int32_t, int32_t, int64_t,  \
                                        int64_t, float*, cudaStream_t);                     \
  template cudaError_t MoeSharedExpertGate<T>(const T*, const T*, int64_t, int64_t, float*, \
                                              cudaStream_t);                                \
  template cudaError_t MoeFinalize<T>(const float*, int64_t, T*, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_MOE)

}  // namespace vllm::kernels::cuda
