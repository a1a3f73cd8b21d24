// HfConfig: the parts of a Hugging Face config.json (and generation_config.json) that the
// Llama family needs — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, Phi3ForCausalLM, the mixture-of-experts Qwen3MoeForCausalLM,
// Qwen2MoeForCausalLM and MixtralForCausalLM, and Gemma2ForCausalLM / Gemma3ForCausalLM (text).
//
// A plain value type. Parsing validates every field a model would trust (positive sizes,
// heads dividing hidden size, kv heads dividing heads, known rope scaling) and names the
// field in its InvalidArgument; it never throws or aborts on a bad file. A key that asks for
// something the model does not do (another activation, MLP biases, partial rotary, LongRoPE,
// an attention kind other than full or sliding, MoE routing other than softmax top-k) is
// refused the same way, never ignored.
#ifndef VLLM_WORKER_HF_CONFIG_H_
#define VLLM_WORKER_HF_CONFIG_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"

namespace vllm::worker {

struct HfConfig {
  // architectures[0]: "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
  // "Qwen3ForCausalLM", "Phi3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM",
  // "Gemma2ForCausalLM", "Gemma3ForCausalLM" or "Qwen2MoeForCausalLM".
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
  // Whether o_proj may carry a bias too (loaded when the checkpoint has one): Llama's
  // attention_bias covers o_proj; Qwen2 and Qwen2-MoE bias q/k/v only.
  bool MayHaveOProjBias() const {
    return attention_bias && architecture != "Qwen2ForCausalLM" &&
           architecture != "Qwen2MoeForCausalLM";
  }
  // Qwen3: an RMSNorm over each head of q and of k (self_attn.q_norm / k_norm, [head_dim],
  // eps rms_norm_eps) after the projections, before RoPE (HF's modeling_qwen3.py). Gemma-3
  // has them too, as (1 + w) norms.
  bool qk_norm = false;
  // Gemma-2 / Gemma-3 (Gemma2ForCausalLM, Gemma3ForCausalLM; HF's modeling_gemma2.py,
  // modeling_gemma3.py): every RMSNorm multiplies by (1 + weight), in float32; a layer has
  // four (input_layernorm; post_attention_layernorm on the attention output;
  // pre_feedforward_layernorm; post_feedforward_layernorm on the MLP output), and the
  // residual adds the post-normed sub-layer outputs; the embeddings are multiplied by
  // sqrt(hidden_size) (rounded to the model dtype); the MLP is GeGLU with tanh-approximated
  // GELU (hidden_activation gelu_pytorch_tanh).
  bool gemma = false;
  // Attention scores are scaled by query_pre_attn_scalar^-0.5 when set (Gemma; default 256:
  // HF's Python float, rounded once), else head_dim^-0.5 computed in float32 (what both
  // backends always used).
  std::optional<double> query_pre_attn_scalar;
  float AttentionScale() const {
    return query_pre_attn_scalar ? static_cast<float>(1.0 / std::sqrt(*query_pre_attn_scalar))
                                 : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  // Soft caps, cap · tanh(x / cap), 0 when off: on the scaled attention scores before the
  // softmax (Gemma-2's attn_logit_softcapping; HF's Gemma-3 ignores the key) and on the output
  // logits (final_logit_softcapping).
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  // Gemma-3: the RoPE base of the sliding-window (local) layers, which are never scaled
  // (rope_local_base_freq; transformers 5: rope_parameters.sliding_attention.rope_theta);
  // rope_theta and rope_scaling then apply to the full-attention layers only. Unset: every
  // layer uses rope_theta and rope_scaling.
  std::optional<double> rope_local_theta;
  // Whether layer `layer` rotates with rope_local_theta.
  bool UsesLocalRope(int32_t layer) const {
    return rope_local_theta.has_value() && WindowOfLayer(layer) > 0;
  }
  // Mixture of experts (Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, MixtralForCausalLM; 0
  // experts: every layer is dense). A sparse layer's MLP is a router ([num_experts, hidden]:
  // mlp.gate, Mixtral's block_sparse_moe.gate) whose softmax picks num_experts_per_tok
  // experts (their weights renormalised to sum 1 when norm_topk_prob; Mixtral always), each a
  // SiLU MLP of moe_intermediate_size columns (Mixtral: intermediate_size); the output is the
  // weighted sum of theirs. Qwen-MoE: layer i is sparse iff (i + 1) % decoder_sparse_step ==
  // 0 and i is not in mlp_only_layers; the others are dense MLPs of intermediate_size.
  int32_t num_experts = 0;
  int32_t num_experts_per_tok = 0;
  int32_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;
  int32_t decoder_sparse_step = 1;
  std::vector<int32_t> mlp_only_layers;
  // Qwen2-MoE: every sparse layer also has a shared expert (mlp.shared_expert.{gate,up,
  // down}_proj, this many columns) whose output, scaled by sigmoid(mlp.shared_expert_gate ·
  // x) ([1, hidden]), is added to the routed experts'. 0: none.
  int32_t shared_expert_intermediate_size = 0;
  // Whether layer `layer`'s MLP is the sparse MoE block.
  bool IsMoeLayer(int32_t layer) const;
  // Whether any layer is a dense MLP (intermediate_size is then used).
  bool HasDenseLayer() const;
  // Phi-3: the checkpoint stores q/k/v as one self_attn.qkv_proj ([q | k | v] rows) and
  // gate/up as one mlp.gate_up_proj ([gate | up] rows); the loaders split them.
  bool fused_projections = false;
  // The attention window when the config switches one on (Mistral, Phi-3; Qwen2/Qwen3 with
  // use_sliding_window; layer_types naming sliding_attention layers).
  std::optional<int32_t> sliding_window;
  // Per layer, the window its attention is limited to (0: the whole context): from
  // layer_types when config.json has it, else the family's rule (every layer for Mistral and
  // Phi-3; layers >= max_window_layers for Qwen2/Qwen3, as HF builds layer_types). Empty
  // when no window is in effect.
  std::vector<int32_t> layer_windows;
  int32_t WindowOfLayer(int32_t layer) const {
    return layer_windows.empty() ? 0 : layer_windows[static_cast<size_t>(layer)];
  }
  // True when every layer has the same window (> 0): the KV cache may drop blocks that fall
  // out of it. A model with some full-attention layers keeps every block.
  bool AllLayersSliding() const {
    return !layer_windows.empty() &&
           std::all_of(layer_windows.begin(), layer_windows.end(),
                       [&](int32_t w) { return w > 0 && w == layer_windows.front(); });
  }
  std::optional<int32_t> bos_token_id;
  // From generation_config.json when present (it wins), else config.json; an int or a list.
  std::vector<int32_t> eos_token_ids;
  // "float32", "float16" or "bfloat16" (informational: the CPU computes in float32).
  std::string torch_dtype = "float32";
};

// Parses config.json text. `generation_config_json` may be empty (no such file).
[[nodiscard]] absl::StatusOr<HfConfig> ParseHfConfig(std::string_view config_json,
                                                     std::string_view generation_config_json);

// The text of model_dir/config.json: NotFound when it is missing, Internal when unreadable.
// (A draft head's config, which is not an HfConfig, is read with it too.)
[[nodiscard]] absl::StatusOr<std::string> ReadConfigJson(const std::filesystem::path& model_dir);

// Reads model_dir/config.json and, when it exists, model_dir/generation_config.json.
// NotFound when config.json is missing; InvalidArgument naming the file and field otherwise.
[[nodiscard]] absl::StatusOr<HfConfig> LoadHfConfig(const std::filesystem::path& model_dir);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_HF_CONFIG_H_
