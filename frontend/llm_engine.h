// LLMEngine: the in-process engine (vLLM's vllm/v1/engine/llm_engine.py with the offline
// `LLM` class's generate loop): one EngineCore over a UniProcExecutor in the caller's
// thread. Add requests, step until done, collect each request's tokens. Token ids in and
// out; the tokenizer arrives with the API server.
//
// Thread-safety: none; use from one thread.
#ifndef VLLM_FRONTEND_LLM_ENGINE_H_
#define VLLM_FRONTEND_LLM_ENGINE_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/engine_core.h"
#include "worker/worker.h"

namespace vllm::frontend {

// vLLM's EngineArgs, the subset that applies to one engine (CPU or CUDA workers).
struct EngineArgs {
  std::filesystem::path model;
  worker::LoadFormat load_format = worker::LoadFormat::kAuto;
  // 0: the model's max_position_embeddings.
  int32_t max_model_len = 0;
  int32_t max_num_seqs = 256;
  // 0: max(max_model_len, 2048) with chunked prefill (vLLM's default for the CPU).
  int32_t max_num_batched_tokens = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  int32_t long_prefill_token_threshold = 0;
  core::SchedulingPolicy scheduling_policy = core::SchedulingPolicy::kFcfs;
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  std::optional<int32_t> num_gpu_blocks_override;
  uint64_t seed = 0;
  // Tensor parallelism: worker processes through MultiprocExecutor.
  int32_t tensor_parallel_size = 1;
  // "uni" (in-process worker, TP 1 only), "mp" (worker processes); empty: uni for TP 1,
  // mp otherwise (vLLM's --distributed-executor-backend).
  std::string distributed_executor_backend;
  // mp only: the collective ("shm" or "gloo"), the vllm-launch binary (empty: next to this
  // executable), and how long a step may take before the workers count as hung.
  std::string comm_backend = "shm";
  std::string worker_binary;
  absl::Duration execute_timeout = absl::Minutes(5);
  // This replica's data-parallel index (stamped on its outputs).
  int32_t engine_index = 0;
  // vLLM's --device (kAuto: cuda when a GPU is visible; the launcher's default). kCpu here so
  // in-process engines built in code stay on the CPU unless asked.
  worker::Device device = worker::Device::kCpu;
  // CUDA only: --dtype, --gpu-memory-utilization (vLLM's default 0.9), --enforce-eager.
  worker::ModelDType dtype = worker::ModelDType::kAuto;
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
};

// An EngineCore with its executor (and worker processes, for "mp"), built from EngineArgs —
// shared by LLMEngine and the engine-core process. Flags are validated before any worker
// starts; errors name the flag, file or tensor at fault.
struct BuiltEngine {
  std::unique_ptr<core::EngineCore> core;
  worker::ModelConfig model_config;
  int32_t max_model_len = 0;
  int64_t weight_bytes = 0;  // in-process worker only
};
[[nodiscard]] absl::StatusOr<BuiltEngine> BuildEngineCore(const EngineArgs& args);

// A request's result so far (vLLM's RequestOutput with token ids only).
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  std::vector<core::TokenLogprobs> logprobs;
  std::optional<core::FinishReason> finish_reason;
  std::optional<int32_t> stop_reason;
  int32_t num_cached_tokens = 0;
  bool finished() const { return finish_reason.has_value(); }
};

class LLMEngine {
 public:
  // Loads the model and sizes the KV cache. Errors name the flag, file or tensor at fault.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LLMEngine>> Create(const EngineArgs& args);

  // Queues a request; the model's EOS is filled in when the request has none.
  // InvalidArgument for a bad request, AlreadyExists for a duplicate id.
  [[nodiscard]] absl::Status AddRequest(core::EngineCoreRequest request);
  void AbortRequests(const std::vector<std::string>& request_ids);

  // One engine step; returns the requests that progressed (finished ones last time they
  // appear). An error (e.g. a worker died) means the engine is unusable: every pending request
  // is lost with it, and every later call returns the same error.
  [[nodiscard]] absl::StatusOr<std::vector<RequestOutput>> Step();
  bool HasUnfinishedRequests() const;

  // Adds `requests`, steps until all of them finish and returns their outputs in the same
  // order.
  [[nodiscard]] absl::StatusOr<std::vector<RequestOutput>> Generate(
      std::vector<core::EngineCoreRequest> requests);

  // Totals over the engine's life, from the scheduler stats of every step.
  struct Totals {
    int64_t num_preemptions = 0;
    int64_t prefix_cache_queries = 0;
    int64_t prefix_cache_hits = 0;
    int64_t num_steps = 0;
  };
  const Totals& totals() const { return totals_; }

  const worker::ModelConfig& model_config() const { return model_config_; }
  core::EngineCore& engine_core() { return *engine_core_; }
  int32_t max_model_len() const { return max_model_len_; }
  // Bytes of model weights the in-process worker holds (0 with worker processes).
  int64_t weight_bytes() const { return weight_bytes_; }

 private:
  LLMEngine(std::unique_ptr<core::EngineCore> core, worker::ModelConfig model_config,
            int32_t max_model_len, int64_t weight_bytes)
      : engine_core_(std::move(core)),
        model_config_(std::move(model_config)),
        max_model_len_(max_model_len),
        weight_bytes_(weight_bytes) {}

  std::unique_ptr<core::EngineCore> engine_core_;
  const worker::ModelConfig model_config_;
  const int32_t max_model_len_;
  const int64_t weight_bytes_;
  absl::flat_hash_map<std::string, RequestOutput> outputs_;
  Totals totals_;
  absl::Status failed_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_LLM_ENGINE_H_
