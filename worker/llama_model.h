// LlamaModel: the Llama family (Llama 2/3, Mistral, Qwen2, Qwen3, Phi-3) on the CPU backend,
// one tensor-parallel rank of it (vLLM's vllm/model_executor/models/llama.py, qwen3.py,
// phi3.py).
//
// Per layer: RMSNorm → QKV projection (one merged GEMM, q/k/v biases for Qwen2) → per-head
// q/k RMSNorm (Qwen3) → RoPE →
// KV-cache write → paged attention → o_proj (row-parallel, all-reduce) → fused
// residual-add RMSNorm → gate_up projection (merged) → SiLU-and-mul → down_proj
// (row-parallel, all-reduce); in an MoE layer (Qwen3-MoE, Mixtral) the router's softmax
// top-k picks experts instead and their weighted outputs are summed (kernels/cpu/moe.h,
// one all-reduce). The final norm and lm_head run only on the rows that sample.
//
// Gemma-2 / Gemma-3 (vLLM's gemma2.py, gemma3.py; HfConfig::gemma): embeddings times
// sqrt(hidden); (1 + w) norms, the attention and MLP outputs normed again
// (post_attention_layernorm, post_feedforward_layernorm) before they join the residual;
// attention scaled by query_pre_attn_scalar^-0.5 with Gemma-2's score soft cap, per-layer
// sliding windows, Gemma-3's (1 + w) q/k norms and local-layer RoPE base; GeGLU; the
// logits soft-capped.
//
// Tensor parallelism: attention heads, KV heads and MLP columns are split evenly over the
// ranks at load time (q/k/v and gate/up column-parallel: dim 0; o_proj and down_proj
// row-parallel: dim 1), as worker/tp_layout.h says: with more ranks than KV heads each rank
// holds one KV head, replicated. Phi-3's fused qkv_proj / gate_up_proj are cut into the
// same per-rank pieces. Embeddings and lm_head are replicated on every rank (vLLM shards
// the vocabulary; a CPU rank has the memory, and it saves a gather per step).
//
// Thread-safety: none; one worker thread owns a model and its scratch buffers.
#ifndef VLLM_WORKER_LLAMA_MODEL_H_
#define VLLM_WORKER_LLAMA_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed_linear.h"
#include "worker/hf_config.h"
#include "worker/intermediate_tensors.h"
#include "worker/pp_layout.h"
#include "worker/tp_layout.h"
#include "worker/weights.h"

namespace vllm::worker {

// Anonymous memory mapped for the KV cache (munmap on destruction).
struct CachePagesDeleter {
  size_t bytes = 0;
  void operator()(float* p) const;
};
using CachePages = std::unique_ptr<float[], CachePagesDeleter>;

// The paged KV cache of one rank: per layer a K and a V buffer of num_blocks · block_size ·
// num_kv_heads (this rank) · head_dim floats, in kernels/cpu/ops.h's layout (K
// [block][head][dim][slot], V [block][head][slot][dim]). Mapped with transparent huge pages
// asked for (MADV_HUGEPAGE) and every page touched at allocation, on the kernel pool: the
// first write of each block while serving used to fault its pages in (4 KiB at a time, the
// engine's only page faults). The contents start as zeros; attention reads only slots of
// positions below seq_len, which ReshapeAndCache wrote first.
struct KVCache {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  std::vector<CachePages> k;
  std::vector<CachePages> v;
};

// One step's flattened batch, prepared by the ModelRunner.
struct ForwardBatch {
  std::span<const int32_t> token_ids;     // [num_tokens]
  std::span<const int32_t> positions;     // [num_tokens]
  std::span<const int64_t> slot_mapping;  // [num_tokens]
  kernels::cpu::AttentionMetadata attention;
  // Rows whose logits are wanted (one per sampling request), ascending.
  std::span<const int32_t> logits_indices;
  // Pipeline parallelism: a stage after the first starts from the previous stage's stream
  // (`intermediate_in`, required); a stage before the last stops after its layers and leaves
  // the stream in `intermediate_out` (required) instead of computing logits.
  const IntermediateTensors* intermediate_in = nullptr;
  IntermediateTensors* intermediate_out = nullptr;
};

// An EAGLE-3 head's settings (vLLM's Eagle3LlamaForCausalLM, llama_eagle3.py), read from its
// config.json (worker/drafter.cc).
struct Eagle3Options {
  // lm_head's rows; d2t maps draft id i to target id i + d2t[i] (vLLM's draft_id_to_target_id;
  // all zeros when the checkpoint has no d2t). Equal to vocab_size: no mapping.
  int32_t draft_vocab_size = 0;
  // Target states fc reads (fc.weight is [hidden, n × hidden]); 0: use_aux_hidden_state false,
  // the head reads the target's last hidden state as EAGLE-1 does, without fc.
  int32_t num_aux_hidden_states = 3;
  bool norm_before_fc = false;        // input_norm over fc's whole input
  bool fc_norm = false;               // fc_norm.i over each state before fc
  bool norm_before_residual = false;  // the residual is hidden_norm(h) instead of h
  bool norm_output = false;           // the next pass reads the normed output, not the stream
};

class LlamaModel {
 public:
  // Loads this rank's shard of every weight from `weights`. `comm` (not owned, outlives the
  // model) is the tensor-parallel group; its world size must split the model as MakeTpLayout
  // (worker/tp_layout.h) allows (InvalidArgument naming the config key otherwise). Weight
  // errors name the tensor. With `stage` (pipeline parallelism), only that stage's layers, the
  // embedding on the first stage and the final norm and lm_head on the last (the embedding too
  // when tied) are loaded, and the KV cache covers only its layers.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(
      const HfConfig& config, WeightSource& weights, kernels::Communicator* comm,
      const PpStage* stage = nullptr);

