// Seeded speculative-decoding drafts for a test model: an EAGLE-1 head (vLLM's
// EagleLlamaForCausalLM layout), an EAGLE-3 head (Eagle3LlamaForCausalLM) and a Medusa head
// (MedusaModel), written as config.json +
// model.safetensors (float32) into a directory, shaped after the target's config.json. Their
// weights are random (uniform, seeded): the drafts they propose are mostly wrong, which is
// what verification tests need (a rejected draft must not change the output); the bundled
// model's trained heads (models/kjv-llama-tiny-eagle, -medusa) are the real ones.
#ifndef VLLM_TESTS_SUPPORT_DRAFT_HEADS_H_
#define VLLM_TESTS_SUPPORT_DRAFT_HEADS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace vllm::testing {

struct HeadTensor {
  HeadTensor(std::string n, std::vector<int64_t> s, float sc = 0.1f)
      : name(std::move(n)), shape(std::move(s)), scale(sc) {}
  HeadTensor(std::string n, std::vector<int64_t> s, std::vector<int64_t> ints)
      : name(std::move(n)), shape(std::move(s)), i64(std::move(ints)) {}
  std::string name;
  std::vector<int64_t> shape;
  float scale = 0.1f;        // uniform in [-scale, scale); 0: all ones (a norm weight)
  std::vector<int64_t> i64;  // non-empty: these values as an I64 tensor instead (EAGLE-3's d2t)
};

// Writes `tensors` (float32, seeded) as dir/model.safetensors.
inline void WriteRandomSafetensors(const std::filesystem::path& dir,
                                   const std::vector<HeadTensor>& tensors, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const HeadTensor& t : tensors) {
    if (!t.i64.empty()) {
      const size_t bytes = t.i64.size() * sizeof(int64_t);
      header[t.name] = {{"dtype", "I64"},
                        {"shape", t.shape},
                        {"data_offsets", {data.size(), data.size() + bytes}}};
      data.append(reinterpret_cast<const char*>(t.i64.data()), bytes);
      continue;
    }
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = t.scale == 0.0f ? 1.0f : t.scale * uniform(rng);
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + values.size() * sizeof(float)}}};
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  const std::string text = header.dump();
  std::string out(8, '\0');
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << out << text << data;
}

inline nlohmann::json ReadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A one-layer EAGLE-1 head for the model in `target_dir`: its attention shape, hidden size and
// vocabulary, a Llama layer.
inline void WriteEagleHead(const std::filesystem::path& target_dir,
                           const std::filesystem::path& dir, uint32_t seed) {
  const nlohmann::json t = ReadJsonFile(target_dir / "config.json");
  const int64_t h = t["hidden_size"];
  const int64_t heads = t["num_attention_heads"];
  const int64_t kv = t.value("num_key_value_heads", heads);
  const int64_t d =
      t.contains("head_dim") && !t["head_dim"].is_null() ? t["head_dim"].get<int64_t>() : h / heads;
  const int64_t inter = 2 * h;
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"architectures", {"EagleLlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", h},
                      {"intermediate_size", inter},
                      {"num_attention_heads", heads},
                      {"num_key_value_heads", kv},
                      {"head_dim", d},
                      {"num_hidden_layers", 1},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0},
                      {"max_position_embeddings", t["max_position_embeddings"]},
                      {"vocab_size", t["vocab_size"]},
                      {"tie_word_embeddings", true}};
  std::ofstream(dir / "config.json") << c.dump(2);
  const std::string p = "layers.0.";
  WriteRandomSafetensors(dir,
                         {{"fc.weight", {h, 2 * h}},
                          {p + "self_attn.q_proj.weight", {heads * d, h}},
                          {p + "self_attn.k_proj.weight", {kv * d, h}},
                          {p + "self_attn.v_proj.weight", {kv * d, h}},
                          {p + "self_attn.o_proj.weight", {h, heads * d}},
                          {p + "post_attention_layernorm.weight", {h}, 0.0f},
                          {p + "mlp.gate_proj.weight", {inter, h}},
                          {p + "mlp.up_proj.weight", {inter, h}},
                          {p + "mlp.down_proj.weight", {h, inter}}},
                         seed);
}

