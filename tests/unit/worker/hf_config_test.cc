// HfConfig: real Hugging Face configs of each supported family, defaults, and bad fields
// (every key asking for something the model does not do is refused by name).
#include "worker/hf_config.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::worker {
namespace {

using ::testing::HasSubstr;
using RopeType = kernels::cpu::RopeScaling::Type;

// Meta-Llama-3.1-8B-Instruct's config.json and generation_config.json.
constexpr char kLlama31Config[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 128256
})";
constexpr char kLlama31GenerationConfig[] = R"({
  "bos_token_id": 128000,
  "do_sample": true,
  "eos_token_id": [128001, 128009],
  "temperature": 0.6,
  "top_p": 0.9,
  "transformers_version": "4.42.3"
})";

// Qwen2-0.5B-Instruct.
constexpr char kQwen2Config[] = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Mistral-7B-v0.1.
constexpr char kMistralConfig[] = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// Qwen3-8B (transformers 4.51).
constexpr char kQwen3Config[] = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Phi-3-mini-4k-instruct.
constexpr char kPhi3Config[] = R"({
  "architectures": ["Phi3ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "embd_pdrop": 0.0,
  "eos_token_id": 32000,
  "hidden_act": "silu",
  "hidden_size": 3072,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 4096,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "pad_token_id": 32000,
  "resid_pdrop": 0.0,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "sliding_window": 2047,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.2",
  "use_cache": true,
  "vocab_size": 32064
})";

// Qwen3-30B-A3B (transformers 4.51).
constexpr char kQwen3MoeConfig[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "max_position_embeddings": 40960,
  "max_window_layers": 48,
  "mlp_only_layers": [],
  "model_type": "qwen3_moe",
  "moe_intermediate_size": 768,
  "norm_topk_prob": true,
  "num_attention_heads": 32,
  "num_experts": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 48,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Mixtral-8x7B-v0.1.
constexpr char kMixtralConfig[] = R"({
  "architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

TEST(HfConfigTest, Qwen3MoeHasExpertsAndQkNorm) {
  auto config = ParseHfConfig(kQwen3MoeConfig, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(config->qk_norm);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->num_experts, 128);
  EXPECT_EQ(config->num_experts_per_tok, 8);
  EXPECT_EQ(config->moe_intermediate_size, 768);
  EXPECT_EQ(config->intermediate_size, 6144);
  EXPECT_TRUE(config->norm_topk_prob);
  EXPECT_FALSE(config->sliding_window.has_value());
  for (int32_t i = 0; i < 48; ++i) EXPECT_TRUE(config->IsMoeLayer(i)) << i;
  EXPECT_FALSE(config->HasDenseLayer());
}

TEST(HfConfigTest, Qwen3MoeSparseStepAndDenseLayers) {
  nlohmann::json j = nlohmann::json::parse(kQwen3MoeConfig);
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j.erase("norm_topk_prob");  // transformers' default: false
  j.erase("num_experts");     // transformers 5 spells it num_local_experts
  j["num_local_experts"] = 64;
  auto config = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_experts, 64);
  EXPECT_FALSE(config->norm_topk_prob);
  EXPECT_FALSE(config->IsMoeLayer(0));
  EXPECT_TRUE(config->IsMoeLayer(1));
  EXPECT_FALSE(config->IsMoeLayer(2));
  EXPECT_FALSE(config->IsMoeLayer(3));  // mlp_only_layers
  EXPECT_TRUE(config->IsMoeLayer(5));
  EXPECT_TRUE(config->HasDenseLayer());
  // No experts at all: every layer dense, as transformers builds it.
  j["num_local_experts"] = 0;
  auto dense = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->num_experts, 0);
  EXPECT_FALSE(dense->IsMoeLayer(1));
}

