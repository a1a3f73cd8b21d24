#include "worker/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace vllm::worker {
namespace {

namespace cpu = ::vllm::kernels::cpu;

// Grows `v` to at least n elements (scratch buffers only grow).
float* Scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void Append(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const ModelConfig& config,
                                                             WeightSource& weights,
                                                             kernels::Communicator* comm) {
  VLLM_CHECK(comm != nullptr) << "LlamaModel needs a communicator (SingleRankCommunicator)";
  VLLM_ASSIGN_OR_RETURN(TpLayout tp, MakeTpLayout(config, comm->rank(), comm->world_size()));
  VLLM_ASSIGN_OR_RETURN(
      cpu::RotaryEmbedding rope,
      cpu::RotaryEmbedding::Create(config.head_dim, config.rope_theta,
                                   config.max_position_embeddings, config.rope_scaling));
  std::unique_ptr<LlamaModel> model(new LlamaModel(config, tp, comm, std::move(rope)));
  VLLM_RETURN_IF_ERROR(model->LoadWeights(weights));
  return model;
}

LlamaModel::LlamaModel(const ModelConfig& config, const TpLayout& tp, kernels::Communicator* comm,
                       cpu::RotaryEmbedding rope)
    : config_(config),
      comm_(comm),
      rope_(std::move(rope)),
      tp_(tp),
      num_heads_(tp.num_heads),
      num_kv_heads_(tp.num_kv_heads),
      intermediate_(tp.intermediate) {}

absl::Status LlamaModel::LoadWeights(WeightSource& weights) {
  const int64_t hidden = config_.hidden_size;
  const int64_t d = config_.head_dim;
  const int64_t vocab = config_.vocab_size;
  const Shard row{1, comm_->rank(), comm_->world_size()};
  auto load = [&](const std::string& name, std::vector<int64_t> shape,
                  const Shard& shard) -> absl::StatusOr<std::vector<float>> {
    return weights.Load(name, shape, shard);
  };

  VLLM_ASSIGN_OR_RETURN(embed_tokens_, load("model.embed_tokens.weight", {vocab, hidden}, {}));
  VLLM_ASSIGN_OR_RETURN(final_norm_, load("model.norm.weight", {hidden}, {}));
  if (!config_.tie_word_embeddings) {
    VLLM_ASSIGN_OR_RETURN(lm_head_, load("lm_head.weight", {vocab, hidden}, {}));
  }
  const int64_t q_rows = int64_t{config_.num_attention_heads} * d;
  layers_.resize(config_.num_hidden_layers);
  for (int32_t i = 0; i < config_.num_hidden_layers; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    VLLM_ASSIGN_OR_RETURN(l.input_norm, load(p + "input_layernorm.weight", {hidden}, {}));
    VLLM_ASSIGN_OR_RETURN(l.post_norm, load(p + "post_attention_layernorm.weight", {hidden}, {}));
    for (const WeightPiece& piece : QkvPieces(config_, tp_, i, /*bias=*/false)) {
      VLLM_ASSIGN_OR_RETURN(auto w, load(piece.name, piece.shape, piece.shard));
      Append(l.qkv, w);
    }
    if (config_.attention_bias) {
      for (const WeightPiece& piece : QkvPieces(config_, tp_, i, /*bias=*/true)) {
        VLLM_ASSIGN_OR_RETURN(auto b, load(piece.name, piece.shape, piece.shard));
        Append(l.qkv_bias, b);
      }
    }
    if (config_.qk_norm) {
      VLLM_ASSIGN_OR_RETURN(l.q_norm, load(p + "self_attn.q_norm.weight", {d}, {}));
      VLLM_ASSIGN_OR_RETURN(l.k_norm, load(p + "self_attn.k_norm.weight", {d}, {}));
    }
    VLLM_ASSIGN_OR_RETURN(l.o_proj, load(p + "self_attn.o_proj.weight", {hidden, q_rows}, row));
    // Llama's attention_bias also biases o_proj; Qwen2 has q/k/v biases only.
    if (config_.attention_bias && config_.architecture != "Qwen2ForCausalLM" &&
        weights.Has(p + "self_attn.o_proj.bias")) {
      VLLM_ASSIGN_OR_RETURN(l.o_bias, load(p + "self_attn.o_proj.bias", {hidden}, {}));
    }
    const int64_t inter = config_.intermediate_size;
    for (const WeightPiece& piece : GateUpPieces(config_, tp_, i)) {
      VLLM_ASSIGN_OR_RETURN(auto w, load(piece.name, piece.shape, piece.shard));
      Append(l.gate_up, w);
    }
    VLLM_ASSIGN_OR_RETURN(l.down, load(p + "mlp.down_proj.weight", {hidden, inter}, row));
  }
  return absl::OkStatus();
}

int64_t LlamaModel::weight_bytes() const {
  size_t n = embed_tokens_.size() + lm_head_.size() + final_norm_.size();
  for (const Layer& l : layers_) {
    n += l.input_norm.size() + l.qkv.size() + l.qkv_bias.size() + l.q_norm.size() +
         l.k_norm.size() + l.o_proj.size() + l.o_bias.size() + l.post_norm.size() +
         l.gate_up.size() + l.down.size();
  }
  return static_cast<int64_t>(n * sizeof(float));
}

KVCache LlamaModel::AllocateKVCache(int32_t num_blocks, int32_t block_size) const {
  KVCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  const size_t per_layer =
      static_cast<size_t>(num_blocks) * block_size * num_kv_heads_ * config_.head_dim;
  for (int32_t l = 0; l < config_.num_hidden_layers; ++l) {
    cache.k.push_back(std::make_unique_for_overwrite<float[]>(per_layer));
    cache.v.push_back(std::make_unique_for_overwrite<float[]>(per_layer));
  }
  return cache;
}

absl::Status LlamaModel::Attention(const Layer& layer, int32_t layer_index,
                                   const ForwardBatch& batch, KVCache& cache, float* hidden) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t d = config_.head_dim;
  const int64_t q_width = num_heads_ * d;
  const int64_t kv_width = num_kv_heads_ * d;
  const int64_t qkv_width = q_width + 2 * kv_width;
  float* qkv = Scratch(qkv_, t * qkv_width);
  cpu::Linear(hidden, layer.qkv.data(), layer.qkv_bias.empty() ? nullptr : layer.qkv_bias.data(),
              qkv, t, qkv_width, config_.hidden_size);
  // Split the merged projection into contiguous q, k, v.
  float* q = Scratch(q_, t * q_width);
  float* k = Scratch(k_, t * kv_width);
  float* v = Scratch(v_, t * kv_width);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = qkv + i * qkv_width;
    std::memcpy(q + i * q_width, row, q_width * sizeof(float));
    std::memcpy(k + i * kv_width, row + q_width, kv_width * sizeof(float));
    std::memcpy(v + i * kv_width, row + q_width + kv_width, kv_width * sizeof(float));
  }
  if (!layer.q_norm.empty()) {
    // Qwen3: each head of q and of k normalised on its own, before RoPE.
    const float eps = static_cast<float>(config_.rms_norm_eps);
    cpu::RmsNorm(q, layer.q_norm.data(), q, t * num_heads_, d, eps);
    cpu::RmsNorm(k, layer.k_norm.data(), k, t * num_kv_heads_, d, eps);
  }
  rope_.Apply(batch.positions.data(), t, q, num_heads_, k, num_kv_heads_);
  float* k_cache = cache.k[layer_index].get();
  float* v_cache = cache.v[layer_index].get();
  cpu::ReshapeAndCache(k, v, k_cache, v_cache, batch.slot_mapping.data(), t, num_kv_heads_,
                       static_cast<int32_t>(d), cache.block_size);
  float* attn = Scratch(attn_out_, t * q_width);
  cpu::PagedAttention(q, k_cache, v_cache, attn, batch.attention, num_heads_, num_kv_heads_,
                      static_cast<int32_t>(d), 1.0f / std::sqrt(static_cast<float>(d)));
  const bool add_bias = !layer.o_bias.empty() && comm_->rank() == 0;
  cpu::Linear(attn, layer.o_proj.data(), add_bias ? layer.o_bias.data() : nullptr, hidden, t,
              config_.hidden_size, q_width);
  return comm_->AllReduceSum(hidden, static_cast<size_t>(t * config_.hidden_size));
}