// A one-layer EAGLE-3 head (vLLM's Eagle3LlamaForCausalLM layout: midlayer.*, fc over the
// target's aux states, norm, lm_head over a draft vocabulary, d2t) for the model in
// `target_dir`. The draft vocabulary is the target's even ids (d2t[i] = i, so draft id i is
// target id 2i); the aux layers are the distinct ones of {0, L / 2, L} for an L-layer target,
// listed in eagle_config.
inline void WriteEagle3Head(const std::filesystem::path& target_dir,
                            const std::filesystem::path& dir, uint32_t seed) {
  const nlohmann::json t = ReadJsonFile(target_dir / "config.json");
  const int64_t h = t["hidden_size"];
  const int64_t heads = t["num_attention_heads"];
  const int64_t kv = t.value("num_key_value_heads", heads);
  const int64_t d =
      t.contains("head_dim") && !t["head_dim"].is_null() ? t["head_dim"].get<int64_t>() : h / heads;
  const int64_t vocab = t["vocab_size"];
  const int64_t layers = t["num_hidden_layers"];
  const int64_t inter = 2 * h;
  const int64_t draft_vocab = (vocab + 1) / 2;
  std::vector<int64_t> aux = {0, layers / 2, layers};
  aux.erase(std::unique(aux.begin(), aux.end()), aux.end());
  const auto n_aux = static_cast<int64_t>(aux.size());
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"architectures", {"LlamaForCausalLMEagle3"}},
                      {"model_type", "llama"},
                      {"hidden_size", h},
                      {"intermediate_size", inter},
                      {"num_attention_heads", heads},
                      {"num_key_value_heads", kv},
                      {"head_dim", d},
                      {"num_hidden_layers", 1},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0},
                      {"max_position_embeddings", t["max_position_embeddings"]},
                      {"vocab_size", vocab},
                      {"draft_vocab_size", draft_vocab},
                      {"target_hidden_size", h},
                      {"tie_word_embeddings", false},
                      {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", aux}}}};
  std::ofstream(dir / "config.json") << c.dump(2);
  std::vector<int64_t> d2t(static_cast<size_t>(draft_vocab));
  for (int64_t i = 0; i < draft_vocab; ++i) d2t[i] = i;
  const std::string p = "midlayer.";
  WriteRandomSafetensors(dir,
                         {{"fc.weight", {h, n_aux * h}},
                          {p + "input_layernorm.weight", {h}, 0.0f},
                          {p + "hidden_norm.weight", {h}, 0.0f},
                          {p + "self_attn.q_proj.weight", {heads * d, 2 * h}},
                          {p + "self_attn.k_proj.weight", {kv * d, 2 * h}},
                          {p + "self_attn.v_proj.weight", {kv * d, 2 * h}},
                          {p + "self_attn.o_proj.weight", {h, heads * d}},
                          {p + "post_attention_layernorm.weight", {h}, 0.0f},
                          {p + "mlp.gate_proj.weight", {inter, h}},
                          {p + "mlp.up_proj.weight", {inter, h}},
                          {p + "mlp.down_proj.weight", {h, inter}},
                          {"norm.weight", {h}, 0.0f},
                          {"lm_head.weight", {draft_vocab, h}},
                          {"d2t", {draft_vocab}, d2t}},
                         seed);
}

// A Medusa head of `num_heads` one-layer blocks (with biases) and one shared lm_head.
inline void WriteMedusaHead(const std::filesystem::path& target_dir,
                            const std::filesystem::path& dir, int32_t num_heads, uint32_t seed) {
  const nlohmann::json t = ReadJsonFile(target_dir / "config.json");
  const int64_t h = t["hidden_size"];
  const int64_t vocab = t["vocab_size"];
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"architectures", {"MedusaModel"}},
                      {"model_type", "medusa"},
                      {"hidden_size", h},
                      {"vocab_size", vocab},
                      {"medusa_num_heads", num_heads},
                      {"medusa_num_layers", 1},
                      {"original_lm_head", true},
                      {"medusa_fc_bias", true},
                      {"truncated_vocab_size", nullptr}};
  std::ofstream(dir / "config.json") << c.dump(2);
  std::vector<HeadTensor> tensors;
  for (int32_t i = 0; i < num_heads; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".layers.0.";
    tensors.push_back({b + "weight", {h, h}});
    tensors.push_back({b + "bias", {h}});
  }
  tensors.push_back({"lm_head.weight", {vocab, h}});
  WriteRandomSafetensors(dir, tensors, seed);
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_DRAFT_HEADS_H_
