// ModelBackend: the seam between ModelRunner (persistent request state, input preparation,
// vLLM semantics; device-independent) and the device that runs the model and owns the KV
// cache. CpuModelBackend wraps LlamaModel; CudaModelBackend (worker/cuda/, built with CUDA)
// runs CudaLlamaModel on one GPU.
//
// Sampling split: a backend that samples on the device (samples_on_device()) returns the
// token of every logits row except those the runner marks `on_host` — rows that need what
// the device sampler lacks (penalties, logprobs) — whose float logits it copies back for the
// CPU sampler (kernels/cpu/sampling.h). A CPU backend samples nothing: the runner marks every
// row on_host and samples them all on the host.
//
// Structured outputs: a row's grammar bitmask (RowSampling::bitmask) is applied once, by
// whoever samples the row, right before sampling: the device backend on the rows it samples
// (kernels::cuda::ApplyTokenBitmask), the runner on on_host rows (kernels::cpu::
// ApplyTokenBitmask), whose logits the backend returns unmasked.
//
// Thread-safety: none; the worker's thread owns a backend.
#ifndef VLLM_WORKER_MODEL_BACKEND_H_
#define VLLM_WORKER_MODEL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/kv_cache_view.h"
#include "worker/hf_config.h"
#include "worker/llama_model.h"

namespace vllm::worker {

// How one logits row is sampled (the device subset of core::SamplingParams).
struct RowSampling {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  double u = 0.5;        // CounterUniform(seed, position) of the token to sample
  bool on_host = false;  // the runner samples this row on the CPU from its logits
  // Structured outputs: the row's grammar bitmask, ceil(vocab_size / 32) packed words (bit i
  // set: token i allowed; XGrammar's layout), owned by the runner's SchedulerOutput and valid
  // during Execute; null: unconstrained. A device-sampled row is masked by the backend before
  // its sampler (an on_host row is left to the runner); a mask allowing nothing is ignored.
  const int32_t* bitmask = nullptr;
  // A prompt position's row (prompt_logprobs): never sampled, only its raw logits come back
  // (on_host is set too). A step may have up to its token count of them, beyond the
  // max_num_seqs sampled rows.
  bool logits_only = false;
};

// One step's flattened batch, host arrays prepared by ModelRunner (valid during Execute).
struct StepInputs {
  std::span<const int32_t> token_ids;        // [num_tokens]
  std::span<const int32_t> positions;        // [num_tokens]
  std::span<const int64_t> slot_mapping;     // [num_tokens]
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1]
  std::span<const int32_t> seq_lens;         // [num_seqs]
  std::span<const int32_t> block_tables;     // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  std::span<const int32_t> logits_indices;  // [num_logits] ascending token rows
  std::span<const RowSampling> sampling;    // [num_logits]
  // Speculative decoding's EAGLE and Medusa drafts read every row's last hidden state
  // (StepResult::hidden); a backend that cannot return them refuses the step.
  bool want_hidden = false;
  // Pipeline parallelism, a stage after the first: the previous stage's stream (required).
  const IntermediateTensors* intermediate_in = nullptr;
};

// A step with the largest shapes of a real one that touches no KV cache: `num_seqs` sequences
// sharing `num_tokens` tokens (the first num_tokens % num_seqs sequences get one more), each
// sampled at its last token with the default RowSampling, nothing cached or attended to
// (slots -1, seq_len 0, one block-table entry per sequence). A backend's profile run uses the
// token budget over min(max_num_seqs, budget) sequences; graph capture, b sequences of one
// token. Owns its arrays and `inputs` views them, so it is neither copied nor moved.
// Requires 1 <= num_seqs <= num_tokens.
class DummyStep {
 public:
  DummyStep(int32_t num_tokens, int32_t num_seqs, int32_t max_seq_len);
  DummyStep(const DummyStep&) = delete;
  DummyStep& operator=(const DummyStep&) = delete;

  const StepInputs& inputs() const { return inputs_; }

 private:
  std::vector<int32_t> token_ids_, positions_, query_start_loc_, seq_lens_, block_tables_,
      logits_indices_;
  std::vector<int64_t> slot_mapping_;
  std::vector<RowSampling> sampling_;
  StepInputs inputs_;
};