absl::Status LlamaModel::Mlp(const Layer& layer, int64_t num_tokens, float* hidden) {
  float* gate_up = Scratch(gate_up_, num_tokens * 2 * intermediate_);
  cpu::Linear(hidden, layer.gate_up.data(), nullptr, gate_up, num_tokens, 2 * intermediate_,
              config_.hidden_size);
  float* act = Scratch(act_, num_tokens * intermediate_);
  cpu::SiluAndMul(gate_up, act, num_tokens, intermediate_);
  cpu::Linear(act, layer.down.data(), nullptr, hidden, num_tokens, config_.hidden_size,
              intermediate_);
  return comm_->AllReduceSum(hidden, static_cast<size_t>(num_tokens * config_.hidden_size));
}

absl::Status LlamaModel::Forward(const ForwardBatch& batch, KVCache& cache,
                                 std::vector<float>* logits) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  VLLM_CHECK(batch.positions.size() == static_cast<size_t>(t) &&
             batch.slot_mapping.size() == static_cast<size_t>(t))
      << "batch arrays disagree on the token count";
  float* hidden = Scratch(hidden_, t * h);
  float* residual = Scratch(residual_, t * h);
  cpu::Embedding(batch.token_ids.data(), t, embed_tokens_.data(), 0, config_.vocab_size, h,
                 residual);
  // residual holds the stream; hidden the normalised input of the next sub-layer.
  cpu::RmsNorm(residual, layers_[0].input_norm.data(), hidden, t, h, eps);
  for (int32_t i = 0; i < config_.num_hidden_layers; ++i) {
    const Layer& layer = layers_[i];
    if (i > 0) cpu::FusedAddRmsNorm(hidden, residual, layer.input_norm.data(), t, h, eps);
    VLLM_RETURN_IF_ERROR(Attention(layer, i, batch, cache, hidden));
    cpu::FusedAddRmsNorm(hidden, residual, layer.post_norm.data(), t, h, eps);
    VLLM_RETURN_IF_ERROR(Mlp(layer, t, hidden));
  }
  // Only the sampling rows go through the final norm and lm_head.
  const int64_t n = static_cast<int64_t>(batch.logits_indices.size());
  float* rows = Scratch(rows_, n * h);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t src = batch.logits_indices[r];
    VLLM_CHECK(src >= 0 && src < t) << "logits index " << src << " outside the batch";
    for (int64_t j = 0; j < h; ++j) rows[r * h + j] = hidden[src * h + j] + residual[src * h + j];
  }
  cpu::RmsNorm(rows, final_norm_.data(), rows, n, h, eps);
  logits->resize(static_cast<size_t>(n * config_.vocab_size));
  const std::vector<float>& head = lm_head_.empty() ? embed_tokens_ : lm_head_;
  cpu::Linear(rows, head.data(), nullptr, logits->data(), n, config_.vocab_size, h);
  return absl::OkStatus();
}

}  // namespace vllm::worker
