// CudaLlamaModel: the Llama family (Llama 2/3, Mistral, Qwen2, Qwen3, Phi-3) on one GPU, one
// tensor-parallel rank of it — LlamaModel's twin (worker/llama_model.h) with the same layer
// order, in the model dtype (float32, float16 or bfloat16; GEMMs accumulate in float32).
//
// Per layer: fused-add RMSNorm → merged qkv GEMM (+ Qwen2 biases) → per-head q/k RMSNorm in
// place (Qwen3) → RoPE in place in the qkv buffer → k/v packed (2-D copies) and written to the
// paged cache by slot → paged attention (reads q inside the qkv buffer) → o_proj GEMM → all-reduce
// → fused-add RMSNorm → merged gate_up GEMM → SiLU-and-mul → down GEMM → all-reduce (an MoE
// layer instead: router GEMM → top-k softmax into dense routing weights → every expert's
// gate_up / down GEMMs over all tokens, accumulated in float where chosen — kernels/cuda/moe.h
// — → all-reduce; device-side, so graphs stay on). The final norm
// and lm_head run on the logits rows only (gathered first, so the last layer's states stay
// and ComputeLogits can add rows after the Forward). Gemma-2 / Gemma-3 (HfConfig::
// gemma) as the CPU model: embeddings scaled, (1 + w) norms (NormWeight::kGemma) around both
// sub-layers, GeGLU, Gemma-3's local RoPE table, the attention and final soft caps. GEMMs go
// through one CublasLtGemm (plans cached per shape), the rest through kernels/cuda (ops.h,
// attention.h) and model_kernels.h.
//
// Tensor parallelism and Phi-3's fused checkpoint tensors: cut as worker/tp_layout.h says
// (the CPU model's cut; KV heads replicated when the ranks outnumber them).
//
// Memory: weights are uploaded once (one cudaMalloc per tensor; merged qkv and gate_up);
// scratch is preallocated at Load for `max_num_tokens` rows and `max_num_logits` logits rows,
// plus the attention workspace for the worst shape of those limits and max_model_len; Forward
// never allocates, never synchronises, and is capturable into a CUDA graph once every GEMM
// shape it uses has been run eagerly (cuBLASLt plans are made on first use).
//
// Use from a benchmark, without the scheduler (e.g. a dummy Llama-3-8B in bf16):
//   HfConfig c = ...;  // fields set in code: architecture "LlamaForCausalLM", sizes, ...
//   kernels::cuda::SingleRankDeviceCommunicator comm;
//   CudaModelOptions o; o.dtype = GemmDType::kBFloat16; o.dummy_weights = true;
//   o.max_num_tokens = 8192; o.max_num_logits = 256; o.max_model_len = 8192;
//   auto model = CudaLlamaModel::Load(c, /*weights=*/nullptr, &comm, o, stream);
//   auto cache = (*model)->AllocateKVCache(num_blocks, 16);
//   CudaForwardInputs in = ...;  // device arrays (token ids, positions, slots, metadata)
//   (*model)->Forward(in, &*cache, stream);  // logits in (*model)->logits(), dtype rows
// (CudaModelBackend in cuda_model_backend.h does all of this for the worker, with sampling
// and CUDA graphs.)
//
// Thread-safety: none; one thread drives a model on one stream.
#ifndef VLLM_WORKER_CUDA_CUDA_LLAMA_MODEL_H_
#define VLLM_WORKER_CUDA_CUDA_LLAMA_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_communicator.h"
#include "kernels/cuda/gemm.h"
#include "worker/cuda/device_buffer.h"
#include "worker/hf_config.h"
#include "worker/tp_layout.h"
#include "worker/weights.h"

namespace vllm::worker {

struct CudaModelOptions {
  // Element type of weights, activations, KV cache and logits.
  kernels::cuda::GemmDType dtype = kernels::cuda::GemmDType::kBFloat16;
  // Scratch rows: the most tokens one Forward may run (max_num_batched_tokens).
  int32_t max_num_tokens = 2048;
  // The most logits rows one Forward may produce (max_num_seqs).
  int32_t max_num_logits = 256;
  // The longest sequence (sizes the attention workspace); 0: max_position_embeddings.
  int32_t max_model_len = 0;
  // Initialise every weight on the device from `seed` (vLLM's --load-format dummy): values
  // uniform in [-dummy_scale, dummy_scale), norm weights 1. The WeightSource is not read.
  bool dummy_weights = false;
  uint64_t seed = 0;
  float dummy_scale = 0.02f;
};

// The paged KV cache of one rank on the device: per layer a K and a V region of [num_blocks,
// block_size, num_kv_heads (this rank), head_dim] elements of the model dtype, all in one
// allocation. Uninitialised (attention reads only slots written first).
struct CudaKVCache {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  DeviceBuffer storage;
  std::vector<void*> k, v;  // per layer, into storage
};

// One Forward's inputs: device arrays (valid until the work completes) and host sizes.
struct CudaForwardInputs {
  int64_t num_tokens = 0;
  const int32_t* token_ids = nullptr;     // device [num_tokens], in [0, vocab)
  const int32_t* positions = nullptr;     // device [num_tokens]
  const int64_t* slot_mapping = nullptr;  // device [num_tokens]; -1: padding, not cached
  // num_tokens == attention.num_tokens; block_size == the cache's.
  kernels::cuda::DeviceAttentionMetadata attention;
  int32_t num_logits = 0;
  const int32_t* logits_indices = nullptr;  // device [num_logits], rows of the batch
};

class CudaLlamaModel {
 public:
  // Builds this rank's model on the current device: uploads `weights` (or, with
  // options.dummy_weights, fills them on the device; `weights` may then be null) and
  // allocates the scratch. `comm` (not owned, outlives the model) is the tensor-parallel
  // group, whose size must split the model as MakeTpLayout allows. Uploads run on
  // `stream`, which Load synchronises before returning. InvalidArgument for an unsupported
  // config or options (head_dim not a multiple of 8 or above 256, non-positive limits),
  // weight errors naming the tensor, ResourceExhausted when device memory runs out.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaLlamaModel>> Load(
      const HfConfig& config, WeightSource* weights, kernels::cuda::DeviceCommunicator* comm,
      const CudaModelOptions& options, cudaStream_t stream);

