#include "worker/cuda/cuda_llama_model.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_table.h"
#include "worker/cuda/dtype_dispatch.h"
#include "worker/cuda/model_kernels.h"
#include "xxhash.h"

namespace vllm::worker {
namespace {

namespace kc = ::vllm::kernels::cuda;
namespace cpu = ::vllm::kernels::cpu;

// Elements between consecutive experts' weights in one allocation: rounded up to 16 bytes for
// 2-byte types (32 for float), so every expert's matrix is as aligned as cuBLASLt wants.
int64_t ExpertStride(int64_t elems) { return (elems + 7) / 8 * 8; }

// Copies `bytes` of pageable host memory to `dst` on `stream` and waits for the copy, so the
// caller may free `src` and work later enqueued on `stream` (blocking or not) sees the data.
absl::Status UploadAndWait(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                           std::string_view what) {
  VLLM_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
                 absl::StrCat("upload of ", absl::string_view(what.data(), what.size()))));
  return CudaStatus(cudaStreamSynchronize(stream),
                    absl::StrCat("upload of ", absl::string_view(what.data(), what.size())));
}

}  // namespace

int32_t CudaLlamaModel::dtype_bytes() const {
  return options_.dtype == kc::GemmDType::kFloat32 ? 4 : 2;
}

CudaLlamaModel::CudaLlamaModel(const HfConfig& config, const TpLayout& tp,
                               kc::DeviceCommunicator* comm, const CudaModelOptions& options)
    : config_(config),
      comm_(comm),
      options_(options),
      tp_(tp),
      num_heads_(tp.num_heads),
      num_kv_heads_(tp.num_kv_heads),
      intermediate_(tp.intermediate) {}

CudaLlamaModel::~CudaLlamaModel() = default;

absl::StatusOr<std::unique_ptr<CudaLlamaModel>> CudaLlamaModel::Load(
    const HfConfig& config, WeightSource* weights, kc::DeviceCommunicator* comm,
    const CudaModelOptions& options, cudaStream_t stream) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError(
        "CudaLlamaModel needs a device communicator (SingleRankDeviceCommunicator for TP 1)");
  }
  if (weights == nullptr && !options.dummy_weights) {
    return absl::InvalidArgumentError("CudaLlamaModel: no weight source and no dummy weights");
  }
  if (options.max_num_tokens < 1 || options.max_num_logits < 1 || options.max_model_len < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaLlamaModel: max_num_tokens (%d) and max_num_logits (%d) must be positive",
        options.max_num_tokens, options.max_num_logits));
  }
  if (config.head_dim % 8 != 0 || config.head_dim > 256) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the CUDA backend needs head_dim a multiple of 8 and at most 256, the model has %d",
        config.head_dim));
  }
  if (config.num_experts > kc::kMoeMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the CUDA backend routes at most %d experts, the model has %d "
                        "(num_experts)",
                        kc::kMoeMaxExperts, config.num_experts));
  }
  VLLM_ASSIGN_OR_RETURN(TpLayout tp, MakeTpLayout(config, comm->rank(), comm->world_size()));
  CudaModelOptions o = options;
  if (o.max_model_len == 0) o.max_model_len = static_cast<int32_t>(config.max_position_embeddings);
  std::unique_ptr<CudaLlamaModel> model(new CudaLlamaModel(config, tp, comm, o));
  VLLM_ASSIGN_OR_RETURN(model->gemm_, kc::CublasLtGemm::Create());

  // The rotary table, computed by the CPU reference and uploaded once.
  VLLM_ASSIGN_OR_RETURN(
      cpu::RotaryEmbedding rope,
      cpu::RotaryEmbedding::Create(config.head_dim, config.rope_theta,
                                   config.max_position_embeddings, config.rope_scaling));
  const std::vector<float> table = kc::RopeCosSinTable(rope);
  VLLM_ASSIGN_OR_RETURN(model->cos_sin_,
                        DeviceBuffer::Allocate(table.size() * sizeof(float), "the rotary table"));
  // Every upload is ordered on `stream` (not the legacy default stream: a pageable cudaMemcpy
  // may return before its DMA lands, and a non-blocking `stream` would not wait for it) and
  // waited for before its pageable source is freed (an async copy from pageable memory is not
  // documented to have read its source on return).
  VLLM_RETURN_IF_ERROR(UploadAndWait(model->cos_sin_.get(), table.data(),
                                     table.size() * sizeof(float), stream, "the rotary table"));
  if (config.rope_local_theta) {
    VLLM_ASSIGN_OR_RETURN(cpu::RotaryEmbedding local,
                          cpu::RotaryEmbedding::Create(config.head_dim, *config.rope_local_theta,
                                                       config.max_position_embeddings, {}));
    const std::vector<float> local_table = kc::RopeCosSinTable(local);
    VLLM_ASSIGN_OR_RETURN(
        model->cos_sin_local_,
        DeviceBuffer::Allocate(local_table.size() * sizeof(float), "the local rotary table"));
    VLLM_RETURN_IF_ERROR(UploadAndWait(model->cos_sin_local_.get(), local_table.data(),
                                       local_table.size() * sizeof(float), stream,
                                       "the local rotary table"));
  }
  VLLM_RETURN_IF_ERROR(model->LoadWeights(weights, stream));
  VLLM_RETURN_IF_ERROR(model->AllocateScratch());
  VLLM_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "weight upload"));
  return model;
}