// Qwen1.5-MoE-A2.7B.
constexpr char kQwen2MoeConfig[] = R"({
  "architectures": ["Qwen2MoeForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 8192,
  "max_window_layers": 21,
  "model_type": "qwen2_moe",
  "moe_intermediate_size": 1408,
  "norm_topk_prob": false,
  "num_attention_heads": 16,
  "num_experts": 60,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 24,
  "num_key_value_heads": 16,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 5632,
  "sliding_window": 32768,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

TEST(HfConfigTest, Qwen2MoeHasASharedExpertAndQkvBias) {
  auto config = ParseHfConfig(kQwen2MoeConfig, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_experts, 60);
  EXPECT_EQ(config->num_experts_per_tok, 4);
  EXPECT_EQ(config->moe_intermediate_size, 1408);
  EXPECT_EQ(config->shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(config->norm_topk_prob);
  EXPECT_TRUE(config->attention_bias);  // qkv_bias defaults to true
  EXPECT_FALSE(config->qk_norm);
  EXPECT_FALSE(config->sliding_window.has_value());
  EXPECT_TRUE(config->IsMoeLayer(0) && config->IsMoeLayer(23));
  nlohmann::json j = nlohmann::json::parse(kQwen2MoeConfig);
  j["qkv_bias"] = false;
  auto no_bias = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(no_bias.ok()) << no_bias.status();
  EXPECT_FALSE(no_bias->attention_bias);
  // transformers 5 builds Qwen2-MoE's sliding layers by a rule of its own: refused without an
  // explicit layer_types.
  j["use_sliding_window"] = true;
  auto window = ParseHfConfig(j.dump(), "");
  EXPECT_TRUE(absl::IsInvalidArgument(window.status()));
  EXPECT_THAT(std::string(window.status().message()), HasSubstr("config.json: use_sliding_window"));
  j = nlohmann::json::parse(kQwen2MoeConfig);
  j.erase("shared_expert_intermediate_size");
  auto missing = ParseHfConfig(j.dump(), "");
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("shared_expert_intermediate_size is missing"));
}

TEST(HfConfigTest, MixtralRenormalisesOverItsExperts) {
  auto config = ParseHfConfig(kMixtralConfig, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_experts, 8);
  EXPECT_EQ(config->num_experts_per_tok, 2);
  EXPECT_EQ(config->moe_intermediate_size, 14336);  // the experts' width is intermediate_size
  EXPECT_TRUE(config->norm_topk_prob);
  EXPECT_FALSE(config->qk_norm);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_TRUE(config->IsMoeLayer(0) && config->IsMoeLayer(31));
  EXPECT_FALSE(config->HasDenseLayer());
}

// Each patch of the Qwen3-MoE (or Mixtral) config is refused, naming its key.
TEST(HfConfigTest, MoeKeysNotImplementedAreRefused) {
  struct Bad {
    const char* base;
    nlohmann::json patch;  // a null value erases the key
    std::string needle;
  };
  const std::vector<Bad> cases = {
      {kQwen3MoeConfig, {{"scoring_func", "sigmoid"}}, "config.json: scoring_func \"sigmoid\""},
      {kQwen3MoeConfig, {{"topk_method", "noaux_tc"}}, "config.json: topk_method"},
      {kQwen3MoeConfig, {{"n_group", 8}, {"topk_group", 4}}, "config.json: n_group (8)"},
      {kQwen3MoeConfig, {{"routed_scaling_factor", 2.5}}, "config.json: routed_scaling_factor"},
      {kQwen3MoeConfig, {{"n_shared_experts", 1}}, "config.json: n_shared_experts (1)"},
      {kQwen3MoeConfig,
       {{"shared_expert_intermediate_size", 5632}},
       "config.json: shared_expert_intermediate_size"},
      {kQwen3MoeConfig, {{"num_experts_per_tok", 129}}, "num_experts_per_tok (129) is too large"},
      {kQwen3MoeConfig, {{"num_experts_per_tok", 0}}, "num_experts_per_tok (0) must be positive"},
      {kQwen3MoeConfig, {{"num_experts", nullptr}}, "config.json: num_experts is missing"},
      {kQwen3MoeConfig, {{"num_experts", -1}}, "config.json: num_experts (-1)"},
      {kQwen3MoeConfig,
       {{"moe_intermediate_size", nullptr}},
       "config.json: moe_intermediate_size is missing"},
      {kQwen3MoeConfig, {{"decoder_sparse_step", 0}}, "config.json: decoder_sparse_step (0)"},
      {kQwen3MoeConfig, {{"mlp_only_layers", {48}}}, "config.json: mlp_only_layers (48)"},
      {kQwen3MoeConfig, {{"mlp_only_layers", 3}}, "config.json: mlp_only_layers must be a list"},
      {kQwen3MoeConfig, {{"norm_topk_prob", 1}}, "config.json: norm_topk_prob"},
      {kMixtralConfig, {{"num_local_experts", nullptr}}, "num_local_experts is missing"},
      {kMixtralConfig, {{"num_experts_per_tok", 9}}, "num_experts_per_tok (9) is too large"},
      {kMixtralConfig, {{"scoring_func", "sigmoid"}}, "config.json: scoring_func"},
  };
  for (const Bad& c : cases) {
    nlohmann::json j = nlohmann::json::parse(c.base);
    for (const auto& [key, value] : c.patch.items()) {
      if (value.is_null()) {
        j.erase(key);
      } else {
        j[key] = value;
      }
    }
    auto config = ParseHfConfig(j.dump(), "");
    ASSERT_FALSE(config.ok()) << c.patch.dump();
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.needle)) << c.patch.dump();
  }
}

