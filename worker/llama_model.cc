#include "worker/llama_model.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/llama_internal.h"

namespace vllm::worker {
namespace {

namespace cpu = ::vllm::kernels::cpu;
using llama_internal::Append;
using llama_internal::PackWeight;
using llama_internal::Scratch;

// Gemma's norms multiply by (1 + w), computed in float32 as HF does; held pre-added.
void AddOne(std::vector<float>& weight) {
  for (float& w : weight) w = 1.0f + w;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const HfConfig& config,
                                                             WeightSource& weights,
                                                             kernels::Communicator* comm,
                                                             const PpStage* stage) {
  return Build(config, weights, comm, nullptr, nullptr, stage);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Build(
    const HfConfig& config, WeightSource& weights, kernels::Communicator* comm,
    const LlamaModel* eagle_target, const Eagle3Options* eagle3, const PpStage* stage) {
  VLLM_CHECK(comm != nullptr) << "LlamaModel needs a communicator (SingleRankCommunicator)";
  VLLM_ASSIGN_OR_RETURN(TpLayout tp, MakeTpLayout(config, comm->rank(), comm->world_size()));
  VLLM_ASSIGN_OR_RETURN(
      cpu::RotaryEmbedding rope,
      cpu::RotaryEmbedding::Create(config.head_dim, config.rope_theta,
                                   config.max_position_embeddings, config.rope_scaling));
  std::unique_ptr<LlamaModel> model(new LlamaModel(config, tp, comm, std::move(rope)));
  model->shared_ = eagle_target;
  if (stage != nullptr) {
    VLLM_CHECK(eagle_target == nullptr && stage->first_layer >= 0 &&
               stage->first_layer <= stage->end_layer &&
               stage->end_layer <= config.num_hidden_layers)
        << "a pipeline stage of a draft head, or layers outside the model";
    model->stage_ = *stage;
  }
  model->logits_width_ = config.vocab_size;
  if (eagle3 != nullptr) {
    model->eagle3_ = true;
    model->eagle3_options_ = *eagle3;
    model->logits_width_ = eagle3->draft_vocab_size;
  }
  if (config.rope_local_theta) {
    VLLM_ASSIGN_OR_RETURN(model->rope_local_,
                          cpu::RotaryEmbedding::Create(config.head_dim, *config.rope_local_theta,
                                                       config.max_position_embeddings, {}));
  }
  VLLM_RETURN_IF_ERROR(model->LoadWeights(weights));
  return model;
}

LlamaModel::LlamaModel(const HfConfig& config, const TpLayout& tp, kernels::Communicator* comm,
                       cpu::RotaryEmbedding rope)
    : config_(config),
      comm_(comm),
      rope_(std::move(rope)),
      tp_(tp),
      stage_{0, 1, 0, config.num_hidden_layers},
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

  // An EAGLE or EAGLE-3 head (shared_) loads its own tensors (llama_eagle.cc).
  const bool eagle = shared_ != nullptr;
  if (eagle) {
    VLLM_RETURN_IF_ERROR(LoadHeadWeights(weights));
  } else {
    // A pipeline stage holds the embedding if it is first (or last, tied to lm_head), the final
    // norm and lm_head if it is last.
    if (stage_.is_first() || (stage_.is_last() && config_.tie_word_embeddings)) {
      VLLM_ASSIGN_OR_RETURN(embed_tokens_, load("model.embed_tokens.weight", {vocab, hidden}, {}));
    }
    if (stage_.is_last()) {
      VLLM_ASSIGN_OR_RETURN(final_norm_, load("model.norm.weight", {hidden}, {}));
      if (config_.tie_word_embeddings) {
        lm_head_ = PackWeight(embed_tokens_.data(), vocab, hidden);
        if (!stage_.is_first()) embed_tokens_ = {};  // only lm_head's packed copy is used
      } else {
        VLLM_ASSIGN_OR_RETURN(auto head, load("lm_head.weight", {vocab, hidden}, {}));
        lm_head_ = PackWeight(head.data(), vocab, hidden);
      }
    }
  }
  const int64_t q_rows = int64_t{config_.num_attention_heads} * d;
  layers_.resize(config_.num_hidden_layers);
  for (int32_t i = stage_.first_layer; i < stage_.end_layer; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    // EAGLE's first layer reads fc's output unnormalised (vLLM's disable_input_layernorm);
    // EAGLE-3's normalises the embedding with it and the hidden input with hidden_norm.
    if (!eagle || i > 0 || eagle3_) {
      VLLM_ASSIGN_OR_RETURN(l.input_norm, load(p + "input_layernorm.weight", {hidden}, {}));
    }
    if (eagle3_ && i == 0) {
      VLLM_ASSIGN_OR_RETURN(l.hidden_norm, load(p + "hidden_norm.weight", {hidden}, {}));
    }
    VLLM_ASSIGN_OR_RETURN(l.post_norm, load(p + "post_attention_layernorm.weight", {hidden}, {}));
    const int64_t in = LayerInputWidth(i);
    std::vector<float> qkv;
    for (WeightPiece& piece : QkvPieces(config_, tp_, i, /*bias=*/false)) {
      piece.shape[1] = in;
      VLLM_ASSIGN_OR_RETURN(auto w, load(piece.name, piece.shape, piece.shard));
      Append(qkv, w);
    }
    l.qkv = PackWeight(qkv.data(), static_cast<int64_t>(qkv.size()) / in, in);
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
    VLLM_ASSIGN_OR_RETURN(auto o_proj, load(p + "self_attn.o_proj.weight", {hidden, q_rows}, row));
    l.o_proj = PackWeight(o_proj.data(), hidden, static_cast<int64_t>(o_proj.size()) / hidden);
    if (config_.MayHaveOProjBias() && weights.Has(p + "self_attn.o_proj.bias")) {
      VLLM_ASSIGN_OR_RETURN(l.o_bias, load(p + "self_attn.o_proj.bias", {hidden}, {}));
    }
    if (config_.IsMoeLayer(i)) {
      VLLM_RETURN_IF_ERROR(LoadExperts(weights, i, l));
      continue;
    }
    const int64_t inter = config_.intermediate_size;
    std::vector<float> gate_up;
    for (const WeightPiece& piece : GateUpPieces(config_, tp_, i)) {
      VLLM_ASSIGN_OR_RETURN(auto w, load(piece.name, piece.shape, piece.shard));
      Append(gate_up, w);
    }
    l.gate_up = PackWeight(gate_up.data(), static_cast<int64_t>(gate_up.size()) / hidden, hidden);
    VLLM_ASSIGN_OR_RETURN(auto down, load(p + "mlp.down_proj.weight", {hidden, inter}, row));
    l.down = PackWeight(down.data(), hidden, static_cast<int64_t>(down.size()) / hidden);
  }
  if (config_.gemma) VLLM_RETURN_IF_ERROR(LoadGemmaNorms(weights));
  return absl::OkStatus();
}

void LlamaModel::ReleaseWeights() {
  embed_tokens_ = {};
  lm_head_ = {};
  final_norm_ = {};
  layers_ = {};
}

absl::Status LlamaModel::ReloadWeights(WeightSource& weights) {
  ReleaseWeights();
  return LoadWeights(weights);
}

absl::Status LlamaModel::LoadGemmaNorms(WeightSource& weights) {
  const std::vector<int64_t> shape = {config_.hidden_size};
  AddOne(final_norm_);
  for (int32_t i = stage_.first_layer; i < stage_.end_layer; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    VLLM_ASSIGN_OR_RETURN(l.pre_ff_norm,
                          weights.Load(p + "pre_feedforward_layernorm.weight", shape, {}));
    VLLM_ASSIGN_OR_RETURN(l.post_ff_norm,
                          weights.Load(p + "post_feedforward_layernorm.weight", shape, {}));
    for (std::vector<float>* norm :
         {&l.input_norm, &l.post_norm, &l.pre_ff_norm, &l.post_ff_norm, &l.q_norm, &l.k_norm}) {
      AddOne(*norm);
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::LoadExperts(WeightSource& weights, int32_t layer_index, Layer& layer) {
  const WeightPiece router = RouterPiece(config_, layer_index);
  VLLM_ASSIGN_OR_RETURN(layer.router, weights.Load(router.name, router.shape, router.shard));
  const size_t per_expert = static_cast<size_t>(tp_.moe_intermediate) * config_.hidden_size;
  layer.experts_gate_up.reserve(2 * per_expert * config_.num_experts);
  layer.experts_down.reserve(per_expert * config_.num_experts);
  for (int32_t e = 0; e < config_.num_experts; ++e) {
    const std::vector<WeightPiece> pieces = ExpertPieces(config_, tp_, layer_index, e);
    for (size_t j = 0; j < pieces.size(); ++j) {
      VLLM_ASSIGN_OR_RETURN(auto w, weights.Load(pieces[j].name, pieces[j].shape, pieces[j].shard));
      Append(j < 2 ? layer.experts_gate_up : layer.experts_down, w);  // gate, up; then down
    }
  }
  if (config_.shared_expert_intermediate_size == 0) return absl::OkStatus();
  const std::vector<WeightPiece> shared = SharedExpertPieces(config_, tp_, layer_index);
  std::vector<float>* into[] = {&layer.shared_gate_up, &layer.shared_gate_up, &layer.shared_down,
                                &layer.shared_gate};
  for (size_t j = 0; j < shared.size(); ++j) {
    VLLM_ASSIGN_OR_RETURN(auto w, weights.Load(shared[j].name, shared[j].shape, shared[j].shard));
    Append(*into[j], w);
  }
  return absl::OkStatus();
}

int64_t LlamaModel::weight_bytes() const {
  size_t n = embed_tokens_.size() + final_norm_.size() + eagle_fc_bias_.size() +
             fc_input_norm_.size() + draft_to_target_.size();
  for (const std::vector<float>& norm : fc_norms_) n += norm.size();
  size_t packed = lm_head_.bytes() + eagle_fc_.bytes();
  for (const Layer& l : layers_) {
    n += l.input_norm.size() + l.hidden_norm.size() + l.qkv_bias.size() + l.q_norm.size() +
         l.k_norm.size() + l.o_bias.size() + l.post_norm.size() + l.router.size() +
         l.experts_gate_up.size() + l.experts_down.size() + l.pre_ff_norm.size() +
         l.post_ff_norm.size() + l.shared_gate_up.size() + l.shared_down.size() +
         l.shared_gate.size();
    packed += l.qkv.bytes() + l.o_proj.bytes() + l.gate_up.bytes() + l.down.bytes();
  }
  return static_cast<int64_t>(n * sizeof(float) + packed);
}

void CachePagesDeleter::operator()(float* p) const {
  if (p != nullptr) munmap(p, bytes);
}

absl::StatusOr<KVCache> LlamaModel::AllocateKVCache(int32_t num_blocks, int32_t block_size) const {
  KVCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  const size_t per_layer =
      static_cast<size_t>(num_blocks) * block_size * num_kv_heads_ * config_.head_dim;
  const size_t bytes = std::max<size_t>(per_layer * sizeof(float), 1);
  const auto map = [&]() -> absl::StatusOr<CachePages> {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the KV cache: mapping ", bytes, " bytes for a layer failed: ", strerror(errno)));
    }
    // Advice only: where transparent huge pages are off, 4 KiB pages serve the same.
    (void)madvise(p, bytes, MADV_HUGEPAGE);
    // One write per 4 KiB page faults the mapping in (a 2 MiB page at the first write where
    // the kernel gives huge pages), spread over the pool in 2 MiB pieces.
    constexpr size_t kPiece = size_t{2} << 20, kPage = 4096;
    auto* base = static_cast<volatile char*>(p);
    cpu::KernelThreadPool().ParallelFor(
        static_cast<int64_t>((bytes + kPiece - 1) / kPiece), [&](int64_t piece) {
          const size_t end = std::min(bytes, (static_cast<size_t>(piece) + 1) * kPiece);
          for (size_t at = static_cast<size_t>(piece) * kPiece; at < end; at += kPage) {
            base[at] = 0;
          }
        });
    return CachePages(static_cast<float*>(p), CachePagesDeleter{bytes});
  };
  for (int32_t l = 0; l < config_.num_hidden_layers; ++l) {
    if (!stage_.owns(l)) {  // another pipeline stage's layer
      cache.k.emplace_back();
      cache.v.emplace_back();
      continue;
    }
    VLLM_ASSIGN_OR_RETURN(CachePages k, map());
    VLLM_ASSIGN_OR_RETURN(CachePages v, map());
    cache.k.push_back(std::move(k));
    cache.v.push_back(std::move(v));
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
  cpu::LinearPacked(hidden, layer.qkv, layer.qkv_bias.empty() ? nullptr : layer.qkv_bias.data(),
                    qkv, t);
  // Per token: split the merged projection into contiguous q, k, v, (Qwen3) normalise each
  // head, rotate q and k, and write k and v into the paged cache. Tokens are independent, so
  // a large batch runs them on the kernel pool (same results on any thread count).
  float* q = Scratch(q_, t * q_width);
  float* k = Scratch(k_, t * kv_width);
  float* v = Scratch(v_, t * kv_width);
  const cpu::RotaryEmbedding& rope = config_.UsesLocalRope(layer_index) ? *rope_local_ : rope_;
  float* k_cache = cache.k[layer_index].get();
  float* v_cache = cache.v[layer_index].get();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const auto token = [&](int64_t i) {
    const float* row = qkv + i * qkv_width;
    float* qi = q + i * q_width;
    float* ki = k + i * kv_width;
    float* vi = v + i * kv_width;
    std::memcpy(qi, row, q_width * sizeof(float));
    std::memcpy(ki, row + q_width, kv_width * sizeof(float));
    std::memcpy(vi, row + q_width + kv_width, kv_width * sizeof(float));
    if (!layer.q_norm.empty()) {
      cpu::RmsNorm(qi, layer.q_norm.data(), qi, num_heads_, d, eps);
      cpu::RmsNorm(ki, layer.k_norm.data(), ki, num_kv_heads_, d, eps);
    }
    rope.Apply(batch.positions.data() + i, 1, qi, num_heads_, ki, num_kv_heads_);
    cpu::ReshapeAndCache(ki, vi, k_cache, v_cache, batch.slot_mapping.data() + i, 1, num_kv_heads_,
                         static_cast<int32_t>(d), cache.block_size);
  };
  cpu::ForEachRow(t, qkv_width, token);
  float* attn = Scratch(attn_out_, t * q_width);
  cpu::PagedAttention(q, k_cache, v_cache, attn, batch.attention, num_heads_, num_kv_heads_,
                      static_cast<int32_t>(d), config_.AttentionScale(),
                      config_.WindowOfLayer(layer_index),
                      static_cast<float>(config_.attn_logit_softcapping));
  const bool add_bias = !layer.o_bias.empty() && comm_->rank() == 0;
  cpu::LinearPacked(attn, layer.o_proj, add_bias ? layer.o_bias.data() : nullptr, hidden, t);
  return comm_->AllReduceSum(hidden, static_cast<size_t>(t * config_.hidden_size));
}

absl::Status LlamaModel::Mlp(const Layer& layer, int64_t num_tokens, float* hidden) {
  if (!layer.router.empty()) return Moe(layer, num_tokens, hidden);
  float* gate_up = Scratch(gate_up_, num_tokens * 2 * intermediate_);
  cpu::LinearPacked(hidden, layer.gate_up, nullptr, gate_up, num_tokens);
  float* act = Scratch(act_, num_tokens * intermediate_);
  if (config_.gemma) {
    cpu::GeluTanhAndMul(gate_up, act, num_tokens, intermediate_);
  } else {
    cpu::SiluAndMul(gate_up, act, num_tokens, intermediate_);
  }
  cpu::LinearPacked(act, layer.down, nullptr, hidden, num_tokens);
  return comm_->AllReduceSum(hidden, static_cast<size_t>(num_tokens * config_.hidden_size));
}

absl::Status LlamaModel::Moe(const Layer& layer, int64_t num_tokens, float* hidden) {
  const int64_t h = config_.hidden_size;
  const int32_t experts = config_.num_experts;
  const int32_t k = config_.num_experts_per_tok;
  float* logits = Scratch(router_logits_, num_tokens * experts);
  cpu::Linear(hidden, layer.router.data(), nullptr, logits, num_tokens, experts, h);
  if (topk_ids_.size() < static_cast<size_t>(num_tokens * k)) topk_ids_.resize(num_tokens * k);
  float* weights = Scratch(topk_weights_, num_tokens * k);
  cpu::TopKSoftmax(logits, num_tokens, experts, k, config_.norm_topk_prob, topk_ids_.data(),
                   weights);
  float* out = Scratch(moe_out_, num_tokens * h);
  cpu::FusedMoe(hidden, topk_ids_.data(), weights, layer.experts_gate_up.data(),
                layer.experts_down.data(), out, num_tokens, h, tp_.moe_intermediate, experts, k,
                &moe_scratch_);
  if (!layer.shared_gate.empty()) AddSharedExpert(layer, num_tokens, hidden, out);
  std::memcpy(hidden, out, static_cast<size_t>(num_tokens * h) * sizeof(float));
  return comm_->AllReduceSum(hidden, static_cast<size_t>(num_tokens * h));
}

void LlamaModel::AddSharedExpert(const Layer& layer, int64_t num_tokens, const float* x,
                                 float* out) {
  const int64_t h = config_.hidden_size;
  const int64_t inter = tp_.shared_intermediate;
  float* gate_up = Scratch(gate_up_, num_tokens * 2 * inter);
  cpu::Linear(x, layer.shared_gate_up.data(), nullptr, gate_up, num_tokens, 2 * inter, h);
  float* act = Scratch(act_, num_tokens * inter);
  cpu::SiluAndMul(gate_up, act, num_tokens, inter);
  float* shared = Scratch(shared_out_, num_tokens * h);
  cpu::Linear(act, layer.shared_down.data(), nullptr, shared, num_tokens, h, inter);
  float* logit = Scratch(shared_logit_, num_tokens);
  cpu::Linear(x, layer.shared_gate.data(), nullptr, logit, num_tokens, 1, h);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float scale = 1.0f / (1.0f + std::exp(-logit[t]));
    for (int64_t j = 0; j < h; ++j) out[t * h + j] += scale * shared[t * h + j];
  }
}

absl::Status LlamaModel::Forward(const ForwardBatch& batch, KVCache& cache,
                                 std::vector<float>* logits, std::vector<float>* hidden_out,
                                 const float* input_hidden) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  VLLM_CHECK(batch.positions.size() == static_cast<size_t>(t) &&
             batch.slot_mapping.size() == static_cast<size_t>(t))
      << "batch arrays disagree on the token count";
  float* hidden = Scratch(hidden_, t * LayerInputWidth(0));
  float* residual = Scratch(residual_, t * h);
  if (shared_ != nullptr) {
    VLLM_CHECK(input_hidden != nullptr) << "an EAGLE head reads the target's hidden states";
    if (eagle3_) {
      Eagle3Input(batch, input_hidden, hidden, residual);
    } else {
      EagleInput(batch, input_hidden, residual);
      std::memcpy(hidden, residual, static_cast<size_t>(t * h) * sizeof(float));
    }
  } else {
    StageInput(batch, hidden, residual);
  }
  // EAGLE-3's target: the stream entering aux layer j goes to column block j of hidden_out.
  const bool aux = hidden_out != nullptr && !aux_layers_.empty();
  const auto capture = [&](int32_t boundary, const float* sub_layer_out) {
    const auto it = std::find(aux_layers_.begin(), aux_layers_.end(), boundary);
    if (it == aux_layers_.end()) return;
    const int64_t width = hidden_out_width();
    float* out = hidden_out->data() + (it - aux_layers_.begin()) * h;
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t j = 0; j < h; ++j) {
        out[r * width + j] = residual[r * h + j] + (sub_layer_out ? sub_layer_out[r * h + j] : 0);
      }
    }
  };
  if (aux) {
    hidden_out->resize(static_cast<size_t>(t * hidden_out_width()));
    capture(0, nullptr);
  }
  for (int32_t i = stage_.first_layer; i < stage_.end_layer; ++i) {
    const Layer& layer = layers_[i];
    if (i > 0) cpu::FusedAddRmsNorm(hidden, residual, layer.input_norm.data(), t, h, eps);
    VLLM_RETURN_IF_ERROR(Attention(layer, i, batch, cache, hidden));
    if (config_.gemma) {
      // Gemma: the sub-layer outputs are normed before they join the residual.
      cpu::RmsNorm(hidden, layer.post_norm.data(), hidden, t, h, eps);
      cpu::FusedAddRmsNorm(hidden, residual, layer.pre_ff_norm.data(), t, h, eps);
      VLLM_RETURN_IF_ERROR(Mlp(layer, t, hidden));
      cpu::RmsNorm(hidden, layer.post_ff_norm.data(), hidden, t, h, eps);
    } else {
      cpu::FusedAddRmsNorm(hidden, residual, layer.post_norm.data(), t, h, eps);
      VLLM_RETURN_IF_ERROR(Mlp(layer, t, hidden));
    }
    if (aux) capture(i + 1, hidden);
  }
  if (!stage_.is_last()) {
    StageOutput(batch, hidden, residual);
    return absl::OkStatus();
  }
  Finish(batch, hidden, residual, logits, aux ? nullptr : hidden_out);
  return absl::OkStatus();
}

void LlamaModel::StageInput(const ForwardBatch& batch, float* hidden, float* residual) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  bool at_layer_zero = true;
  if (stage_.is_first()) {
    cpu::Embedding(batch.token_ids.data(), t, embed_table().data(), 0, config_.vocab_size, h,
                   residual);
    if (config_.gemma) {
      // HF multiplies by sqrt(hidden) rounded to the weights' dtype (float32 here).
      cpu::Scale(residual, t * h, static_cast<float>(std::sqrt(static_cast<double>(h))));
    }
  } else {
    const IntermediateTensors* in = batch.intermediate_in;
    VLLM_CHECK(in != nullptr && in->num_tokens == t && in->hidden_size == h &&
               in->next_layer == stage_.first_layer)
        << "pipeline stage " << stage_.rank << " got another stage's tensors";
    std::memcpy(residual, in->residual.data(), static_cast<size_t>(t * h) * sizeof(float));
    at_layer_zero = in->next_layer == 0;
    if (!at_layer_zero) {
      std::memcpy(hidden, in->hidden.data(), static_cast<size_t>(t * h) * sizeof(float));
    }
  }
  // residual holds the stream; hidden the normalised input of the next sub-layer (layer 0
  // norms the embedding alone; later layers add the last sub-layer's output first).
  if (at_layer_zero && stage_.end_layer > 0) {
    cpu::RmsNorm(residual, layers_[0].input_norm.data(), hidden, t, h, eps);
  }
}