void CudaLlamaModel::ReleaseWeights() {
  layers_.clear();
  embed_tokens_ = lm_head_ = final_norm_ = nullptr;
  tensors_.clear();  // cudaFree of every weight
  weight_bytes_ = 0;
}

absl::Status CudaLlamaModel::ReloadWeights(WeightSource* weights, cudaStream_t stream) {
  ReleaseWeights();
  VLLM_RETURN_IF_ERROR(LoadWeights(weights, stream));
  return CudaStatus(cudaStreamSynchronize(stream), "weight upload");
}

absl::StatusOr<void*> CudaLlamaModel::NewTensor(int64_t elems, const char* what) {
  VLLM_ASSIGN_OR_RETURN(DeviceBuffer b,
                        DeviceBuffer::Allocate(static_cast<size_t>(elems) * dtype_bytes(), what));
  weight_bytes_ += static_cast<int64_t>(b.bytes());
  tensors_.push_back(std::move(b));
  return tensors_.back().get();
}

absl::Status CudaLlamaModel::PutWeight(WeightSource* weights, cudaStream_t stream,
                                       const std::string& name, std::vector<int64_t> shape,
                                       const Shard& shard, void* dst, int64_t offset) {
  const kc::GemmDType dtype = options_.dtype;
  const int64_t es = dtype_bytes();
  const int64_t full_rows = shape[0];
  const int64_t full_cols = shape.size() > 1 ? shape[1] : 1;
  int64_t rows = full_rows, cols = full_cols, row_off = 0, col_off = 0;
  if (shard.dim == 0) {
    // A range of a fused tensor (Shard::range_size >= 0) is split instead of the whole.
    const bool ranged = shard.range_size >= 0;
    rows = (ranged ? shard.range_size : full_rows) / shard.world_size;
    row_off = (ranged ? shard.range_begin : 0) + rows * shard.rank;
  } else if (shard.dim == 1) {
    cols = full_cols / shard.world_size;
    col_off = cols * shard.rank;
  }
  if (options_.dummy_weights) {
    return CudaStatus(
        WithDType(dtype,
                  [&](auto tag) {
                    using T = decltype(tag);
                    T* out = static_cast<T*>(dst) + offset;
                    if (absl::EndsWith(name, "norm.weight")) {
                      // Gemma's norms multiply by 1 + w.
                      return FillConstant<T>(out, rows * cols, config_.gemma ? 0.0f : 1.0f, stream);
                    }
                    const uint64_t seed = XXH64(name.data(), name.size(), options_.seed);
                    return FillUniformDummy<T>(out, rows, cols, full_cols, row_off, col_off, seed,
                                               options_.dummy_scale, stream);
                  }),
        absl::StrCat("dummy init of ", name));
  }
  VLLM_ASSIGN_OR_RETURN(std::vector<float> host, weights->Load(name, shape, shard));
  if (static_cast<int64_t>(host.size()) != rows * cols) {
    return absl::InternalError(absl::StrCat(name, ": the weight source returned ", host.size(),
                                            " elements, expected ", rows * cols));
  }
  return WithDType(dtype, [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    T* out = static_cast<T*>(dst) + offset;
    if constexpr (std::is_same_v<T, float>) {
      return UploadAndWait(out, host.data(), host.size() * es, stream, name);
    } else {
      std::vector<T> converted(host.size());
      for (size_t i = 0; i < host.size(); ++i) converted[i] = HostFromFloat<T>(host[i]);
      return UploadAndWait(out, converted.data(), converted.size() * es, stream, name);
    }
  });
}