  // The EAGLE-1 draft head of `target` (vLLM's EagleLlamaForCausalLM, llama_eagle.py): `config`
  // is the head's (a Llama config, usually one layer) and `weights` its checkpoint, tensor
  // names with or without the "model." prefix: fc.weight [hidden, 2 × hidden] (fc.bias
  // optional) and layers.N.* as a Llama decoder layer's, layer 0 without input_layernorm; no
  // final norm. embed_tokens.weight and lm_head.weight are the target's unless the checkpoint
  // has its own. The head is sharded over `comm` as the target is. InvalidArgument naming the
  // key when its hidden_size or vocab_size differ from the target's; `target` must outlive
  // the head.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LlamaModel>> LoadEagleHead(
      const HfConfig& config, WeightSource& weights, kernels::Communicator* comm,
      const LlamaModel& target);

  // The EAGLE-3 head of `target` (vLLM's Eagle3LlamaForCausalLM): tensor names as its
  // checkpoints have them (midlayer.* or layers.N.*, fc.weight [hidden, n × hidden], norm,
  // lm_head [draft_vocab_size, hidden], d2t; with or without "model."). Layer 0 reads
  // [input_layernorm(embedding), hidden_norm(h)] (2 × hidden wide); the final norm feeds
  // lm_head and the pre-norm stream is the next pass's h. Sharded over `comm` as the target.
  // InvalidArgument naming the key: hidden_size differing from the target's, a d2t entry
  // outside the target's vocabulary, a tensor of the wrong shape.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LlamaModel>> LoadEagle3Head(
      const HfConfig& config, const Eagle3Options& options, WeightSource& weights,
      kernels::Communicator* comm, const LlamaModel& target);

  // EAGLE-3's target side: Forward's `hidden_out` becomes the residual stream entering each
  // of `layers` (0: the embedding output; num_layers: the last layer's output before the
  // final norm), concatenated in ascending layer order, [num_tokens, n × hidden_size] (vLLM's
  // aux_hidden_state_layers). `layers` sorted, distinct, within [0, num_layers].
  void SetAuxHiddenLayers(std::vector<int32_t> layers);
  // Floats per row of Forward's hidden_out.
  int64_t hidden_out_width() const {
    return int64_t{config_.hidden_size} *
           static_cast<int64_t>(aux_layers_.empty() ? 1 : aux_layers_.size());
  }

  // EAGLE-3: fc over the target's states, [num_tokens, n × hidden] → [num_tokens, hidden]
  // (with input_norm / fc_norm as configured); without aux states a copy.
  void CombineHiddenStates(std::span<const float> states, std::vector<float>* out);

  // Runs the batch, writing its K/V into `cache`, and fills `logits` with
  // [logits_indices.size(), logits_width()] floats. `hidden_out` (optional) gets every row's
  // hidden state, [num_tokens, hidden_out_width()]: a model's after its final norm (what
  // lm_head reads), an EAGLE head's its output (it has no final norm), an EAGLE-3 head's
  // stream before its final norm (after it with norm_output), a target's aux states after
  // SetAuxHiddenLayers. An EAGLE or EAGLE-3 head reads `input_hidden`, [num_tokens,
  // hidden_size] (the target's hidden state of each row's position, EAGLE-3's combined),
  // which other models ignore. Fails only if the collective fails.
  [[nodiscard]] absl::Status Forward(const ForwardBatch& batch, KVCache& cache,
                                     std::vector<float>* logits,
                                     std::vector<float>* hidden_out = nullptr,
                                     const float* input_hidden = nullptr);

  // Allocates a zeroed cache for this rank. Errors: the memory cannot be mapped.
  [[nodiscard]] absl::StatusOr<KVCache> AllocateKVCache(int32_t num_blocks,
                                                        int32_t block_size) const;

  const HfConfig& config() const { return config_; }
  int32_t num_layers() const { return config_.num_hidden_layers; }
  // The pipeline stage this model runs (the whole model: stage 0 of 1).
  const PpStage& stage() const { return stage_; }
  int32_t num_heads() const { return num_heads_; }        // this rank
  int32_t num_kv_heads() const { return num_kv_heads_; }  // this rank
  int32_t head_dim() const { return config_.head_dim; }
  int32_t vocab_size() const { return config_.vocab_size; }
  // Columns of Forward's logits: the vocabulary, or an EAGLE-3 head's draft vocabulary.
  int32_t logits_width() const { return logits_width_; }
  // The target token of logits column `column` (EAGLE-3's d2t; the column itself otherwise).
  int32_t TokenOfColumn(int32_t column) const {
    return draft_to_target_.empty() ? column : draft_to_target_[column];
  }
  // Bytes of weights this rank holds.
  int64_t weight_bytes() const;

  // Sleep mode, level 2 (model_backend.h): frees every weight of a model built by Load (not
  // an EAGLE head); Forward must not run until ReloadWeights. ReloadWeights reads them again
  // from `weights` (the same checkpoint), as Load did.
  void ReleaseWeights();
  [[nodiscard]] absl::Status ReloadWeights(WeightSource& weights);

 private:
  struct Layer {
    std::vector<float> input_norm;
    std::vector<float> hidden_norm;  // EAGLE-3's layer 0: the norm of the hidden input
    // The dense projections are packed once for the CPU GEMM (kernels/cpu/packed_linear.h).
    kernels::cpu::PackedWeight qkv;     // [(heads + 2 kv_heads) × head_dim, hidden]
    std::vector<float> qkv_bias;        // empty without attention bias
    std::vector<float> q_norm;          // [head_dim]; empty without qk_norm
    std::vector<float> k_norm;          // [head_dim]; empty without qk_norm
    kernels::cpu::PackedWeight o_proj;  // [hidden, heads × head_dim]
    std::vector<float> o_bias;          // empty unless the checkpoint has one (added on rank 0)
    std::vector<float> post_norm;
    // Gemma: pre_feedforward_layernorm and post_feedforward_layernorm (post_norm is then
    // post_attention_layernorm on the attention output). Every Gemma norm weight is held as
    // 1 + w (HF's float32 `1.0 + weight`), so the plain RmsNorm computes Gemma's.
    std::vector<float> pre_ff_norm;
    std::vector<float> post_ff_norm;
    kernels::cpu::PackedWeight gate_up;  // [2 × intermediate, hidden]; empty in an MoE layer
    kernels::cpu::PackedWeight down;     // [hidden, intermediate]; empty in an MoE layer
    // MoE layers (HfConfig::IsMoeLayer), else empty: the router and every expert, each
    // cut to this rank's moe_intermediate columns.
    std::vector<float> router;           // [num_experts, hidden]
    std::vector<float> experts_gate_up;  // [num_experts, 2 × moe_intermediate, hidden]
    std::vector<float> experts_down;     // [num_experts, hidden, moe_intermediate]
    // Qwen2-MoE's shared expert (this rank's shared_intermediate columns) and its gate.
    std::vector<float> shared_gate_up;  // [2 × shared_intermediate, hidden]
    std::vector<float> shared_down;     // [hidden, shared_intermediate]
    std::vector<float> shared_gate;     // [1, hidden]
  };

  LlamaModel(const HfConfig& config, const TpLayout& tp, kernels::Communicator* comm,
             kernels::cpu::RotaryEmbedding rope);
  // Load, LoadEagleHead and LoadEagle3Head (`eagle_target` non-null: an EAGLE head of that
  // model; `eagle3`: an EAGLE-3 head's options).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LlamaModel>> Build(
      const HfConfig& config, WeightSource& weights, kernels::Communicator* comm,
      const LlamaModel* eagle_target, const Eagle3Options* eagle3, const PpStage* stage = nullptr);
  // The stream at the start of this stage's layers: the embedding (first stage) or the
  // previous stage's tensors; `hidden` holds layer first_layer's normed input.
  void StageInput(const ForwardBatch& batch, float* hidden, float* residual);
  // A stage before the last: the stream after its layers into batch.intermediate_out.
  void StageOutput(const ForwardBatch& batch, const float* hidden, const float* residual);
  // Every weight; an EAGLE head's fc too, and its own embedding and lm_head where the
  // checkpoint has them.
  [[nodiscard]] absl::Status LoadWeights(WeightSource& weights);
  // An EAGLE or EAGLE-3 head's own tensors (llama_eagle.cc): embedding and lm_head where its
  // own, fc (and EAGLE-3's input_norm, fc_norm, final norm, d2t).
  [[nodiscard]] absl::Status LoadHeadWeights(WeightSource& weights);
  // The q/k/v input width of layer `i`: 2 × hidden for EAGLE-3's layer 0.
  int64_t LayerInputWidth(int32_t i) const {
    return int64_t{config_.hidden_size} * (eagle3_ && i == 0 ? 2 : 1);
  }
  // The embedding table and lm_head in use (an EAGLE head's may be its target's).
  const std::vector<float>& embed_table() const {
    return shared_ != nullptr && embed_tokens_.empty() ? shared_->embed_tokens_ : embed_tokens_;
  }
  const kernels::cpu::PackedWeight& lm_head() const {
    return shared_ != nullptr && lm_head_.empty() ? shared_->lm_head_ : lm_head_;
  }
  // EAGLE: residual = fc([embed(token), input_hidden]) per row.
  void EagleInput(const ForwardBatch& batch, const float* input_hidden, float* residual);
  // EAGLE-3: hidden = [input_layernorm(embed(token)), hidden_norm(input_hidden)] (2 × hidden
  // per row), residual = input_hidden (normed with norm_before_residual).
  void Eagle3Input(const ForwardBatch& batch, const float* input_hidden, float* hidden,
                   float* residual);
  // The rows' final stream (hidden + residual) through the final norm, then lm_head; with
  // `hidden_out`, every row's hidden_out as Forward says.
  void Finish(const ForwardBatch& batch, const float* hidden, const float* residual,
              std::vector<float>* logits, std::vector<float>* hidden_out);
  // Gemma: the feed-forward norms; every norm weight w becomes 1 + w.
  [[nodiscard]] absl::Status LoadGemmaNorms(WeightSource& weights);
  [[nodiscard]] absl::Status Attention(const Layer& layer, int32_t layer_index,
                                       const ForwardBatch& batch, KVCache& cache, float* hidden);
  [[nodiscard]] absl::Status Mlp(const Layer& layer, int64_t num_tokens, float* hidden);
  [[nodiscard]] absl::Status LoadExperts(WeightSource& weights, int32_t layer_index, Layer& layer);
  // The sparse MoE block in place of the dense MLP (one all-reduce, as Mlp).
  [[nodiscard]] absl::Status Moe(const Layer& layer, int64_t num_tokens, float* hidden);
  // out += sigmoid(shared_gate · x) · shared_expert(x) (this rank's partial sum).
  void AddSharedExpert(const Layer& layer, int64_t num_tokens, const float* x, float* out);

  const HfConfig config_;
  kernels::Communicator* const comm_;
  const kernels::cpu::RotaryEmbedding rope_;
  // Gemma-3's local (sliding-window) layers' rotary table: rope_local_theta, unscaled.
  std::optional<kernels::cpu::RotaryEmbedding> rope_local_;
  const TpLayout tp_;
  PpStage stage_;
  const int32_t num_heads_;
  const int32_t num_kv_heads_;
  const int32_t intermediate_;  // this rank

  std::vector<float> embed_tokens_;  // [vocab, hidden]
  // lm_head.weight, or embed_tokens_ again when tied (a packed copy: the table stays for the
  // lookup).
  kernels::cpu::PackedWeight lm_head_;
  std::vector<float> final_norm_;  // empty in an EAGLE head (none)
  std::vector<Layer> layers_;
  // An EAGLE head's target (embedding and lm_head unless its own) and its fc; null otherwise.
  const LlamaModel* shared_ = nullptr;
  kernels::cpu::PackedWeight eagle_fc_;  // [hidden, 2 × hidden]; EAGLE-3: [hidden, n × hidden]
  std::vector<float> eagle_fc_bias_;     // empty without fc.bias
  // EAGLE-3 (eagle3_): its options, input_norm (norm_before_fc) and fc_norm.i (fc_norm).
  bool eagle3_ = false;
  Eagle3Options eagle3_options_;
  std::vector<float> fc_input_norm_;
  std::vector<std::vector<float>> fc_norms_;
  int32_t logits_width_ = 0;
  std::vector<int32_t> draft_to_target_;  // EAGLE-3's d2t applied; empty: identity
  // A target's EAGLE-3 aux layers (SetAuxHiddenLayers); empty: hidden_out is the last state.
  std::vector<int32_t> aux_layers_;

  // Scratch, grown on demand and reused across steps.
  std::vector<float> hidden_, residual_, qkv_, q_, k_, v_, attn_out_, gate_up_, act_, rows_, cat_,
      fc_in_;
  std::vector<float> router_logits_, topk_weights_, moe_out_, shared_out_, shared_logit_;
  std::vector<int32_t> topk_ids_;
  kernels::cpu::MoeScratch moe_scratch_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_LLAMA_MODEL_H_
