// TpLayout: how one tensor-parallel rank's share of a Llama-family model is cut — its heads,
// KV heads and MLP columns, and which slices of the checkpoint's tensors it loads into its
// merged qkv and gate_up weights (vLLM's QKVParallelLinear and MergedColumnParallelLinear with
// their weight loaders). Shared by LlamaModel (CPU) and CudaLlamaModel, so both cut alike.
//
// KV heads: with tp <= num_key_value_heads each rank holds num_key_value_heads / tp of them;
// with tp > num_key_value_heads each rank holds one, and each KV head is replicated on
// tp / num_key_value_heads consecutive ranks (rank r holds KV head r / replicas) — vLLM's
// num_kv_head_replicas. Shapes vLLM refuses are refused: num_attention_heads or
// intermediate_size not divisible by tp, and neither of tp and num_key_value_heads dividing
// the other.
//
// Mixture of experts as vLLM's FusedMoE without expert parallelism: every rank holds every
// expert, each expert's columns split like a dense MLP's (gate/up rows: dim 0; down_proj
// columns: dim 1; moe_intermediate_size must divide by tp), the router replicated; the
// block's partial sums meet in one all-reduce.
//
// Plain values; thread-compatible.
#ifndef VLLM_WORKER_TP_LAYOUT_H_
#define VLLM_WORKER_TP_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/hf_config.h"
#include "worker/weights.h"

namespace vllm::worker {

struct TpLayout {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t num_heads = 0;             // query heads on this rank
  int32_t num_kv_heads = 0;          // KV heads on this rank (1 when replicated)
  int32_t num_kv_head_replicas = 1;  // ranks holding each KV head
  int32_t intermediate = 0;          // MLP columns on this rank
  int32_t moe_intermediate = 0;      // columns of each expert on this rank (0: no experts)
  int32_t shared_intermediate = 0;   // Qwen2-MoE's shared expert's columns on this rank
};

// The layout of `rank` in a group of `world_size`. InvalidArgument naming the config key
// (num_attention_heads, num_key_value_heads, intermediate_size) and the tensor-parallel size
// for a shape that cannot be split.
[[nodiscard]] absl::StatusOr<TpLayout> MakeTpLayout(const HfConfig& config, int32_t rank,
                                                    int32_t world_size);

// One piece of a merged column-parallel weight as a rank holds it: its `shard` of checkpoint
// tensor `name` (full shape `shape`), `rows` rows (elements, for a bias) long, placed right
// after the pieces before it.
struct WeightPiece {
  std::string name;
  std::vector<int64_t> shape;
  Shard shard;
  int64_t rows = 0;
};

// Layer `layer`'s q, k and v rows for this rank, in merged order: from q_proj / k_proj /
// v_proj, or ranges of a fused qkv_proj (config.fused_projections). `bias`: the bias vectors
// instead of the weights.
std::vector<WeightPiece> QkvPieces(const HfConfig& config, const TpLayout& tp, int32_t layer,
                                   bool bias);

// Layer `layer`'s gate then up rows for this rank: gate_proj / up_proj, or the two halves of a
// fused gate_up_proj.
std::vector<WeightPiece> GateUpPieces(const HfConfig& config, const TpLayout& tp, int32_t layer);

// Layer `layer`'s router weight, [num_experts, hidden], whole on every rank: mlp.gate.weight
// (Qwen3-MoE) or block_sparse_moe.gate.weight (Mixtral).
WeightPiece RouterPiece(const HfConfig& config, int32_t layer);

// Expert `expert` of layer `layer`: its gate then up rows for this rank (mlp.experts.E.
// gate_proj / up_proj; Mixtral: block_sparse_moe.experts.E.w1 / w3), then its down_proj
// (Mixtral: w2) columns for this rank — three pieces, the hub's one tensor per expert.
std::vector<WeightPiece> ExpertPieces(const HfConfig& config, const TpLayout& tp, int32_t layer,
                                      int32_t expert);

// Qwen2-MoE's shared expert of layer `layer`, cut like a dense MLP: mlp.shared_expert.gate_proj
// and up_proj rows, then down_proj columns for this rank, then the whole
// mlp.shared_expert_gate.weight ([1, hidden], replicated) — four pieces.
std::vector<WeightPiece> SharedExpertPieces(const HfConfig& config, const TpLayout& tp,
                                            int32_t layer);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_TP_LAYOUT_H_