absl::Status CudaLlamaModel::LoadWeights(WeightSource* weights, cudaStream_t stream) {
  const int64_t hidden = config_.hidden_size;
  const int64_t d = config_.head_dim;
  const int64_t vocab = config_.vocab_size;
  const int32_t rank = comm_->rank();
  const int32_t ws = comm_->world_size();
  const Shard row{1, rank, ws};
  auto put = [&](const std::string& name, std::vector<int64_t> shape, const Shard& shard, void* dst,
                 int64_t offset) -> absl::Status {
    return PutWeight(weights, stream, name, std::move(shape), shard, dst, offset);
  };
  auto has = [&](const std::string& name) { return options_.dummy_weights || weights->Has(name); };

  VLLM_ASSIGN_OR_RETURN(embed_tokens_, NewTensor(vocab * hidden, "embed_tokens"));
  VLLM_RETURN_IF_ERROR(put("model.embed_tokens.weight", {vocab, hidden}, {}, embed_tokens_, 0));
  VLLM_ASSIGN_OR_RETURN(final_norm_, NewTensor(hidden, "model.norm"));
  VLLM_RETURN_IF_ERROR(put("model.norm.weight", {hidden}, {}, final_norm_, 0));
  if (config_.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    VLLM_ASSIGN_OR_RETURN(lm_head_, NewTensor(vocab * hidden, "lm_head"));
    VLLM_RETURN_IF_ERROR(put("lm_head.weight", {vocab, hidden}, {}, lm_head_, 0));
  }
  const int64_t q_rows = int64_t{config_.num_attention_heads} * d;
  const int64_t q_local = int64_t{num_heads_} * d;
  const int64_t qkv_local = q_local + 2 * int64_t{num_kv_heads_} * d;
  const int64_t inter = config_.intermediate_size;
  const int64_t inter_local = intermediate_;
  layers_.resize(config_.num_hidden_layers);
  for (int32_t i = 0; i < config_.num_hidden_layers; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    VLLM_ASSIGN_OR_RETURN(l.input_norm, NewTensor(hidden, "input_layernorm"));
    VLLM_RETURN_IF_ERROR(put(p + "input_layernorm.weight", {hidden}, {}, l.input_norm, 0));
    VLLM_ASSIGN_OR_RETURN(l.post_norm, NewTensor(hidden, "post_attention_layernorm"));
    VLLM_RETURN_IF_ERROR(put(p + "post_attention_layernorm.weight", {hidden}, {}, l.post_norm, 0));
    if (config_.gemma) {
      VLLM_ASSIGN_OR_RETURN(l.pre_ff_norm, NewTensor(hidden, "pre_feedforward_layernorm"));
      VLLM_RETURN_IF_ERROR(
          put(p + "pre_feedforward_layernorm.weight", {hidden}, {}, l.pre_ff_norm, 0));
      VLLM_ASSIGN_OR_RETURN(l.post_ff_norm, NewTensor(hidden, "post_feedforward_layernorm"));
      VLLM_RETURN_IF_ERROR(
          put(p + "post_feedforward_layernorm.weight", {hidden}, {}, l.post_ff_norm, 0));
    }
    VLLM_ASSIGN_OR_RETURN(l.qkv, NewTensor(qkv_local * hidden, "qkv_proj"));
    if (config_.attention_bias) {
      VLLM_ASSIGN_OR_RETURN(l.qkv_bias, NewTensor(qkv_local, "qkv_proj bias"));
    }
    int64_t offset = 0;  // rows before this piece in the merged weight
    for (const WeightPiece& piece : QkvPieces(config_, tp_, i, /*bias=*/false)) {
      VLLM_RETURN_IF_ERROR(put(piece.name, piece.shape, piece.shard, l.qkv, offset * hidden));
      offset += piece.rows;
    }
    if (config_.attention_bias) {
      offset = 0;
      for (const WeightPiece& piece : QkvPieces(config_, tp_, i, /*bias=*/true)) {
        VLLM_RETURN_IF_ERROR(put(piece.name, piece.shape, piece.shard, l.qkv_bias, offset));
        offset += piece.rows;
      }
    }
    if (config_.qk_norm) {
      VLLM_ASSIGN_OR_RETURN(l.q_norm, NewTensor(d, "q_norm"));
      VLLM_RETURN_IF_ERROR(put(p + "self_attn.q_norm.weight", {d}, {}, l.q_norm, 0));
      VLLM_ASSIGN_OR_RETURN(l.k_norm, NewTensor(d, "k_norm"));
      VLLM_RETURN_IF_ERROR(put(p + "self_attn.k_norm.weight", {d}, {}, l.k_norm, 0));
    }
    VLLM_ASSIGN_OR_RETURN(l.o_proj, NewTensor(hidden * q_local, "o_proj"));
    VLLM_RETURN_IF_ERROR(put(p + "self_attn.o_proj.weight", {hidden, q_rows}, row, l.o_proj, 0));
    if (config_.MayHaveOProjBias() && has(p + "self_attn.o_proj.bias")) {
      VLLM_ASSIGN_OR_RETURN(l.o_bias, NewTensor(hidden, "o_proj bias"));
      VLLM_RETURN_IF_ERROR(put(p + "self_attn.o_proj.bias", {hidden}, {}, l.o_bias, 0));
    }
    if (config_.IsMoeLayer(i)) {
      VLLM_RETURN_IF_ERROR(LoadExperts(i, l, put));
      continue;
    }
    VLLM_ASSIGN_OR_RETURN(l.gate_up, NewTensor(2 * inter_local * hidden, "gate_up_proj"));
    offset = 0;
    for (const WeightPiece& piece : GateUpPieces(config_, tp_, i)) {
      VLLM_RETURN_IF_ERROR(put(piece.name, piece.shape, piece.shard, l.gate_up, offset * hidden));
      offset += piece.rows;
    }
    VLLM_ASSIGN_OR_RETURN(l.down, NewTensor(hidden * inter_local, "down_proj"));
    VLLM_RETURN_IF_ERROR(put(p + "mlp.down_proj.weight", {hidden, inter}, row, l.down, 0));
  }
  return absl::OkStatus();
}