// Training-only router keys change nothing at inference and are accepted.
TEST(HfConfigTest, MoeTrainingKeysAreIgnored) {
  nlohmann::json j = nlohmann::json::parse(kMixtralConfig);
  j["output_router_logits"] = true;
  j["router_jitter_noise"] = 0.1;
  j["router_aux_loss_coef"] = 0.5;
  EXPECT_TRUE(ParseHfConfig(j.dump(), "").ok());
}

TEST(HfConfigTest, Qwen3HasQkNormAndItsOwnHeadDim) {
  auto config = ParseHfConfig(kQwen3Config, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(config->qk_norm);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_FALSE(config->fused_projections);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_EQ(config->num_key_value_heads, 8);
  EXPECT_EQ(config->rope_theta, 1e6);
  EXPECT_FALSE(config->sliding_window.has_value());
  // Qwen3's attention_bias comes from the config (unlike Qwen2's); head_dim need not be
  // hidden / heads (Qwen3-0.6B: 1024 / 16 heads, head_dim 128).
  nlohmann::json j = nlohmann::json::parse(kQwen3Config);
  j["attention_bias"] = true;
  j["hidden_size"] = 1024;
  j["num_attention_heads"] = 16;
  auto small = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(small->attention_bias);
  EXPECT_EQ(small->head_dim, 128);
  // transformers >= 4.56 writes layer_types; full attention everywhere is the plain model.
  j["layer_types"] = std::vector<std::string>(36, "full_attention");
  auto typed = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_FALSE(typed->sliding_window.has_value());
  // Sliding layers with the window switched on: the window is recorded (max_model_len is
  // limited to it, where whole-context attention is exact).
  j["layer_types"][35] = "sliding_attention";
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  auto sliding = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  EXPECT_EQ(sliding->sliding_window, 4096);
}

TEST(HfConfigTest, Phi3HasFusedProjectionsAndNoBias) {
  auto config = ParseHfConfig(kPhi3Config, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Phi3ForCausalLM");
  EXPECT_TRUE(config->fused_projections);
  EXPECT_FALSE(config->qk_norm);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->head_dim, 96);
  EXPECT_EQ(config->sliding_window, 2047);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{32000}));
  // transformers >= 5 writes partial_rotary_factor 1.0 into rope_parameters: whole heads.
  nlohmann::json j = nlohmann::json::parse(kPhi3Config);
  j["rope_parameters"] = {
      {"partial_rotary_factor", 1.0}, {"rope_theta", 10000.0}, {"rope_type", "default"}};
  j["attention_bias"] = true;  // not a Phi-3 key; its projections never have a bias
  auto v5 = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_FALSE(v5->attention_bias);
}

