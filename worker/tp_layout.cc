#include "worker/tp_layout.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vllm::worker {
namespace {

absl::Status CheckDivides(int64_t value, int32_t world_size, const char* what) {
  if (value % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s (%d) is not divisible by the tensor-parallel size %d", what, value, world_size));
  }
  return absl::OkStatus();
}

Shard Ranged(Shard shard, int64_t begin, int64_t size) {
  shard.range_begin = begin;
  shard.range_size = size;
  return shard;
}

}  // namespace

absl::StatusOr<TpLayout> MakeTpLayout(const HfConfig& config, int32_t rank, int32_t world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor-parallel rank %d of %d is out of range", rank, world_size));
  }
  VLLM_RETURN_IF_ERROR(CheckDivides(config.num_attention_heads, world_size, "num_attention_heads"));
  if (config.HasDenseLayer()) {
    VLLM_RETURN_IF_ERROR(CheckDivides(config.intermediate_size, world_size, "intermediate_size"));
  }
  if (config.num_experts > 0) {
    VLLM_RETURN_IF_ERROR(
        CheckDivides(config.moe_intermediate_size, world_size, "moe_intermediate_size"));
    VLLM_RETURN_IF_ERROR(CheckDivides(config.shared_expert_intermediate_size, world_size,
                                      "shared_expert_intermediate_size"));
  }
  const int32_t kv = config.num_key_value_heads;
  TpLayout tp;
  tp.rank = rank;
  tp.world_size = world_size;
  tp.num_heads = config.num_attention_heads / world_size;
  tp.intermediate = config.intermediate_size / world_size;
  tp.moe_intermediate = config.moe_intermediate_size / world_size;
  tp.shared_intermediate = config.shared_expert_intermediate_size / world_size;
  if (kv >= world_size) {
    VLLM_RETURN_IF_ERROR(CheckDivides(kv, world_size, "num_key_value_heads"));
    tp.num_kv_heads = kv / world_size;
  } else if (world_size % kv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_key_value_heads (%d) is not divisible by the tensor-parallel size %d, which is not "
        "a multiple of it either (KV heads are split over the ranks or replicated on them)",
        kv, world_size));
  } else {
    tp.num_kv_heads = 1;
    tp.num_kv_head_replicas = world_size / kv;
  }
  return tp;
}

std::vector<WeightPiece> QkvPieces(const HfConfig& config, const TpLayout& tp, int32_t layer,
                                   bool bias) {
  const int64_t d = config.head_dim;
  const int64_t q_rows = int64_t{config.num_attention_heads} * d;
  const int64_t kv_rows = int64_t{config.num_key_value_heads} * d;
  const Shard q{0, tp.rank, tp.world_size};
  const Shard kv{0, tp.rank / tp.num_kv_head_replicas, tp.world_size / tp.num_kv_head_replicas};
  const int64_t q_local = tp.num_heads * d;
  const int64_t kv_local = tp.num_kv_heads * d;
  const std::string prefix = absl::StrCat("model.layers.", layer, ".self_attn.");
  const char* suffix = bias ? ".bias" : ".weight";
  auto shape = [&](int64_t rows) {
    return bias ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, config.hidden_size};
  };
  if (!config.fused_projections) {
    return {{absl::StrCat(prefix, "q_proj", suffix), shape(q_rows), q, q_local},
            {absl::StrCat(prefix, "k_proj", suffix), shape(kv_rows), kv, kv_local},
            {absl::StrCat(prefix, "v_proj", suffix), shape(kv_rows), kv, kv_local}};
  }
  const std::string name = absl::StrCat(prefix, "qkv_proj", suffix);
  const std::vector<int64_t> full = shape(q_rows + 2 * kv_rows);
  return {{name, full, Ranged(q, 0, q_rows), q_local},
          {name, full, Ranged(kv, q_rows, kv_rows), kv_local},
          {name, full, Ranged(kv, q_rows + kv_rows, kv_rows), kv_local}};
}

std::vector<WeightPiece> GateUpPieces(const HfConfig& config, const TpLayout& tp, int32_t layer) {
  const int64_t inter = config.intermediate_size;
  const int64_t hidden = config.hidden_size;
  const Shard col{0, tp.rank, tp.world_size};
  const std::string prefix = absl::StrCat("model.layers.", layer, ".mlp.");
  if (!config.fused_projections) {
    return {{prefix + "gate_proj.weight", {inter, hidden}, col, tp.intermediate},
            {prefix + "up_proj.weight", {inter, hidden}, col, tp.intermediate}};
  }
  const std::string name = prefix + "gate_up_proj.weight";
  return {{name, {2 * inter, hidden}, Ranged(col, 0, inter), tp.intermediate},
          {name, {2 * inter, hidden}, Ranged(col, inter, inter), tp.intermediate}};
}

WeightPiece RouterPiece(const HfConfig& config, int32_t layer) {
  const bool mixtral = config.architecture == "MixtralForCausalLM";
  return {
      absl::StrCat("model.layers.", layer, mixtral ? ".block_sparse_moe" : ".mlp", ".gate.weight"),
      {config.num_experts, config.hidden_size},
      {},
      config.num_experts};
}

std::vector<WeightPiece> ExpertPieces(const HfConfig& config, const TpLayout& tp, int32_t layer,
                                      int32_t expert) {
  const int64_t inter = config.moe_intermediate_size;
  const int64_t hidden = config.hidden_size;
  const Shard col{0, tp.rank, tp.world_size};
  const Shard row{1, tp.rank, tp.world_size};
  if (config.architecture == "MixtralForCausalLM") {
    const std::string p =
        absl::StrCat("model.layers.", layer, ".block_sparse_moe.experts.", expert, ".");
    return {{p + "w1.weight", {inter, hidden}, col, tp.moe_intermediate},
            {p + "w3.weight", {inter, hidden}, col, tp.moe_intermediate},
            {p + "w2.weight", {hidden, inter}, row, hidden}};
  }
  const std::string p = absl::StrCat("model.layers.", layer, ".mlp.experts.", expert, ".");
  return {{p + "gate_proj.weight", {inter, hidden}, col, tp.moe_intermediate},
          {p + "up_proj.weight", {inter, hidden}, col, tp.moe_intermediate},
          {p + "down_proj.weight", {hidden, inter}, row, hidden}};
}

std::vector<WeightPiece> SharedExpertPieces(const HfConfig& config, const TpLayout& tp,
                                            int32_t layer) {
  const int64_t inter = config.shared_expert_intermediate_size;
  const int64_t hidden = config.hidden_size;
  const Shard col{0, tp.rank, tp.world_size};
  const Shard row{1, tp.rank, tp.world_size};
  const std::string p = absl::StrCat("model.layers.", layer, ".mlp.shared_expert");
  return {{p + ".gate_proj.weight", {inter, hidden}, col, tp.shared_intermediate},
          {p + ".up_proj.weight", {inter, hidden}, col, tp.shared_intermediate},
          {p + ".down_proj.weight", {hidden, inter}, row, hidden},
          {p + "_gate.weight", {1, hidden}, {}, 1}};
}

}  // namespace vllm::worker