template <typename Put>
absl::Status CudaLlamaModel::LoadExperts(int32_t i, Layer& l, Put& put) {
  const int64_t hidden = config_.hidden_size;
  const int64_t experts = config_.num_experts;
  const WeightPiece router = RouterPiece(config_, i);
  VLLM_ASSIGN_OR_RETURN(l.router, NewTensor(experts * hidden, "MoE router"));
  VLLM_RETURN_IF_ERROR(put(router.name, router.shape, router.shard, l.router, 0));
  const int64_t gate_up_stride = ExpertStride(2 * int64_t{tp_.moe_intermediate} * hidden);
  const int64_t down_stride = ExpertStride(hidden * tp_.moe_intermediate);
  VLLM_ASSIGN_OR_RETURN(void* gate_up, NewTensor(experts * gate_up_stride, "experts' gate_up"));
  VLLM_ASSIGN_OR_RETURN(void* down, NewTensor(experts * down_stride, "experts' down_proj"));
  const int64_t es = dtype_bytes();
  for (int32_t e = 0; e < config_.num_experts; ++e) {
    void* gu = static_cast<char*>(gate_up) + e * gate_up_stride * es;
    void* dn = static_cast<char*>(down) + e * down_stride * es;
    l.experts_gate_up.push_back(gu);
    l.experts_down.push_back(dn);
    const std::vector<WeightPiece> pieces = ExpertPieces(config_, tp_, i, e);
    // gate rows, then up rows, then down_proj.
    VLLM_RETURN_IF_ERROR(put(pieces[0].name, pieces[0].shape, pieces[0].shard, gu, 0));
    VLLM_RETURN_IF_ERROR(
        put(pieces[1].name, pieces[1].shape, pieces[1].shard, gu, pieces[0].rows * hidden));
    VLLM_RETURN_IF_ERROR(put(pieces[2].name, pieces[2].shape, pieces[2].shard, dn, 0));
  }
  if (config_.shared_expert_intermediate_size == 0) return absl::OkStatus();
  const int64_t shared = tp_.shared_intermediate;
  VLLM_ASSIGN_OR_RETURN(l.shared_gate_up, NewTensor(2 * shared * hidden, "shared expert gate_up"));
  VLLM_ASSIGN_OR_RETURN(l.shared_down, NewTensor(hidden * shared, "shared expert down_proj"));
  VLLM_ASSIGN_OR_RETURN(l.shared_gate, NewTensor(hidden, "shared_expert_gate"));
  const std::vector<WeightPiece> pieces = SharedExpertPieces(config_, tp_, i);
  VLLM_RETURN_IF_ERROR(put(pieces[0].name, pieces[0].shape, pieces[0].shard, l.shared_gate_up, 0));
  VLLM_RETURN_IF_ERROR(put(pieces[1].name, pieces[1].shape, pieces[1].shard, l.shared_gate_up,
                           pieces[0].rows * hidden));
  VLLM_RETURN_IF_ERROR(put(pieces[2].name, pieces[2].shape, pieces[2].shard, l.shared_down, 0));
  return put(pieces[3].name, pieces[3].shape, pieces[3].shard, l.shared_gate, 0);
}