TEST(HfConfigTest, Llama31WithLlama3RopeScaling) {
  auto config = ParseHfConfig(kLlama31Config, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->vocab_size, 128256);
  EXPECT_EQ(config->hidden_size, 4096);
  EXPECT_EQ(config->intermediate_size, 14336);
  EXPECT_EQ(config->num_hidden_layers, 32);
  EXPECT_EQ(config->num_attention_heads, 32);
  EXPECT_EQ(config->num_key_value_heads, 8);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_EQ(config->max_position_embeddings, 131072);
  EXPECT_EQ(config->rope_theta, 500000.0);
  EXPECT_EQ(config->rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(config->rope_scaling.factor, 8.0);
  EXPECT_EQ(config->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(config->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(config->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(config->rms_norm_eps, 1e-5);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_FALSE(config->sliding_window.has_value());
  EXPECT_EQ(config->bos_token_id, 128000);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(config->torch_dtype, "bfloat16");
}

// transformers >= 5 writes rope_parameters (theta and scaling together) and dtype.
TEST(HfConfigTest, RopeParametersOfTransformers5) {
  auto config = ParseHfConfig(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128,
"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
"max_position_embeddings": 512, "dtype": "bfloat16",
"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}})",
                              "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 500000.0);
  EXPECT_EQ(config->rope_scaling.type, kernels::cpu::RopeScaling::Type::kLlama3);
  EXPECT_EQ(config->rope_scaling.factor, 8.0);
  EXPECT_EQ(config->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(config->torch_dtype, "bfloat16");
}

TEST(HfConfigTest, GenerationConfigEosWins) {
  auto config = ParseHfConfig(kLlama31Config, kLlama31GenerationConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{128001, 128009}));
  // A generation config without eos_token_id (or with null) leaves config.json's.
  auto kept = ParseHfConfig(kLlama31Config, R"({"eos_token_id": null, "top_p": 0.9})");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  auto single = ParseHfConfig(kMistralConfig, R"({"eos_token_id": 7})");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->eos_token_ids, (std::vector<int32_t>{7}));
}

TEST(HfConfigTest, Qwen2HasBiasAndTiedEmbeddings) {
  auto config = ParseHfConfig(kQwen2Config, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(config->attention_bias);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->num_key_value_heads, 2);
  EXPECT_EQ(config->rope_theta, 1e6);
  EXPECT_EQ(config->rope_scaling.type, RopeType::kNone);
  EXPECT_EQ(config->rms_norm_eps, 1e-6);
  // use_sliding_window is false: the window Qwen2 records is not in effect.
  EXPECT_FALSE(config->sliding_window.has_value());
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{151645}));
  // Qwen2's bias does not depend on a flag that its configs never set.
  nlohmann::json j = nlohmann::json::parse(kQwen2Config);
  j["attention_bias"] = false;
  j["use_sliding_window"] = true;
  auto flagged = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_TRUE(flagged->attention_bias);
  EXPECT_EQ(flagged->sliding_window, 32768);
}

TEST(HfConfigTest, MistralRecordsSlidingWindow) {
  auto config = ParseHfConfig(kMistralConfig, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "MistralForCausalLM");
  EXPECT_EQ(config->sliding_window, 4096);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2}));
  nlohmann::json j = nlohmann::json::parse(kMistralConfig);
  j["sliding_window"] = nullptr;  // Mistral-7B-v0.2 onwards
  auto v2 = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_FALSE(v2->sliding_window.has_value());
}

TEST(HfConfigTest, DefaultsAndAlternateSpellings) {
  nlohmann::json j = nlohmann::json::parse(kMistralConfig);
  for (const char* key : {"num_key_value_heads", "rope_theta", "rms_norm_eps",
                          "tie_word_embeddings", "bos_token_id", "eos_token_id", "torch_dtype"}) {
    j.erase(key);
  }
  j["head_dim"] = nullptr;
  j["dtype"] = "float16";                                     // transformers >= 4.56 writes "dtype"
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older key
  auto config = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_key_value_heads, 32);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_EQ(config->rope_theta, 10000.0);
  EXPECT_EQ(config->rms_norm_eps, 1e-6);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_FALSE(config->bos_token_id.has_value());
  EXPECT_TRUE(config->eos_token_ids.empty());
  EXPECT_EQ(config->torch_dtype, "float16");
  EXPECT_EQ(config->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(config->rope_scaling.factor, 2.0);

  // An explicit head_dim need not equal hidden / heads (Mistral-Nemo: 5120 / 32 != 128).
  j["hidden_size"] = 5120;
  j["head_dim"] = 128;
  j["rope_scaling"] = {{"rope_type", "default"}};
  auto nemo = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_EQ(nemo->head_dim, 128);
  EXPECT_EQ(nemo->rope_scaling.type, RopeType::kNone);
}

