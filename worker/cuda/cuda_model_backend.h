// CudaModelBackend: ModelBackend on one GPU (vLLM's GPUModelRunner device side and
// gpu_worker.py's memory profiling): CudaLlamaModel, its KV cache, a stream, input staging,
// device sampling and CUDA graphs for decode steps.
//
// One step (Execute): the runner's host arrays are packed into one pinned staging buffer and
// sent with ONE host-to-device copy; the model runs (eagerly, or as a replayed CUDA graph);
// the device samples (ArgmaxRows when every row is greedy, else SampleRows with the runner's
// CounterUniform draws); the sampled ids — and, only when some row is on_host (penalties or
// logprobs), those rows' logits — come back with one device-to-host copy each, followed by
// the step's only host synchronisation.
//
// Structured outputs: the grammar bitmask rows of the device-sampled rows (RowSampling::
// bitmask on a row that is not on_host) travel in the same upload, after the other arrays,
// with the logits row each constrains; one kc::ApplyTokenBitmask launch masks those rows of
// the model's logits between the forward (or the graph replay: the mask is never captured)
// and the sampler. On_host rows come back unmasked for the runner's CPU mask, so each row is
// masked exactly once. The input buffers hold max_num_seqs bitmask rows (ceil(vocab / 32)
// words each: 4 MB at 256 rows of a 128 K vocabulary, counted by the profile run), so a
// constrained step allocates nothing.
//
// Prompt logprobs: the runner's `logits_only` rows (prompt positions, up to the step's token
// count) are not in the forward's logits, which cover the sampled rows only (at most
// max_num_seqs). Their batch rows travel in the same upload; after the step's
// synchronisation they run through the final norm and lm_head from the hidden states the
// forward leaves (CudaLlamaModel::ComputeLogits), max_num_seqs rows at a time through the
// existing logits buffer and pinned host logits, one synchronisation per chunk, and come back
// as float host logits in the runner's row order. No device memory is added beyond
// max_num_batched_tokens int32 row indices in the input buffer; steps without such rows
// (every decode step, every graph replay) are unchanged.
//
// Memory (DetermineAvailableMemory, vLLM's profile run): weights, scratch (sized for
// max_num_batched_tokens tokens and max_num_seqs logits rows) and workspaces are all
// allocated up front with cudaMalloc (never managed memory); a dummy batch of
// max_num_batched_tokens tokens over min(max_num_seqs, tokens) sequences runs with the
// sampler, then KV budget = total × gpu_memory_utilization − (total − free), i.e. minus the
// weights, the activations and everything else on the device (CUDA context, cuBLAS, other
// processes). Nothing is allocated during a step, so the memory in use after the profile run
// is the peak. CUDA graphs are captured after the KV cache is allocated and are not budgeted
// (their memory is small: every buffer they touch is preallocated).
//
// CUDA graphs (unless enforce_eager): decode steps — every query length 1, every row sampled
// — at the batch sizes of CudaGraphBatchSizes; a batch is padded up to the next captured size
// (padding rows: token 0, position 0, slot -1, seq_len 0, which attention writes as zeros).
// Graphs use max_seq_len = max_model_len and block tables max_model_len / block_size wide, so
// their launch shapes depend only on the batch size. Each size runs once eagerly before its
// capture (cuBLASLt plans are made then, outside the capture).
//
// Thread-safety: none; one worker thread drives it. Every entry point first makes the
// backend's GPU current on the calling thread.
#ifndef VLLM_WORKER_CUDA_CUDA_MODEL_BACKEND_H_
#define VLLM_WORKER_CUDA_CUDA_MODEL_BACKEND_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "kernels/cuda/device_communicator.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "worker/cuda/cuda_llama_model.h"
#include "worker/cuda/device_buffer.h"
#include "worker/model_backend.h"