  ~CudaLlamaModel();
  CudaLlamaModel(const CudaLlamaModel&) = delete;
  CudaLlamaModel& operator=(const CudaLlamaModel&) = delete;

  // Allocates this rank's cache (ResourceExhausted when it does not fit).
  [[nodiscard]] absl::StatusOr<CudaKVCache> AllocateKVCache(int32_t num_blocks,
                                                            int32_t block_size) const;

  // Enqueues the batch on `stream`: writes its K/V into `cache` and [num_logits, vocab]
  // logits of the model dtype into logits(). InvalidArgument (nothing enqueued) when the
  // sizes exceed the options' limits or the attention workspace; Internal when a launch or
  // the collective fails.
  [[nodiscard]] absl::Status Forward(const CudaForwardInputs& inputs, CudaKVCache* cache,
                                     cudaStream_t stream);

  // Enqueues on `stream` (after the Forward) the logits of `num_rows` (1 ..= max_num_logits)
  // more rows of the last Forward's batch: `rows` (device [num_rows], each below that
  // Forward's num_tokens) go through the final norm, lm_head and final soft cap exactly as
  // its logits rows did, into logits() (overwritten). Possible because Forward leaves the
  // last layer's hidden states in the scratch (the final norm runs on gathered copies) until
  // the next Forward; prompt logprobs use it to cover every prompt position in chunks of the
  // logits buffer. Not capturable before its GEMM shape has run eagerly. InvalidArgument
  // (nothing enqueued) when num_rows is out of range; Internal when a launch fails.
  [[nodiscard]] absl::Status ComputeLogits(const int32_t* rows, int32_t num_rows,
                                           cudaStream_t stream);

  // Device logits of the last Forward or ComputeLogits: [rows, vocab_size] of dtype(),
  // row-major.
  const void* logits() const { return logits_.get(); }
  // The same buffer, for the sampler's in-place filters (the grammar bitmask) until the next
  // Forward or ComputeLogits overwrites it.
  void* mutable_logits() { return logits_.get(); }

  const HfConfig& config() const { return config_; }
  const CudaModelOptions& options() const { return options_; }
  kernels::cuda::GemmDType dtype() const { return options_.dtype; }
  int32_t dtype_bytes() const;
  int32_t num_heads() const { return num_heads_; }        // this rank
  int32_t num_kv_heads() const { return num_kv_heads_; }  // this rank
  int32_t vocab_size() const { return config_.vocab_size; }
  // Bytes of weights on the device (this rank).
  int64_t weight_bytes() const { return weight_bytes_; }
  // Sleep mode, level 2 (model_backend.h): frees every weight tensor (weight_bytes() 0);
  // Forward must not run until ReloadWeights uploads them again from `weights` (may be null
  // with dummy weights) on `stream`, synchronised before it returns. The tensors' addresses
  // change: graphs captured before are stale.
  void ReleaseWeights();
  [[nodiscard]] absl::Status ReloadWeights(WeightSource* weights, cudaStream_t stream);
  // Bytes of preallocated scratch, logits and attention workspace (not the GEMM workspace).
  int64_t activation_bytes() const { return activation_bytes_; }