// google/gemma-2-2b's config.json (no tie_word_embeddings and no layer_types: HF's defaults).
constexpr char kGemma2Config[] = R"({
  "architectures": ["Gemma2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0,
  "bos_token_id": 2,
  "cache_implementation": "hybrid",
  "eos_token_id": [1, 107],
  "final_logit_softcapping": 30.0,
  "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 2304,
  "initializer_range": 0.02,
  "intermediate_size": 9216,
  "max_position_embeddings": 8192,
  "model_type": "gemma2",
  "num_attention_heads": 8,
  "num_hidden_layers": 26,
  "num_key_value_heads": 4,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "torch_dtype": "float32",
  "transformers_version": "4.42.4",
  "use_cache": true,
  "vocab_size": 256000
})";

// google/gemma-3-1b-it's config.json (transformers 4.50: classic rope keys,
// sliding_window_pattern instead of layer_types).
constexpr char kGemma3Config[] = R"({
  "architectures": ["Gemma3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": null,
  "bos_token_id": 2,
  "cache_implementation": "hybrid",
  "eos_token_id": [1, 106],
  "final_logit_softcapping": null,
  "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152,
  "initializer_range": 0.02,
  "intermediate_size": 6912,
  "max_position_embeddings": 32768,
  "model_type": "gemma3_text",
  "num_attention_heads": 4,
  "num_hidden_layers": 26,
  "num_key_value_heads": 1,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_local_base_freq": 10000,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": 512,
  "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.50.0.dev0",
  "use_cache": true,
  "vocab_size": 262144
})";

TEST(HfConfigTest, Gemma2) {
  auto config = ParseHfConfig(kGemma2Config, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Gemma2ForCausalLM");
  EXPECT_TRUE(config->gemma);
  EXPECT_FALSE(config->qk_norm);
  EXPECT_TRUE(config->tie_word_embeddings);  // HF's default
  EXPECT_EQ(config->head_dim, 256);
  EXPECT_EQ(config->AttentionScale(), 1.0f / 16.0f);
  EXPECT_EQ(config->attn_logit_softcapping, 50.0);
  EXPECT_EQ(config->final_logit_softcapping, 30.0);
  EXPECT_EQ(config->rope_theta, 10000.0);
  EXPECT_FALSE(config->rope_local_theta.has_value());
  // HF's default layer_types: even layers slide.
  ASSERT_EQ(config->layer_windows.size(), 26u);
  for (int32_t i = 0; i < 26; ++i) {
    EXPECT_EQ(config->WindowOfLayer(i), i % 2 == 0 ? 4096 : 0) << "layer " << i;
    EXPECT_FALSE(config->UsesLocalRope(i));
  }
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{1, 107}));
}

TEST(HfConfigTest, Gemma2DefaultsForAbsentKeysAndNullCaps) {
  nlohmann::json j = nlohmann::json::parse(kGemma2Config);
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping",
                          "query_pre_attn_scalar", "sliding_window"}) {
    j.erase(key);
  }
  auto defaults = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->attn_logit_softcapping, 50.0);
  EXPECT_EQ(defaults->final_logit_softcapping, 30.0);
  EXPECT_EQ(defaults->query_pre_attn_scalar, 256.0);
  EXPECT_EQ(defaults->WindowOfLayer(0), 4096);
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["query_pre_attn_scalar"] = 144;
  j["tie_word_embeddings"] = false;
  j["layer_types"] = {"full_attention", "sliding_attention"};
  j["num_hidden_layers"] = 2;
  auto off = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->attn_logit_softcapping, 0.0);
  EXPECT_EQ(off->final_logit_softcapping, 0.0);
  EXPECT_EQ(off->AttentionScale(), static_cast<float>(1.0 / 12.0));
  EXPECT_FALSE(off->tie_word_embeddings);
  EXPECT_EQ(off->layer_windows, (std::vector<int32_t>{0, 4096}));
}