absl::Status CudaLlamaModel::AllocateScratch() {
  const int64_t t = options_.max_num_tokens;
  const int64_t n = options_.max_num_logits;
  const int64_t h = config_.hidden_size;
  const int64_t d = config_.head_dim;
  const int64_t q_w = num_heads_ * d;
  const int64_t kv_w = num_kv_heads_ * d;
  const int64_t qkv_w = q_w + 2 * kv_w;
  const size_t es = static_cast<size_t>(dtype_bytes());
  auto alloc = [&](DeviceBuffer* b, int64_t elems, const char* what) -> absl::Status {
    VLLM_ASSIGN_OR_RETURN(*b, DeviceBuffer::Allocate(static_cast<size_t>(elems) * es, what));
    activation_bytes_ += static_cast<int64_t>(b->bytes());
    return absl::OkStatus();
  };
  VLLM_RETURN_IF_ERROR(alloc(&hidden_, t * h, "hidden states"));
  VLLM_RETURN_IF_ERROR(alloc(&residual_, t * h, "the residual"));
  const int64_t inter = std::max({intermediate_, tp_.moe_intermediate, tp_.shared_intermediate});
  VLLM_RETURN_IF_ERROR(alloc(&big_, t * std::max(qkv_w, 2 * inter), "qkv"));
  VLLM_RETURN_IF_ERROR(alloc(&mid_, t * std::max(q_w, inter), "attention out"));
  if (config_.num_experts > 0) {
    const int64_t experts = config_.num_experts;
    VLLM_RETURN_IF_ERROR(alloc(&router_logits_, t * experts, "router logits"));
    VLLM_RETURN_IF_ERROR(alloc(&moe_y_, t * h, "an expert's output"));
    // Float buffers: twice the elements of a 2-byte type, as many of float.
    const int64_t per_float = 4 / static_cast<int64_t>(es);
    VLLM_RETURN_IF_ERROR(alloc(&moe_weights_, t * experts * per_float, "routing weights"));
    VLLM_RETURN_IF_ERROR(alloc(&moe_acc_, t * h * per_float, "the experts' sum"));
  }
  VLLM_RETURN_IF_ERROR(alloc(&k_, t * kv_w, "packed k"));
  VLLM_RETURN_IF_ERROR(alloc(&v_, t * kv_w, "packed v"));
  VLLM_RETURN_IF_ERROR(alloc(&rows_, n * h, "logits rows"));
  VLLM_RETURN_IF_ERROR(alloc(&rows_res_, n * h, "logits rows"));
  VLLM_RETURN_IF_ERROR(alloc(&logits_, n * config_.vocab_size, "logits"));
  // One workspace at the kernel's documented bound serves every step shape.
  const size_t ws = kc::PagedAttentionMaxWorkspaceBytes(config_.head_dim);
  VLLM_ASSIGN_OR_RETURN(attn_workspace_, DeviceBuffer::Allocate(ws, "the attention workspace"));
  activation_bytes_ += static_cast<int64_t>(attn_workspace_.bytes());
  return absl::OkStatus();
}

absl::StatusOr<CudaKVCache> CudaLlamaModel::AllocateKVCache(int32_t num_blocks,
                                                            int32_t block_size) const {
  if (num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError("the KV cache needs positive num_blocks and block_size");
  }
  CudaKVCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  const size_t per_layer = static_cast<size_t>(num_blocks) * block_size * num_kv_heads_ *
                           config_.head_dim * dtype_bytes();
  const size_t layers = static_cast<size_t>(config_.num_hidden_layers);
  VLLM_ASSIGN_OR_RETURN(cache.storage,
                        DeviceBuffer::Allocate(2 * layers * per_layer, "the KV cache"));
  char* base = cache.storage.as<char>();
  for (size_t l = 0; l < layers; ++l) {
    cache.k.push_back(base + (2 * l) * per_layer);
    cache.v.push_back(base + (2 * l + 1) * per_layer);
  }
  return cache;
}

absl::Status CudaLlamaModel::Forward(const CudaForwardInputs& in, CudaKVCache* cache,
                                     cudaStream_t stream) {
  if (in.num_tokens < 1 || in.num_tokens > options_.max_num_tokens ||
      in.attention.num_tokens != in.num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaLlamaModel::Forward: %d tokens (attention: %d), the limit is %d",
                        in.num_tokens, in.attention.num_tokens, options_.max_num_tokens));
  }
  if (in.num_logits < 0 || in.num_logits > options_.max_num_logits) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaLlamaModel::Forward: %d logits rows, the limit is %d", in.num_logits,
                        options_.max_num_logits));
  }
  if (cache == nullptr || cache->k.size() != layers_.size() ||
      cache->block_size != in.attention.block_size) {
    return absl::InvalidArgumentError("CudaLlamaModel::Forward: no KV cache of this model");
  }
  const size_t ws = kc::PagedAttentionWorkspaceBytes(in.attention, num_heads_, config_.head_dim);
  if (ws > attn_workspace_.bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CudaLlamaModel::Forward: attention needs %d bytes of workspace, above the kernel's "
        "documented bound of %d",
        ws, attn_workspace_.bytes()));
  }
  return WithDType(options_.dtype, [&](auto tag) -> absl::Status {
    return ForwardT<decltype(tag)>(in, cache, stream);
  });
}

