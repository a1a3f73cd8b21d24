// MedusaHead: Medusa's extra decoding heads (the MedusaModel format vLLM loaded up to 0.10,
// vllm/model_executor/models/medusa.py; 0.33 dropped it and we keep it). Head i reads the
// target's last hidden state at a position p (after its final norm) and predicts the token at
// p + 2 + i (the target's own lm_head predicts p + 1):
//
//   x = hidden; for each of its layers: x = x + SiLU(W x + b); logits_i = lm_head_i(x)
//
// config.json: hidden_size, vocab_size, num_heads, num_hidden_layers (vLLM's MedusaConfig
// also reads medusa_num_heads / medusa_num_layers), original_lm_head (one lm_head for every
// head), medusa_fc_bias; truncated_vocab_size must be null or the vocabulary (no token map).
// Tensors: blocks.{i}.layers.{j}.weight [hidden, hidden] (.bias with medusa_fc_bias),
// lm_heads.{i}.weight [vocab, hidden], or lm_head.weight with original_lm_head.
//
// Thread-safety: none; the worker's thread owns a head. Replicated on every rank (no
// collective): every rank drafts the same tokens.
#ifndef VLLM_WORKER_MEDUSA_HEAD_H_
#define VLLM_WORKER_MEDUSA_HEAD_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/packed_linear.h"
#include "worker/weights.h"

namespace vllm::worker {

struct MedusaConfig {
  int32_t hidden_size = 4096;  // vLLM's MedusaConfig defaults
  int32_t vocab_size = 32001;
  int32_t num_heads = 5;
  int32_t num_hidden_layers = 1;
  bool original_lm_head = false;
  bool fc_bias = false;
};

// Parses a Medusa config.json. InvalidArgument naming the key: a wrong type, a size out of
// range (heads 1..16, layers 1..16), or a truncated vocabulary.
[[nodiscard]] absl::StatusOr<MedusaConfig> ParseMedusaConfig(std::string_view config_json);
// ParseMedusaConfig of model_dir/config.json (NotFound when absent).
[[nodiscard]] absl::StatusOr<MedusaConfig> LoadMedusaConfig(const std::filesystem::path& model_dir);

class MedusaHead {
 public:
  // Loads every head. Errors name the tensor (a shape unlike the config's).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MedusaHead>> Load(const MedusaConfig& config,
                                                                        WeightSource& weights);

  // Greedy drafts: for each of the n rows of `hidden` ([n, hidden_size]), the argmax of heads
  // 0 .. k - 1 into drafts[row * k + i]. Requires 1 <= k <= num_heads().
  void Propose(const float* hidden, int64_t n, int32_t k, int32_t* drafts);

  const MedusaConfig& config() const { return config_; }
  int32_t num_heads() const { return config_.num_heads; }

 private:
  explicit MedusaHead(const MedusaConfig& config) : config_(config) {}

  struct Block {
    std::vector<kernels::cpu::PackedWeight> layers;  // [hidden, hidden] each
    std::vector<std::vector<float>> biases;          // empty without medusa_fc_bias
  };
  const MedusaConfig config_;
  std::vector<Block> blocks_;
  std::vector<kernels::cpu::PackedWeight> lm_heads_;  // one per head, or one shared
  std::vector<float> x_, y_, logits_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_MEDUSA_HEAD_H_