TEST(HfConfigTest, Gemma3WithClassicRopeKeys) {
  auto config = ParseHfConfig(kGemma3Config, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "Gemma3ForCausalLM");
  EXPECT_TRUE(config->gemma);
  EXPECT_TRUE(config->qk_norm);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->attn_logit_softcapping, 0.0);
  EXPECT_EQ(config->final_logit_softcapping, 0.0);
  EXPECT_EQ(config->rope_theta, 1e6);
  EXPECT_EQ(config->rope_scaling.type, RopeType::kNone);
  EXPECT_EQ(config->rope_local_theta, 1e4);
  // sliding_window_pattern 6: every sixth layer is global.
  ASSERT_EQ(config->layer_windows.size(), 26u);
  for (int32_t i = 0; i < 26; ++i) {
    const bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(config->WindowOfLayer(i), global ? 0 : 512) << "layer " << i;
    EXPECT_EQ(config->UsesLocalRope(i), !global) << "layer " << i;
  }
  // A classic rope_scaling scales the global layers; absent thetas take HF's defaults.
  nlohmann::json j = nlohmann::json::parse(kGemma3Config);
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  j.erase("rope_theta");
  j.erase("rope_local_base_freq");
  j.erase("sliding_window_pattern");
  j["num_hidden_layers"] = 8;
  auto scaled = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_EQ(scaled->rope_theta, 1e6);
  EXPECT_EQ(scaled->rope_local_theta, 1e4);
  EXPECT_EQ(scaled->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(scaled->rope_scaling.factor, 8.0);
  EXPECT_EQ(scaled->layer_windows, (std::vector<int32_t>{512, 512, 512, 512, 512, 0, 512, 512}));
}

