// Fuzzes worker::ParseHfConfig (a model directory's config.json and
// generation_config.json). The input is config.json, optionally followed by a NUL byte and
// generation_config.json. Invariants:
//   - no crash, throw or leak, no input over -timeout or -rss_limit_mb, whatever the text;
//   - an accepted config satisfies everything the model code trusts it for: known
//     architecture and dtype, positive sizes, kv heads dividing heads, an even head_dim,
//     finite positive rope_theta and rms_norm_eps, rope scaling factor >= 1, and every
//     bos/eos id inside the vocabulary.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "worker/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const auto [config_json, generation_json] = fuzz::SplitAtNul(fuzz::AsText(data, size));
  absl::StatusOr<worker::HfConfig> parsed = worker::ParseHfConfig(config_json, generation_json);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument ||
                   parsed.status().code() == absl::StatusCode::kResourceExhausted,
               "unexpected error code: " + parsed.status().ToString());
    return 0;
  }
  const worker::HfConfig& c = *parsed;
  FUZZ_CHECK(c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM" ||
                 c.architecture == "Qwen2ForCausalLM" || c.architecture == "Qwen3ForCausalLM" ||
                 c.architecture == "Phi3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM" ||
                 c.architecture == "MixtralForCausalLM" ||
                 c.architecture == "Qwen2MoeForCausalLM" || c.architecture == "Gemma2ForCausalLM" ||
                 c.architecture == "Gemma3ForCausalLM",
             "unknown architecture " + c.architecture);
  FUZZ_CHECK(c.attn_logit_softcapping >= 0 && c.final_logit_softcapping >= 0 &&
                 (!c.query_pre_attn_scalar || *c.query_pre_attn_scalar > 0) &&
                 (!c.rope_local_theta || *c.rope_local_theta > 0),
             "a Gemma field is out of range");
  if (c.num_experts > 0) {
    FUZZ_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts &&
                   c.moe_intermediate_size > 0 && c.decoder_sparse_step > 0,
               "bad MoE shape");
    for (int32_t layer : c.mlp_only_layers) {
      FUZZ_CHECK(layer >= 0 && layer < c.num_hidden_layers, "mlp_only_layers outside the model");
    }
  }
  FUZZ_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 &&
                 c.num_hidden_layers > 0 && c.max_position_embeddings > 0,
             "a size is not positive");
  FUZZ_CHECK(c.num_attention_heads > 0 && c.num_key_value_heads > 0 &&
                 c.num_attention_heads % c.num_key_value_heads == 0,
             "kv heads do not divide heads");
  FUZZ_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim not positive and even");
  FUZZ_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, "bad rope_theta");
  FUZZ_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0, "bad rms_norm_eps");
  FUZZ_CHECK(std::isfinite(c.rope_scaling.factor) && c.rope_scaling.factor >= 1.0,
             "bad rope scaling factor");
  if (c.rope_scaling.type == kernels::cpu::RopeScaling::Type::kLlama3) {
    FUZZ_CHECK(c.rope_scaling.low_freq_factor > 0 &&
                   c.rope_scaling.low_freq_factor < c.rope_scaling.high_freq_factor &&
                   std::isfinite(c.rope_scaling.high_freq_factor) &&
                   c.rope_scaling.original_max_position_embeddings > 0,
               "bad llama3 rope scaling");
  }
  FUZZ_CHECK(!c.sliding_window.has_value() || *c.sliding_window > 0, "bad sliding_window");
  FUZZ_CHECK(
      c.torch_dtype == "float32" || c.torch_dtype == "float16" || c.torch_dtype == "bfloat16",
      "bad torch_dtype " + c.torch_dtype);
  if (c.bos_token_id.has_value()) {
    FUZZ_CHECK(*c.bos_token_id >= 0 && *c.bos_token_id < c.vocab_size, "bos id outside vocab");
  }
  for (int32_t id : c.eos_token_ids) {
    FUZZ_CHECK(id >= 0 && id < c.vocab_size, "eos id outside vocab");
  }
  return 0;
}
