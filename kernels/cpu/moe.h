// Mixture-of-experts ops of the CPU backend (vLLM's fused_moe: topk_softmax and the expert
// computation). Same conventions as kernels/cpu/ops.h: row-major float32, [out, in] weights,
// the caller owns every buffer (MoeScratch holds the op's own temporaries).
//
// Thread-safety: reentrant; a MoeScratch is used by one call at a time.
// Errors: shapes are the caller's contract (VLLM_CHECK), as in ops.h.
#ifndef VLLM_KERNELS_CPU_MOE_H_
#define VLLM_KERNELS_CPU_MOE_H_

#include <cstdint>
#include <vector>

namespace vllm::kernels::cpu {

// The router's choice, as transformers' Qwen3-MoE / Mixtral routers and vLLM's topk_softmax:
// per token, the softmax of its num_experts logits (float32, max subtracted), the k largest
// probabilities in descending order (ties: the lower expert id first), divided by their sum
// when `renormalize`. router_logits is [num_tokens, num_experts]; topk_ids and topk_weights
// are [num_tokens, k]. 1 <= k <= num_experts.
void TopKSoftmax(const float* router_logits, int64_t num_tokens, int32_t num_experts, int32_t k,
                 bool renormalize, int32_t* topk_ids, float* topk_weights);

// Temporaries of FusedMoe, grown on demand and reused across calls.
struct MoeScratch {
  std::vector<int32_t> offsets, rows;
  std::vector<float> weights, x, gate_up, act, y;
};

// out[t] = Σ_j topk_weights[t, j] · down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])) over
// e = topk_ids[t, j], added in ascending expert id (transformers' order). gate_up is
// [num_experts, 2 · inter, hidden] (each expert's gate rows, then its up rows), down is
// [num_experts, hidden, inter]. Tokens are grouped per expert, so each chosen expert's
// weights are read once per call (two GEMMs over its tokens) and unchosen experts not at all.
// Under tensor parallelism `inter` is this rank's share and `out` a partial sum (the caller
// all-reduces). `out` ([num_tokens, hidden]) must not alias `x`.
void FusedMoe(const float* x, const int32_t* topk_ids, const float* topk_weights,
              const float* gate_up, const float* down, float* out, int64_t num_tokens,
              int64_t hidden, int64_t inter, int32_t num_experts, int32_t k, MoeScratch* scratch);

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_MOE_H_