namespace vllm::worker {

using config::ModelDType;

struct CudaBackendOptions {
  ModelDType dtype = ModelDType::kAuto;
  bool dummy_weights = false;  // --load-format dummy: weights filled on the device
  uint64_t seed = 0;
  // The GPU: device_index modulo the number of visible devices (the TP rank).
  int32_t device_index = 0;
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  // 0: the model's max_position_embeddings / 2048 / 256.
  int32_t max_model_len = 0;
  int32_t max_num_batched_tokens = 0;
  int32_t max_num_seqs = 0;
};

// The model dtype for `dtype` and the checkpoint (kAuto: see ModelDType).
kernels::cuda::GemmDType ResolveCudaDType(ModelDType dtype, const HfConfig& config);

// vLLM's capture sizes: 1, 2, 4, 8, then multiples of 8, up to min(max_num_seqs,
// max_num_batched_tokens, 512); ascending. Host-only.
std::vector<int32_t> CudaGraphBatchSizes(int32_t max_num_seqs, int32_t max_num_batched_tokens);

class CudaModelBackend final : public ModelBackend {
 public:
  // Selects the GPU, creates the stream and loads the model (`weights` may be null with
  // dummy_weights). `device_comm` (not owned, outlives the backend) is the tensor-parallel
  // group; null: a group of one. InvalidArgument naming --device when no GPU is visible;
  // the model's load errors otherwise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaModelBackend>> Create(
      const HfConfig& config, WeightSource* weights, kernels::cuda::DeviceCommunicator* device_comm,
      const CudaBackendOptions& options);
  ~CudaModelBackend() override;