// transformers 5 writes Gemma-3's rope_parameters keyed by layer type, and layer_types.
TEST(HfConfigTest, Gemma3RopeParametersPerLayerType) {
  nlohmann::json j = nlohmann::json::parse(kGemma3Config);
  for (const char* key : {"rope_theta", "rope_scaling", "rope_local_base_freq"}) j.erase(key);
  j["num_hidden_layers"] = 4;
  j["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention", "full_attention"};
  j["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 100000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  j["attn_logit_softcapping"] = 20.0;  // HF's Gemma-3 passes no cap to its attention
  j["final_logit_softcapping"] = 10.0;
  auto config = ParseHfConfig(j.dump(), "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 100000.0);
  EXPECT_EQ(config->rope_scaling.type, RopeType::kLinear);
  EXPECT_EQ(config->rope_scaling.factor, 4.0);
  EXPECT_EQ(config->rope_local_theta, 20000.0);
  EXPECT_EQ(config->attn_logit_softcapping, 0.0);
  EXPECT_EQ(config->final_logit_softcapping, 10.0);
  EXPECT_EQ(config->layer_windows, (std::vector<int32_t>{512, 512, 0, 0}));
  EXPECT_TRUE(config->UsesLocalRope(1));
  EXPECT_FALSE(config->UsesLocalRope(2));
}

struct BadConfig {
  std::string name;
  nlohmann::json patch;  // merged into the Llama 3.1 config; a null value erases the key
  std::string generation_config;
  std::vector<std::string> needles;
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, IsInvalidArgumentNamingTheField) {
  const BadConfig& c = GetParam();
  nlohmann::json j = nlohmann::json::parse(kLlama31Config);
  for (const auto& [key, value] : c.patch.items()) {
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
  }
  auto config = ParseHfConfig(j.dump(), c.generation_config);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  for (const std::string& needle : c.needles) {
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(needle));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadConfigTest,
    ::testing::Values(
        BadConfig{"UnknownArchitecture",
                  {{"architectures", {"GPT2LMHeadModel"}}},
                  "",
                  {"config.json: architectures", "GPT2LMHeadModel", "LlamaForCausalLM",
                   "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Phi3ForCausalLM",
                   "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM"}},
        BadConfig{"Gemma3MultimodalRefused",
                  {{"architectures", {"Gemma3ForConditionalGeneration"}}},
                  "",
                  {"config.json: architectures", "Gemma3ForConditionalGeneration",
                   "is not supported", "Gemma2ForCausalLM", "Gemma3ForCausalLM"}},
        BadConfig{"GemmaOtherActivation",
                  {{"architectures", {"Gemma2ForCausalLM"}}, {"hidden_activation", "gelu"}},
                  "",
                  {"config.json: hidden_activation", "gelu_pytorch_tanh"}},
        BadConfig{"GemmaBidirectional",
                  {{"architectures", {"Gemma3ForCausalLM"}}, {"use_bidirectional_attention", true}},
                  "",
                  {"config.json: use_bidirectional_attention"}},
        BadConfig{"GemmaNegativeSoftCap",
                  {{"architectures", {"Gemma2ForCausalLM"}}, {"final_logit_softcapping", -1.0}},
                  "",
                  {"config.json: final_logit_softcapping (-1)"}},
        BadConfig{"GemmaZeroQueryScalar",
                  {{"architectures", {"Gemma2ForCausalLM"}}, {"query_pre_attn_scalar", 0}},
                  "",
                  {"config.json: query_pre_attn_scalar"}},
        BadConfig{"Gemma3ScaledLocalRope",
                  {{"architectures", {"Gemma3ForCausalLM"}},
                   {"rope_parameters",
                    {{"full_attention", {{"rope_type", "default"}}},
                     {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}}}},
                  "",
                  {"config.json: rope_parameters.sliding_attention.rope_type"}},
        BadConfig{
            "Gemma3YarnGlobalRope",
            {{"architectures", {"Gemma3ForCausalLM"}},
             {"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}, {"factor", 8.0}}}}}},
            "",
            {"config.json: rope_parameters.full_attention.rope_type", "'yarn'"}},
        BadConfig{"RopePerLayerTypeOutsideGemma3",
                  {{"rope_scaling", nullptr},
                   {"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}},
                  "",
                  {"config.json: rope_parameters", "Gemma3ForCausalLM"}},
        BadConfig{"OtherMoeRefused",
                  {{"architectures", {"DeepseekV3ForCausalLM"}}},
                  "",
                  {"config.json: architectures", "DeepseekV3ForCausalLM"}},
        BadConfig{"NoArchitectures", {{"architectures", nullptr}}, "", {"architectures"}},
        BadConfig{"ZeroHidden", {{"hidden_size", 0}}, "", {"config.json: hidden_size (0)"}},
        BadConfig{"NegativeVocab", {{"vocab_size", -5}}, "", {"vocab_size (-5) must be positive"}},
        BadConfig{"KvHeadsDoNotDivide",
                  {{"num_key_value_heads", 3}, {"num_attention_heads", 8}, {"hidden_size", 1024}},
                  "",
                  {"config.json: num_key_value_heads (3) must divide num_attention_heads (8)"}},
        BadConfig{"HiddenNotDivisible",
                  {{"hidden_size", 4100}},
                  "",
                  {"config.json: hidden_size (4100)", "num_attention_heads (32)"}},
        BadConfig{
            "OddHeadDim", {{"head_dim", 63}}, "", {"config.json: head_dim (63) must be even"}},
        BadConfig{"ZeroEps", {{"rms_norm_eps", 0}}, "", {"config.json: rms_norm_eps"}},
        BadConfig{"NegativeTheta", {{"rope_theta", -1.0}}, "", {"config.json: rope_theta"}},
        BadConfig{"YarnScaling",
                  {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
                  "",
                  {"config.json: rope_scaling.rope_type", "'yarn'"}},
        BadConfig{"Llama3MissingLowFreq",
                  {{"rope_scaling",
                    {{"rope_type", "llama3"},
                     {"factor", 8.0},
                     {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 8192}}}},
                  "",
                  {"rope_scaling.low_freq_factor is missing"}},
        BadConfig{"LinearFactorBelowOne",
                  {{"rope_scaling", {{"type", "linear"}, {"factor", 0.5}}}},
                  "",
                  {"rope_scaling.factor"}},
        BadConfig{"EosOutsideVocab",
                  {{"eos_token_id", 128256}},
                  "",
                  {"config.json: eos_token_id (128256)", "vocab_size"}},
        BadConfig{"BosNotInteger", {{"bos_token_id", "one"}}, "", {"config.json: bos_token_id"}},
        BadConfig{"LayersAsString", {{"num_hidden_layers", "32"}}, "", {"num_hidden_layers"}},
        BadConfig{"LayersAsFraction", {{"num_hidden_layers", 32.5}}, "", {"num_hidden_layers"}},
        BadConfig{"MissingIntermediate",
                  {{"intermediate_size", nullptr}},
                  "",
                  {"config.json: intermediate_size is missing"}},
        BadConfig{
            "ZeroMaxPositions", {{"max_position_embeddings", 0}}, "", {"max_position_embeddings"}},
        BadConfig{"TieNotBool", {{"tie_word_embeddings", "yes"}}, "", {"tie_word_embeddings"}},
        BadConfig{"UnknownDtype", {{"torch_dtype", "float64"}}, "", {"torch_dtype"}},
        BadConfig{"ZeroSlidingWindow", {{"sliding_window", 0}}, "", {"sliding_window"}},
        BadConfig{"HugeHeads",
                  {{"num_attention_heads", 4294967296}},
                  "",
                  {"num_attention_heads", "too large"}},
        BadConfig{"GeluActivation",
                  {{"hidden_act", "gelu_pytorch_tanh"}},
                  "",
                  {"config.json: hidden_act", "gelu_pytorch_tanh", "silu"}},
        BadConfig{"MlpBias", {{"mlp_bias", true}}, "", {"config.json: mlp_bias"}},
        BadConfig{"PartialRotary",
                  {{"partial_rotary_factor", 0.5}},
                  "",
                  {"config.json: partial_rotary_factor (0.5)"}},
        BadConfig{"PartialRotaryInRopeParameters",
                  {{"rope_scaling", nullptr},
                   {"rope_parameters",
                    {{"rope_type", "default"},
                     {"rope_theta", 10000.0},
                     {"partial_rotary_factor", 0.75}}}},
                  "",
                  {"config.json: rope_parameters.partial_rotary_factor (0.75)"}},
        // Phi-3-mini-128k's LongRoPE (and its older name, su).
        BadConfig{"Phi3LongRope",
                  {{"architectures", {"Phi3ForCausalLM"}},
                   {"rope_scaling",
                    {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {2.0}}}}},
                  "",
                  {"config.json: rope_scaling.rope_type", "'longrope'"}},
        BadConfig{"Phi3SuRope",
                  {{"architectures", {"Phi3ForCausalLM"}},
                   {"rope_scaling", {{"type", "su"}, {"short_factor", {1.0}}}}},
                  "",
                  {"config.json: rope_scaling.rope_type", "'su'"}},
        BadConfig{"UnknownLayerType",
                  {{"layer_types", std::vector<std::string>(32, "chunked_attention")}},
                  "",
                  {"config.json: layer_types", "chunked_attention"}},
        BadConfig{"LayerTypesWrongLength",
                  {{"layer_types", {"full_attention"}}},
                  "",
                  {"config.json: layer_types", "32 layers"}},
        // Qwen3 with sliding layers but use_sliding_window false: HF would build a window of
        // nothing; refused rather than guessed.
        BadConfig{"SlidingLayersWithoutWindow",
                  {{"architectures", {"Qwen3ForCausalLM"}},
                   {"sliding_window", 4096},
                   {"use_sliding_window", false},
                   {"layer_types", std::vector<std::string>(32, "sliding_attention")}},
                  "",
                  {"config.json: layer_types", "sliding_window"}},
        BadConfig{"GenerationEosOutsideVocab",
                  {},
                  R"({"eos_token_id": [128001, -1]})",
                  {"generation_config.json: eos_token_id (-1)"}},
        BadConfig{"GenerationConfigNotJson", {}, "{oops", {"generation_config.json"}}),
    [](const ::testing::TestParamInfo<BadConfig>& info) { return info.param.name; });

TEST(HfConfigTest, NotJsonOrNotObject) {
  auto text = ParseHfConfig("{\"architectures\": [", "");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("config.json"));
  auto list = ParseHfConfig("[1, 2]", "");
  EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument);
  // Once a stack overflow: the error message printed the deeply nested value.
  auto deep = ParseHfConfig(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": )" +
                                std::string(100000, '[') + std::string(100000, ']') + "}",
                            "");
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(deep.status().message()), HasSubstr("nest deeper than 128"));
}

class LoadHfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/model_config_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::trunc) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(LoadHfConfigTest, ReadsBothFiles) {
  Write("config.json", kLlama31Config);
  auto without = LoadHfConfig(dir_);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->eos_token_ids.size(), 3u);
  Write("generation_config.json", kLlama31GenerationConfig);
  auto with = LoadHfConfig(dir_);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->eos_token_ids, (std::vector<int32_t>{128001, 128009}));
}

TEST_F(LoadHfConfigTest, MissingConfigIsNotFound) {
  auto config = LoadHfConfig(dir_);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("config.json"));
}

TEST_F(LoadHfConfigTest, ErrorsCarryThePath) {
  nlohmann::json j = nlohmann::json::parse(kMistralConfig);
  j["num_key_value_heads"] = 5;
  Write("config.json", j.dump());
  auto config = LoadHfConfig(dir_);
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr((dir_ / "config.json").string() + ": num_key_value_heads (5)"));
}

}  // namespace
}  // namespace vllm::worker
