// CUDA backend: the mixture-of-experts ops, the GPU twins of kernels/cpu/moe.h. Conventions as
// kernels/cuda/ops.h: raw device pointers, enqueue on `stream`, return the launch's error
// (cudaSuccess when a size is 0), never allocate or synchronise, so they can be captured in a
// CUDA graph. T ∈ {float, __half, __nv_bfloat16}, arithmetic in float.
//
// The routing stays on the device: instead of per-expert token lists (whose sizes the host
// would have to read back), the router writes a dense [num_tokens, num_experts] matrix of
// routing weights, zero for experts a token did not choose; each expert then runs over every
// token and MoeAccumulate adds only the rows that chose it (see docs/DECISIONS.md).
#ifndef VLLM_KERNELS_CUDA_MOE_H_
#define VLLM_KERNELS_CUDA_MOE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace vllm::kernels::cuda {

// The most experts MoeTopKSoftmax handles (one token's probabilities sit in shared memory).
inline constexpr int32_t kMoeMaxExperts = 4096;

// kernels::cpu::TopKSoftmax with a dense output: per token, the softmax (float) of its
// router_logits row [num_experts], the k largest probabilities (ties: the lower expert id),
// divided by their sum when `renormalize`. weights[t, e] is expert e's weight for token t,
// 0 when t did not choose e. cudaErrorInvalidValue when num_experts exceeds kMoeMaxExperts or
// k is outside [1, num_experts].
template <typename T>
cudaError_t MoeTopKSoftmax(const T* router_logits, int64_t num_tokens, int32_t num_experts,
                           int32_t k, bool renormalize, float* weights, cudaStream_t stream);

// acc[t, :] += weights[t, expert] · y[t, :] for every token t whose weight for `expert` is not
// 0 (other rows are left alone, whatever y holds). acc is float [num_tokens, hidden], y is
// [num_tokens, hidden], weights [num_tokens, num_experts] as MoeTopKSoftmax writes it.
template <typename T>
cudaError_t MoeAccumulate(const T* y, const float* weights, int32_t num_experts, int32_t expert,
                          int64_t num_tokens, int64_t hidden, float* acc, cudaStream_t stream);

// out[t] = sigmoid(x[t] · gate) for t < num_tokens: Qwen2-MoE's shared_expert_gate, the dot
// product in float and rounded to T (as a linear layer's output is), the sigmoid in float.
// x is [num_tokens, hidden], gate [hidden].
template <typename T>
cudaError_t MoeSharedExpertGate(const T* x, const T* gate, int64_t num_tokens, int64_t hidden,
                                float* out, cudaStream_t stream);

// out[i] = acc[i] rounded to T, for i < n.
template <typename T>
cudaError_t MoeFinalize(const float* acc, int64_t n, T* out, cudaStream_t stream);

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_MOE_H_