  const HfConfig& config() const override { return model_->config(); }
  int32_t num_kv_heads() const override { return model_->num_kv_heads(); }
  int32_t kv_dtype_bytes() const override { return model_->dtype_bytes(); }
  int64_t weight_bytes() const override { return model_->weight_bytes(); }
  bool samples_on_device() const override { return true; }
  bool supports_prompt_logprobs() const override { return true; }
  // The profile run (see above); logs the numbers. ResourceExhausted when nothing is left
  // for the KV cache.
  absl::StatusOr<int64_t> DetermineAvailableMemory() override;
  // Allocates the device cache, sizes the staging for block_size and captures the graphs.
  absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) override;
  // InvalidArgument when the batch exceeds the limits the backend was built for (more than
  // max_num_seqs sampled rows; logits_only rows may number up to the step's tokens).
  absl::Status Execute(const StepInputs& inputs, StepResult* result) override;
  // Sleep mode: cudaFree of the cache and (level 2) the weights, the graphs destroyed (they
  // point into both); RestoreMemory allocates and uploads them again and captures the graphs
  // anew once both are back. Weights are not offloaded to host memory at level 1 (vLLM's
  // CuMemAllocator does): they stay on the device.
  absl::Status ReleaseMemory(bool kv_cache, bool weights) override;
  absl::Status RestoreMemory(bool kv_cache, bool restore_weights, WeightSource* weights) override;

  CudaLlamaModel& model() { return *model_; }
  cudaStream_t stream() const { return stream_; }
  // Captured batch sizes (empty when eager or before InitializeKVCache).
  std::vector<int32_t> captured_sizes() const;
  // Steps run through a graph so far (tests check the graph path is taken).
  int64_t num_graph_steps() const { return num_graph_steps_; }

 private:
  // Byte offsets of the arrays in the staging / device input buffer (16-byte aligned).
  // `num_masks`: the bitmask rows (device-sampled rows with a grammar bitmask).
  struct Layout {
    size_t slots = 0, u = 0, ids = 0, positions = 0, query_start_loc = 0, seq_lens = 0,
           block_tables = 0, logits_indices = 0, params = 0, prompt_rows = 0, mask_rows = 0,
           bitmask = 0, total = 0;
    int64_t num_masks = 0;
  };
  // `num_prompt_rows` (the logits_only rows' batch rows) and then the `num_masks` bitmask
  // rows' logits rows and `mask_words` words each are last: the other offsets do not depend
  // on them.
  static Layout MakeLayout(int64_t num_tokens, int64_t num_seqs, int64_t num_logits,
                           int64_t max_blocks, int64_t num_prompt_rows = 0, int64_t num_masks = 0,
                           int64_t mask_words = 0);

  CudaModelBackend(const CudaBackendOptions& options, int32_t device);
  absl::Status SelectDevice() const;
  absl::Status AllocateInputs(int32_t block_size);
  // Packs `in` (sampled rows only), `prompt_rows` (empty with a graph) and the bitmask rows
  // of in's device-sampled rows into the staging buffer — padded to `graph_size` rows when
  // non-zero — copies it to the device (one copy), fills *out with device pointers and
  // *layout with the offsets used.
  absl::Status Upload(const StepInputs& in, int32_t graph_size,
                      std::span<const int32_t> prompt_rows, CudaForwardInputs* out, Layout* layout);
  // Packs the bitmask rows of in's device-sampled rows at l.mask_rows / l.bitmask of the
  // staging buffer (l from MakeLayout with their count).
  void PackBitmasks(const StepInputs& in, const Layout& l);
  // The sampler over the model's logits (after the grammar bitmask, when the step has any).
  absl::Status Sample(const Layout& l, int64_t num_rows, bool all_greedy);
  // Upload, the forward pass (graph replay when graph_size > 0), the sampler and the async
  // downloads of tokens (and logits when any_host) into the pinned buffers; no synchronisation.
  absl::Status EnqueueStep(const StepInputs& in, int32_t graph_size, bool all_greedy, bool any_host,
                           std::span<const int32_t> prompt_rows);
  // Execute's split of a step with logits_only (prompt) rows: *split is `step` with the
  // sampled rows only (its arrays point into sampled_indices_ / sampled_rows_), and
  // prompt_rows_ the prompt rows' batch rows. Returns the number of prompt rows; 0 leaves
  // *split untouched (the step is used as it is).
  int64_t SplitPromptRows(const StepInputs& step, StepInputs* split);
  // Row `host_row` of logits_host_ (the model's dtype) as vocab_size floats at `out`.
  void HostLogitsToFloat(int64_t host_row, float* out) const;
  // The logits of the `num_prompt` prompt rows of a step whose forward ran: max_num_seqs at a
  // time through the logits buffer and logits_host_ (one synchronisation per chunk), into
  // result->host_logits at the slots prompt_slots_ noted.
  absl::Status ComputePromptLogits(const StepInputs& in, int64_t num_prompt, StepResult* result);
  absl::Status CaptureGraphs();
  void DestroyGraphs();

  const CudaBackendOptions options_;
  const int32_t device_;
  int32_t max_model_len_ = 0;
  int32_t max_tokens_ = 0;
  int32_t max_seqs_ = 0;
  int32_t block_size_ = 16;
  int32_t max_blocks_ = 0;  // block-table width of graphs and the staging capacity

  cudaStream_t stream_ = nullptr;
  kernels::cuda::SingleRankDeviceCommunicator single_rank_;
  std::unique_ptr<CudaLlamaModel> model_;
  CudaKVCache cache_;
  PinnedBuffer staging_;
  DeviceBuffer inputs_;
  DeviceBuffer tokens_dev_;   // int32 [max_seqs]
  PinnedBuffer tokens_host_;  // int32 [max_seqs]
  PinnedBuffer logits_host_;  // [max_seqs, vocab] of the model dtype, allocated on first use
  // Per-step scratch of a step with logits_only rows: the sampled rows' indices and
  // settings, the prompt rows' batch rows and their slots among the host logits rows.
  std::vector<int32_t> sampled_indices_;
  std::vector<RowSampling> sampled_rows_;
  std::vector<int32_t> prompt_rows_;
  std::vector<int64_t> prompt_slots_;
  std::map<int32_t, cudaGraphExec_t> graphs_;
  int64_t num_graph_steps_ = 0;
  // Sleep mode: the cache's geometry while it is freed (0 blocks: not freed), and whether the
  // weights are.
  int32_t released_blocks_ = 0;
  int32_t released_block_size_ = 0;
  bool weights_released_ = false;
};

// CudaModelBackend::Create as a ModelBackend (for Worker).
[[nodiscard]] absl::StatusOr<std::unique_ptr<ModelBackend>> CreateCudaModelBackend(
    const HfConfig& config, WeightSource* weights, kernels::cuda::DeviceCommunicator* device_comm,
    const CudaBackendOptions& options);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_CUDA_CUDA_MODEL_BACKEND_H_