 private:
  struct Layer {
    void* input_norm = nullptr;
    void* qkv = nullptr;       // [(heads + 2 kv_heads) × head_dim, hidden]
    void* qkv_bias = nullptr;  // null without attention bias
    void* q_norm = nullptr;    // [head_dim]; null without qk_norm
    void* k_norm = nullptr;    // [head_dim]; null without qk_norm
    void* o_proj = nullptr;    // [hidden, heads × head_dim]
    void* o_bias = nullptr;    // null unless the checkpoint has one (added on rank 0)
    void* post_norm = nullptr;
    // Gemma only: pre_feedforward_layernorm, post_feedforward_layernorm (w as stored: the
    // norm kernels add 1 in float, NormWeight::kGemma).
    void* pre_ff_norm = nullptr;
    void* post_ff_norm = nullptr;
    void* gate_up = nullptr;  // [2 × intermediate, hidden]; null in an MoE layer
    void* down = nullptr;     // [hidden, intermediate]; null in an MoE layer
    // MoE layers only: the router [num_experts, hidden] and, per expert, its gate_up
    // [2 × moe_intermediate, hidden] and down [hidden, moe_intermediate] (this rank's
    // columns), pointers into one allocation each.
    void* router = nullptr;
    std::vector<void*> experts_gate_up, experts_down;
    // Qwen2-MoE's shared expert (this rank's columns) and its gate [1, hidden]; else null.
    void* shared_gate_up = nullptr;
    void* shared_down = nullptr;
    void* shared_gate = nullptr;
  };

  CudaLlamaModel(const HfConfig& config, const TpLayout& tp,
                 kernels::cuda::DeviceCommunicator* comm, const CudaModelOptions& options);
  // A device tensor of `elems` elements of the model dtype, owned by the model.
  [[nodiscard]] absl::StatusOr<void*> NewTensor(int64_t elems, const char* what);
  [[nodiscard]] absl::Status LoadWeights(WeightSource* weights, cudaStream_t stream);
  // Puts tensor `name` (full shape [rows] or [rows, cols]) — this rank's `shard` of it — at
  // element `offset` of `dst`: seeded dummy values with options_.dummy_weights, else the
  // source's, converted to the model's dtype (LoadWeights' upload of one piece).
  [[nodiscard]] absl::Status PutWeight(WeightSource* weights, cudaStream_t stream,
                                       const std::string& name, std::vector<int64_t> shape,
                                       const Shard& shard, void* dst, int64_t offset);
  [[nodiscard]] absl::Status AllocateScratch();
  // Uploads layer `i`'s router and experts (put: LoadWeights' upload of one piece).
  template <typename Put>
  absl::Status LoadExperts(int32_t i, Layer& l, Put& put);
  // The sparse MoE block on hidden_ in place, then its all-reduce.
  template <typename T>
  absl::Status MoeT(const Layer& l, int64_t t, cudaStream_t stream);
  // Gemma: post-attention norm, residual add, pre-feedforward norm, GeGLU MLP, all-reduce,
  // post-feedforward norm (hidden_ holds the normed MLP output after it).
  template <typename T>
  absl::Status GemmaFeedForwardT(const Layer& l, int64_t t, cudaStream_t stream);
  template <typename T>
  absl::Status ForwardT(const CudaForwardInputs& in, CudaKVCache* cache, cudaStream_t stream);
  // Final norm, lm_head and soft cap of `n` rows (device `indices`) of hidden_ / residual_
  // into logits_; reads hidden_ and residual_ only.
  template <typename T>
  absl::Status LogitsT(const int32_t* indices, int64_t n, cudaStream_t stream);

  const HfConfig config_;
  kernels::cuda::DeviceCommunicator* const comm_;
  const CudaModelOptions options_;
  const TpLayout tp_;
  const int32_t num_heads_;
  const int32_t num_kv_heads_;
  const int32_t intermediate_;  // this rank

  std::unique_ptr<kernels::cuda::CublasLtGemm> gemm_;
  std::vector<DeviceBuffer> tensors_;  // every weight
  void* embed_tokens_ = nullptr;       // [vocab, hidden]
  void* lm_head_ = nullptr;            // == embed_tokens_ when tied
  void* final_norm_ = nullptr;
  std::vector<Layer> layers_;
  DeviceBuffer cos_sin_;        // float [max_position, head_dim]
  DeviceBuffer cos_sin_local_;  // Gemma-3's local layers (rope_local_theta); else empty
  int64_t weight_bytes_ = 0;
  int64_t activation_bytes_ = 0;

  // Scratch (model dtype unless noted).
  DeviceBuffer hidden_, residual_;  // [max_tokens, hidden]
  DeviceBuffer big_;                // [max_tokens, max(qkv width, 2 × intermediate)]
  DeviceBuffer mid_;                // [max_tokens, max(q width, intermediate)]
  DeviceBuffer k_, v_;              // [max_tokens, kv width] packed k / v
  DeviceBuffer rows_, rows_res_;    // [max_logits, hidden]
  DeviceBuffer logits_;             // [max_logits, vocab]
  DeviceBuffer attn_workspace_;
  // MoE scratch (allocated only for MoE models): router logits [max_tokens, num_experts],
  // routing weights (float, dense, 0 = not chosen) of the same shape, one expert's output
  // [max_tokens, hidden] and the float sum of the experts' outputs.
  DeviceBuffer router_logits_, moe_weights_, moe_y_, moe_acc_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_CUDA_CUDA_LLAMA_MODEL_H_
