// Greedy argmax and the temperature / min-p / top-k / top-p sampler, one block per row.
//
// The sampler reproduces kernels::cpu::SampleRow without sorting: every kept token has a
// unique 64-bit rank key (probability bits above, ~id below), so "the i-th most likely token,
// ties by lower id" is "the i-th largest key". Each filter and the draw is then a bisection
// for the largest key threshold whose prefix (all keys >= it) still satisfies a monotone
// predicate on its count or its probability mass. Probabilities are recomputed from the
// logits on every pass (no workspace); masses are summed in double with a fixed reduction
// tree, so a row always gives the same token for the same u.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

using detail::ArgmaxPair;
using detail::ToFloat;

constexpr int kThreads = 1024;
// vLLM's _SAMPLING_EPS: temperatures below it are greedy.
constexpr float kGreedyTemperature = 1e-5f;
// Largest possible key: probability 1.0 (the most likely token's exp(0)) and id 0.
constexpr uint64_t kMaxKey = (static_cast<uint64_t>(0x3F800000u) << 32) | 0xFFFFFFFFull;

// argmax over logits[i] / scale (scale 1 for greedy), ties to the lowest id.
template <typename T>
__device__ ArgmaxPair RowArgmax(const T* row, int64_t vocab_size, float temperature) {
  ArgmaxPair best{-__int_as_float(0x7f800000), INT64_MAX};
  for (int64_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
    const ArgmaxPair p{ToFloat(row[i]) / temperature, i};
    if (detail::Better(p, best)) best = p;
  }
  return detail::BlockArgmax(best);
}

// One row's probabilities as SampleRow forms them: p = exp(logit / temperature - max), kept
// when p > 0 and p >= min_p; a dropped token reads as probability 0.
template <typename T>
struct RowProbs {
  const T* row;
  int64_t vocab_size;
  float temperature;
  float max_scaled;
  float min_p;

  __device__ float Prob(int64_t i) const {
    const float p = expf(ToFloat(row[i]) / temperature - max_scaled);
    return (p > 0.0f && p >= min_p) ? p : 0.0f;
  }
  static __device__ uint64_t Key(float p, int64_t i) {
    return (static_cast<uint64_t>(__float_as_uint(p)) << 32) |
           (0xFFFFFFFFull - static_cast<uint64_t>(i));
  }
  // Number of kept tokens with key >= threshold (block-wide, to every thread).
  __device__ uint64_t CountAtLeast(uint64_t threshold) const {
    unsigned long long n = 0;
    for (int64_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
      const float p = Prob(i);
      if (p > 0.0f && Key(p, i) >= threshold) ++n;
    }
    return detail::BlockReduceSum(n);
  }
  // Probability mass (unnormalised) of kept tokens with key >= threshold.
  __device__ double MassAtLeast(uint64_t threshold) const {
    double m = 0.0;
    for (int64_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
      const float p = Prob(i);
      if (p > 0.0f && Key(p, i) >= threshold) m += static_cast<double>(p);
    }
    return detail::BlockReduceSum(m);
  }
};

// Largest t in [lo, hi] with pred(t), given pred(lo) and pred monotone (true, then false).
// pred must be block-uniform; so is the result.
template <typename Pred>
__device__ uint64_t LargestSatisfying(uint64_t lo, uint64_t hi, Pred pred) {
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (pred(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const T* __restrict__ logits, int64_t vocab_size, int32_t* __restrict__ out) {
  const ArgmaxPair best = RowArgmax(logits + blockIdx.x * vocab_size, vocab_size, 1.0f);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(best.index);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    SampleKernel(const T* __restrict__ logits, int64_t vocab_size,
                 const SamplingParams* __restrict__ params, const double* __restrict__ u,
                 int32_t* __restrict__ out) {
  const T* row = logits + blockIdx.x * vocab_size;
  const SamplingParams sp = params[blockIdx.x];
  if (sp.temperature < kGreedyTemperature) {
    const ArgmaxPair best = RowArgmax(row, vocab_size, 1.0f);
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(best.index);
    return;
  }
  const float max_scaled = RowArgmax(row, vocab_size, sp.temperature).value;
  const RowProbs<T> probs{row, vocab_size, sp.temperature, max_scaled, sp.min_p};

  // Every kept token's key is >= cutoff; the kept set shrinks as cutoff rises.
  uint64_t cutoff = 0;
  if (sp.top_k > 0) {
    const uint64_t k = static_cast<uint64_t>(sp.top_k);
    if (probs.CountAtLeast(0) > k) {
      cutoff =
          LargestSatisfying(0, kMaxKey, [&](uint64_t t) { return probs.CountAtLeast(t) >= k; });
    }
  }
  double total = probs.MassAtLeast(cutoff);
  if (sp.top_p < 1.0f) {
    // The shortest most-likely prefix whose mass reaches top_p · total.
    const double target = static_cast<double>(sp.top_p) * total;
    cutoff = LargestSatisfying(cutoff, kMaxKey,
                               [&](uint64_t t) { return probs.MassAtLeast(t) >= target; });
    total = probs.MassAtLeast(cutoff);
  }
  // Inverse CDF: the first token (in rank order) whose cumulative mass exceeds u · total.
  const double target = u[blockIdx.x] * total;
  uint64_t key;
  if (total > target) {
    key = LargestSatisfying(cutoff, kMaxKey,
                            [&](uint64_t t) { return probs.MassAtLeast(t) > target; });
  } else {
    // u within rounding of 1: the least likely kept token, as the CPU's fallback.
    const uint64_t n = probs.CountAtLeast(cutoff);
    key =
        LargestSatisfying(cutoff, kMaxKey, [&](uint64_t t) { return probs.CountAtLeast(t) >= n; });
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = static_cast<int32_t>(0xFFFFFFFFull - (key & 0xFFFFFFFFull));
}

}  // namespace

template <typename T>
cudaError_t ArgmaxRows(const T* logits, int64_t num_rows, int64_t vocab_size, int32_t* out,
                       cudaStream_t stream) {
  if (num_rows <= 0 || vocab_size <= 0) return cudaSuccess;
  ArgmaxKernel<T>
      <<<num_rows, detail::ThreadsFor(vocab_size, kThreads), 0, stream>>>(logits, vocab_size, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t SampleRows(const T* logits, int64_t num_rows, int64_t vocab_size,
                       const SamplingParams* params, const double* u, int32_t* out,
                       cudaStream_t stream) {
  if (num_rows <= 0 || vocab_size <= 0) return cudaSuccess;
  SampleKernel<T><<<num_rows, detail::ThreadsFor(vocab_size, kThreads), 0, stream>>>(
      logits, vocab_size, params, u, out);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_SAMPLING(T)                                                      \
  template cudaError_t ArgmaxRows<T>(const T*, int64_t, int64_t, int32_t*, cudaStream_t); \
  template cudaError_t SampleRows<T>(const T*, int64_t, int64_t, const SamplingParams*,   \
                                     const double*, int32_t*, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_SAMPLING)

}  // namespace vllm::kernels::cuda