void LlamaModel::StageOutput(const ForwardBatch& batch, const float* hidden,
                             const float* residual) {
  IntermediateTensors* out = batch.intermediate_out;
  VLLM_CHECK(out != nullptr) << "pipeline stage " << stage_.rank << " has nowhere to send";
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  out->next_layer = stage_.end_layer;
  out->num_tokens = t;
  out->hidden_size = static_cast<int32_t>(h);
  out->residual.assign(residual, residual + t * h);
  if (stage_.end_layer == 0) {
    out->hidden.clear();  // still the embedding alone
  } else {
    out->hidden.assign(hidden, hidden + t * h);
  }
}

void LlamaModel::Finish(const ForwardBatch& batch, const float* hidden, const float* residual,
                        std::vector<float>* logits, std::vector<float>* hidden_out) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // Only the sampling rows go through the final norm and lm_head, unless every row's hidden
  // state is wanted. An EAGLE-3 head hands on its stream before the final norm.
  const bool prenorm_out = eagle3_ && !eagle3_options_.norm_output;
  const bool normed_out = hidden_out != nullptr && !final_norm_.empty() && !prenorm_out;
  const int64_t n = static_cast<int64_t>(batch.logits_indices.size());
  float* rows = Scratch(rows_, n * h);
  if (hidden_out != nullptr) {
    hidden_out->resize(static_cast<size_t>(t * h));
    float* all = hidden_out->data();
    for (int64_t i = 0; i < t * h; ++i) all[i] = hidden[i] + residual[i];
    if (normed_out) cpu::RmsNorm(all, final_norm_.data(), all, t, h, eps);
  }
  for (int64_t r = 0; r < n; ++r) {
    const int64_t src = batch.logits_indices[r];
    VLLM_CHECK(src >= 0 && src < t) << "logits index " << src << " outside the batch";
    if (hidden_out != nullptr) {
      std::memcpy(rows + r * h, hidden_out->data() + src * h,
                  static_cast<size_t>(h) * sizeof(float));
      continue;
    }
    for (int64_t j = 0; j < h; ++j) rows[r * h + j] = hidden[src * h + j] + residual[src * h + j];
  }
  if (!final_norm_.empty() && !normed_out) cpu::RmsNorm(rows, final_norm_.data(), rows, n, h, eps);
  logits->resize(static_cast<size_t>(n * logits_width_));
  cpu::LinearPacked(rows, lm_head(), nullptr, logits->data(), n);
  if (config_.final_logit_softcapping > 0) {
    cpu::SoftCap(logits->data(), n * logits_width_,
                 static_cast<float>(config_.final_logit_softcapping));
  }
}

}  // namespace vllm::worker