template <typename T>
absl::Status CudaLlamaModel::MoeT(const Layer& l, int64_t t, cudaStream_t stream) {
  const kc::GemmDType dt = options_.dtype;
  const int64_t h = config_.hidden_size;
  const int32_t experts = config_.num_experts;
  const int64_t inter = tp_.moe_intermediate;
  T* hidden = hidden_.as<T>();
  T* big = big_.as<T>();
  T* mid = mid_.as<T>();
  T* y = moe_y_.as<T>();
  T* logits = router_logits_.as<T>();
  float* weights = moe_weights_.as<float>();
  float* acc = moe_acc_.as<float>();
  VLLM_RETURN_IF_ERROR(gemm_->Linear(dt, hidden, l.router, nullptr, logits, t, experts, h, stream));
  VLLM_RETURN_IF_ERROR(
      CudaStatus(kc::MoeTopKSoftmax<T>(logits, t, experts, config_.num_experts_per_tok,
                                       config_.norm_topk_prob, weights, stream),
                 "MoE router"));
  VLLM_RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(acc, 0, static_cast<size_t>(t * h) * sizeof(float), stream), "MoE sum"));
  // Every expert over every token (no host-side grouping: graphs stay capturable); only the
  // rows that chose it are added, in ascending expert order as transformers adds them.
  for (int32_t e = 0; e < experts; ++e) {
    VLLM_RETURN_IF_ERROR(
        gemm_->Linear(dt, hidden, l.experts_gate_up[e], nullptr, big, t, 2 * inter, h, stream));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::SiluAndMul<T>(big, mid, t, inter, stream), "expert silu_and_mul"));
    VLLM_RETURN_IF_ERROR(
        gemm_->Linear(dt, mid, l.experts_down[e], nullptr, y, t, h, inter, stream));
    VLLM_RETURN_IF_ERROR(CudaStatus(kc::MoeAccumulate<T>(y, weights, experts, e, t, h, acc, stream),
                                    "MoE accumulate"));
  }
  if (l.shared_gate != nullptr) {
    // Qwen2-MoE: + sigmoid(shared_expert_gate · x) · shared_expert(x), after the routed
    // experts as transformers adds it; the routing weights' buffer holds the gate.
    const int64_t shared = tp_.shared_intermediate;
    VLLM_RETURN_IF_ERROR(
        gemm_->Linear(dt, hidden, l.shared_gate_up, nullptr, big, t, 2 * shared, h, stream));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::SiluAndMul<T>(big, mid, t, shared, stream), "shared expert silu_and_mul"));
    VLLM_RETURN_IF_ERROR(gemm_->Linear(dt, mid, l.shared_down, nullptr, y, t, h, shared, stream));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::MoeSharedExpertGate<T>(hidden, static_cast<const T*>(l.shared_gate), t, h,
                                              weights, stream),
                   "shared expert gate"));
    VLLM_RETURN_IF_ERROR(CudaStatus(kc::MoeAccumulate<T>(y, weights, 1, 0, t, h, acc, stream),
                                    "shared expert accumulate"));
  }
  VLLM_RETURN_IF_ERROR(CudaStatus(kc::MoeFinalize<T>(acc, t * h, hidden, stream), "MoE sum"));
  return comm_->AllReduceSum(hidden, static_cast<size_t>(t * h), dt, stream);
}

template <typename T>
absl::Status CudaLlamaModel::GemmaFeedForwardT(const Layer& l, int64_t t, cudaStream_t stream) {
  const kc::GemmDType dt = options_.dtype;
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  constexpr kc::NormWeight kGemma = kc::NormWeight::kGemma;
  T* hidden = hidden_.as<T>();
  T* residual = residual_.as<T>();
  T* big = big_.as<T>();
  T* mid = mid_.as<T>();
  // The attention output is normed before it joins the residual.
  VLLM_RETURN_IF_ERROR(CudaStatus(
      kc::RmsNorm<T>(hidden, static_cast<T*>(l.post_norm), hidden, t, h, eps, stream, kGemma),
      "post-attention norm"));
  VLLM_RETURN_IF_ERROR(
      CudaStatus(kc::FusedAddRmsNorm<T>(hidden, residual, static_cast<T*>(l.pre_ff_norm), t, h, eps,
                                        stream, kGemma),
                 "pre-feedforward norm"));
  VLLM_RETURN_IF_ERROR(
      gemm_->Linear(dt, hidden, l.gate_up, nullptr, big, t, 2 * int64_t{intermediate_}, h, stream));
  VLLM_RETURN_IF_ERROR(
      CudaStatus(kc::GeluTanhAndMul<T>(big, mid, t, intermediate_, stream), "gelu_tanh_and_mul"));
  VLLM_RETURN_IF_ERROR(
      gemm_->Linear(dt, mid, l.down, nullptr, hidden, t, h, intermediate_, stream));
  VLLM_RETURN_IF_ERROR(comm_->AllReduceSum(hidden, static_cast<size_t>(t * h), dt, stream));
  // So is the MLP's; the next layer's input norm (or the final norm) adds it.
  return CudaStatus(
      kc::RmsNorm<T>(hidden, static_cast<T*>(l.post_ff_norm), hidden, t, h, eps, stream, kGemma),
      "post-feedforward norm");
}

