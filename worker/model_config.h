// ModelConfig: the parts of a Hugging Face config.json (and generation_config.json) that the
// Llama family needs — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, Phi3ForCausalLM.
//
// A plain value type. Parsing validates every field a model would trust (positive sizes,
// heads dividing hidden size, kv heads dividing heads, known rope scaling) and names the
// field in its InvalidArgument; it never throws or aborts on a bad file. A key that asks for
// something the model does not do (another activation, MLP biases, partial rotary, LongRoPE,
// an attention kind other than full or sliding) is refused the same way, never ignored.
#ifndef VLLM_WORKER_MODEL_CONFIG_H_
#define VLLM_WORKER_MODEL_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"

namespace vllm::worker {

struct ModelConfig {
  // architectures[0]: "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
  // "Qwen3ForCausalLM" or "Phi3ForCausalLM".
  std::string architecture;
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  // Defaults to num_attention_heads when absent.
  int32_t num_key_value_heads = 0;
  // Defaults to hidden_size / num_attention_heads when absent.
  int32_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  kernels::cpu::RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  // q/k/v projections carry a bias (Qwen2: always; Llama, Qwen3: "attention_bias"; Phi-3:
  // never).
  bool attention_bias = false;
  // Qwen3: an RMSNorm over each head of q and of k (self_attn.q_norm / k_norm, [head_dim],
  // eps rms_norm_eps) after the projections, before RoPE (HF's modeling_qwen3.py).
  bool qk_norm = false;
  // Phi-3: the checkpoint stores q/k/v as one self_attn.qkv_proj ([q | k | v] rows) and
  // gate/up as one mlp.gate_up_proj ([gate | up] rows); the loaders split them.
  bool fused_projections = false;
  // The attention window when the config switches one on (Mistral, Phi-3; Qwen2/Qwen3 with
  // use_sliding_window; layer_types naming sliding_attention layers). Not implemented:
  // executor::ResolveVllmConfig limits max_model_len to it, where whole-context attention
  // gives the same result.
  std::optional<int32_t> sliding_window;
  std::optional<int32_t> bos_token_id;
  // From generation_config.json when present (it wins), else config.json; an int or a list.
  std::vector<int32_t> eos_token_ids;
  // "float32", "float16" or "bfloat16" (informational: the CPU computes in float32).
  std::string torch_dtype = "float32";
};

// Parses config.json text. `generation_config_json` may be empty (no such file).
[[nodiscard]] absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                                           std::string_view generation_config_json);

// Reads model_dir/config.json and, when it exists, model_dir/generation_config.json.
// NotFound when config.json is missing; InvalidArgument naming the file and field otherwise.
[[nodiscard]] absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_MODEL_CONFIG_H_