struct StepResult {
  // Per logits row: the sampled token, or -1 for an on_host row.
  std::vector<int32_t> tokens;
  // [number of on_host rows, vocab_size] float logits, in logits-row order.
  std::vector<float> host_logits;
  // With StepInputs::want_hidden: every row's hidden state after the final norm (what lm_head
  // reads), [num_tokens, hidden_size]; with an EAGLE-3 draft the target's aux states instead
  // (LlamaModel::SetAuxHiddenLayers), [num_tokens, n × hidden_size].
  std::vector<float> hidden;
  // Pipeline parallelism, a stage before the last: the stream after its layers, for the next
  // stage; such a stage returns no tokens and no logits.
  IntermediateTensors intermediate;
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  virtual const HfConfig& config() const = 0;
  // This rank's KV heads.
  virtual int32_t num_kv_heads() const = 0;
  // Bytes of one KV-cache element.
  virtual int32_t kv_dtype_bytes() const = 0;
  // The pipeline stage this rank runs (the whole model: stage 0 of 1); its layers are the
  // ones with a KV cache here.
  virtual PpStage stage() const { return {0, 1, 0, config().num_hidden_layers}; }
  // Bytes of weights this rank holds.
  virtual int64_t weight_bytes() const = 0;
  // Whether Execute samples rows that are not on_host.
  virtual bool samples_on_device() const = 0;
  // Whether Execute can return host logits for prompt positions (one extra `logits_only`
  // logits row per prompt position of a request asking for prompt_logprobs, up to a step's
  // whole token budget). Both backends do (CUDA in chunks of its max_num_seqs logits rows);
  // on a backend that does not, the runner computes no prompt logprobs (the API server
  // refuses such requests first).
  virtual bool supports_prompt_logprobs() const { return false; }

  // Bytes this rank can give the KV cache (the CPU: the configured amount; CUDA: profiled).
  [[nodiscard]] virtual absl::StatusOr<int64_t> DetermineAvailableMemory() = 0;
  // Allocates the cache (and, on CUDA, captures graphs). Sizes are positive (checked by the
  // runner).
  [[nodiscard]] virtual absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) = 0;
  // Runs the batch (indices already validated by the runner) and fills `result`.
  [[nodiscard]] virtual absl::Status Execute(const StepInputs& inputs, StepResult* result) = 0;
  // The KV cache as host memory the KV connectors read and write (after InitializeKVCache);
  // nullopt when it is not in host memory (CUDA: no connector is built there yet).
  // `tp_size`/`tp_rank` fill the layout.
  virtual std::optional<kv_transfer::KvCacheView> HostKvCacheView(int32_t /*tp_size*/,
                                                                  int32_t /*tp_rank*/) {
    return std::nullopt;
  }

  // Sleep mode (vLLM's Worker.sleep / wake_up; Worker::Sleep). ReleaseMemory frees the KV
  // cache when `kv_cache` and the weights when `weights` (what is already free stays so);
  // nothing may Execute until RestoreMemory re-created both. RestoreMemory re-creates the
  // KV cache (its former geometry, zeroed) when `kv_cache`, and the weights when
  // `restore_weights`, read from `weights` (the checkpoint again, or the dummy source; CUDA
  // fills dummy weights on the device, and `weights` may then be null). Unimplemented unless
  // overridden.
  [[nodiscard]] virtual absl::Status ReleaseMemory(bool /*kv_cache*/, bool /*weights*/) {
    return absl::UnimplementedError("this model backend cannot free its memory (sleep mode)");
  }
  [[nodiscard]] virtual absl::Status RestoreMemory(bool /*kv_cache*/, bool /*restore_weights*/,
                                                   WeightSource* /*weights*/) {
    return absl::UnimplementedError("this model backend cannot free its memory (sleep mode)");
  }
};

// LlamaModel with a float32 host KV cache; samples nothing on the "device".
class CpuModelBackend final : public ModelBackend {
 public:
  // `kv_cache_memory_bytes` is what DetermineAvailableMemory reports (--kv-cache-memory).
  CpuModelBackend(std::unique_ptr<LlamaModel> model, int64_t kv_cache_memory_bytes)
      : model_(std::move(model)), kv_cache_memory_bytes_(kv_cache_memory_bytes) {}

  const HfConfig& config() const override { return model_->config(); }
  int32_t num_kv_heads() const override { return model_->num_kv_heads(); }
  int32_t kv_dtype_bytes() const override { return sizeof(float); }
  PpStage stage() const override { return model_->stage(); }
  int64_t weight_bytes() const override { return model_->weight_bytes(); }
  bool samples_on_device() const override { return false; }
  bool supports_prompt_logprobs() const override { return true; }
  absl::StatusOr<int64_t> DetermineAvailableMemory() override { return kv_cache_memory_bytes_; }
  absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) override;
  // Internal error if a row is not on_host (the runner's contract).
  absl::Status Execute(const StepInputs& inputs, StepResult* result) override;
  std::optional<kv_transfer::KvCacheView> HostKvCacheView(int32_t tp_size,
                                                          int32_t tp_rank) override;
  // Frees with munmap (the cache) and malloc_trim (the weights), so the pages go back to the
  // system at once.
  absl::Status ReleaseMemory(bool kv_cache, bool weights) override;
  absl::Status RestoreMemory(bool kv_cache, bool restore_weights, WeightSource* weights) override;

  LlamaModel& model() { return *model_; }

 private:
  std::unique_ptr<LlamaModel> model_;
  const int64_t kv_cache_memory_bytes_;
  KVCache kv_cache_;
  // The cache's geometry while ReleaseMemory has freed it (0 blocks: not freed).
  int32_t released_blocks_ = 0;
  int32_t released_block_size_ = 0;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_MODEL_BACKEND_H_