template <typename T>
absl::Status CudaLlamaModel::ForwardT(const CudaForwardInputs& in, CudaKVCache* cache,
                                      cudaStream_t stream) {
  const kc::GemmDType dt = options_.dtype;
  const int64_t t = in.num_tokens;
  const int64_t h = config_.hidden_size;
  const int32_t d = config_.head_dim;
  const int64_t q_w = int64_t{num_heads_} * d;
  const int64_t kv_w = int64_t{num_kv_heads_} * d;
  const int64_t qkv_w = q_w + 2 * kv_w;
  const size_t es = sizeof(T);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const float scale = config_.AttentionScale();
  const kc::NormWeight norm = config_.gemma ? kc::NormWeight::kGemma : kc::NormWeight::kLlama;
  T* hidden = hidden_.as<T>();
  T* residual = residual_.as<T>();
  T* big = big_.as<T>();
  T* mid = mid_.as<T>();
  T* k = k_.as<T>();
  T* v = v_.as<T>();
  const float* cos_sin = cos_sin_.as<float>();

  VLLM_RETURN_IF_ERROR(CudaStatus(kc::Embedding<T>(in.token_ids, t, static_cast<T*>(embed_tokens_),
                                                   0, config_.vocab_size, h, residual, stream),
                                  "embedding"));
  if (config_.gemma) {
    // HF multiplies by sqrt(hidden) rounded to the model dtype.
    const float normalizer =
        HostToFloat(HostFromFloat<T>(static_cast<float>(std::sqrt(static_cast<double>(h)))));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::Scale<T>(residual, t * h, normalizer, stream), "embedding scale"));
  }
  // residual holds the stream; hidden the normalised input of the next sub-layer.
  VLLM_RETURN_IF_ERROR(CudaStatus(kc::RmsNorm<T>(residual, static_cast<T*>(layers_[0].input_norm),
                                                 hidden, t, h, eps, stream, norm),
                                  "input norm"));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (i > 0) {
      VLLM_RETURN_IF_ERROR(
          CudaStatus(kc::FusedAddRmsNorm<T>(hidden, residual, static_cast<T*>(l.input_norm), t, h,
                                            eps, stream, norm),
                     "input norm"));
    }
    VLLM_RETURN_IF_ERROR(gemm_->Linear(dt, hidden, l.qkv, l.qkv_bias, big, t, qkv_w, h, stream));
    if (l.q_norm != nullptr) {
      // Qwen3: each head of q and of k normalised on its own, in place, before RoPE.
      VLLM_RETURN_IF_ERROR(
          CudaStatus(kc::HeadRmsNorm<T>(big, t, qkv_w, num_heads_, d, static_cast<T*>(l.q_norm),
                                        eps, stream, norm),
                     "q norm"));
      VLLM_RETURN_IF_ERROR(
          CudaStatus(kc::HeadRmsNorm<T>(big + q_w, t, qkv_w, num_kv_heads_, d,
                                        static_cast<T*>(l.k_norm), eps, stream, norm),
                     "k norm"));
    }
    VLLM_RETURN_IF_ERROR(CudaStatus(
        kc::RotaryEmbedding<T>(
            in.positions, t, big, qkv_w, num_heads_, big + q_w, qkv_w, num_kv_heads_, d,
            config_.UsesLocalRope(static_cast<int32_t>(i)) ? cos_sin_local_.as<float>() : cos_sin,
            config_.max_position_embeddings, stream),
        "rotary embedding"));
    // k and v packed for the cache write (reshape_and_cache takes packed rows).
    VLLM_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy2DAsync(k, kv_w * es, big + q_w, qkv_w * es, kv_w * es, t,
                                     cudaMemcpyDeviceToDevice, stream),
                   "k copy"));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpy2DAsync(v, kv_w * es, big + q_w + kv_w, qkv_w * es, kv_w * es, t,
                                     cudaMemcpyDeviceToDevice, stream),
                   "v copy"));
    T* k_cache = static_cast<T*>(cache->k[i]);
    T* v_cache = static_cast<T*>(cache->v[i]);
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::ReshapeAndCache<T>(k, v, k_cache, v_cache, in.slot_mapping, t, num_kv_heads_,
                                          d, cache->block_size, stream),
                   "KV-cache write"));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::PagedAttention<T>(big, qkv_w, k_cache, v_cache, mid, in.attention,
                                         num_heads_, num_kv_heads_, d, scale, attn_workspace_.get(),
                                         attn_workspace_.bytes(), stream,
                                         config_.WindowOfLayer(static_cast<int32_t>(i)),
                                         static_cast<float>(config_.attn_logit_softcapping)),
                   "paged attention"));
    const void* o_bias = comm_->rank() == 0 ? l.o_bias : nullptr;
    VLLM_RETURN_IF_ERROR(gemm_->Linear(dt, mid, l.o_proj, o_bias, hidden, t, h, q_w, stream));
    VLLM_RETURN_IF_ERROR(comm_->AllReduceSum(hidden, static_cast<size_t>(t * h), dt, stream));
    if (config_.gemma) {
      VLLM_RETURN_IF_ERROR(GemmaFeedForwardT<T>(l, t, stream));
      continue;
    }
    VLLM_RETURN_IF_ERROR(CudaStatus(
        kc::FusedAddRmsNorm<T>(hidden, residual, static_cast<T*>(l.post_norm), t, h, eps, stream),
        "post-attention norm"));
    if (l.router != nullptr) {
      VLLM_RETURN_IF_ERROR(MoeT<T>(l, t, stream));
      continue;
    }
    VLLM_RETURN_IF_ERROR(gemm_->Linear(dt, hidden, l.gate_up, nullptr, big, t,
                                       2 * int64_t{intermediate_}, h, stream));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::SiluAndMul<T>(big, mid, t, intermediate_, stream), "silu_and_mul"));
    VLLM_RETURN_IF_ERROR(
        gemm_->Linear(dt, mid, l.down, nullptr, hidden, t, h, intermediate_, stream));
    VLLM_RETURN_IF_ERROR(comm_->AllReduceSum(hidden, static_cast<size_t>(t * h), dt, stream));
  }
  // Only the logits rows go through the final norm and lm_head.
  return LogitsT<T>(in.logits_indices, in.num_logits, stream);
}

absl::Status CudaLlamaModel::ComputeLogits(const int32_t* rows, int32_t num_rows,
                                           cudaStream_t stream) {
  if (num_rows < 1 || num_rows > options_.max_num_logits) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CudaLlamaModel::ComputeLogits: %d rows, the limit is %d", num_rows,
                        options_.max_num_logits));
  }
  return WithDType(options_.dtype, [&](auto tag) -> absl::Status {
    return LogitsT<decltype(tag)>(rows, num_rows, stream);
  });
}

template <typename T>
absl::Status CudaLlamaModel::LogitsT(const int32_t* indices, int64_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  const kc::GemmDType dt = options_.dtype;
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const kc::NormWeight norm = config_.gemma ? kc::NormWeight::kGemma : kc::NormWeight::kLlama;
  // hidden_ and residual_ are only read: the norm runs on gathered copies, so the last
  // layer's states stay for ComputeLogits.
  T* rows = rows_.as<T>();
  T* rows_res = rows_res_.as<T>();
  VLLM_RETURN_IF_ERROR(
      CudaStatus(GatherRows<T>(hidden_.as<T>(), indices, n, h, rows, stream), "row gather"));
  VLLM_RETURN_IF_ERROR(
      CudaStatus(GatherRows<T>(residual_.as<T>(), indices, n, h, rows_res, stream), "row gather"));
  VLLM_RETURN_IF_ERROR(CudaStatus(
      kc::FusedAddRmsNorm<T>(rows, rows_res, static_cast<T*>(final_norm_), n, h, eps, stream, norm),
      "final norm"));
  VLLM_RETURN_IF_ERROR(
      gemm_->Linear(dt, rows, lm_head_, nullptr, logits_.get(), n, config_.vocab_size, h, stream));
  if (config_.final_logit_softcapping > 0) {
    VLLM_RETURN_IF_ERROR(
        CudaStatus(kc::SoftCap<T>(static_cast<T*>(logits_.get()), n * config_.vocab_size,
                                  static_cast<float>(config_.final_logit_softcapping), stream),
                   "final logit soft cap"));
  }
  return absl::OkStatus();
}

}  // namespace vllm::worker
