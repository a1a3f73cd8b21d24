// Worker: one rank's device, model and KV cache (vLLM's vllm/v1/worker/cpu_worker.py): loads
// the model config and this rank's weights, reports the KV-cache geometry and the memory
// budget for it, allocates the cache, and runs steps through its ModelRunner.
//
// On the CPU the KV-cache budget is explicit (--kv-cache-memory, vLLM's
// VLLM_CPU_KVCACHE_SPACE), not profiled.
//
// Thread-safety: none; UniProcExecutor calls it from the engine thread, WorkerProc (issue 5)
// from the worker process's main thread.
#ifndef VLLM_WORKER_WORKER_H_
#define VLLM_WORKER_WORKER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine_core.h"
#include "core/scheduler_output.h"
#include "kernels/communicator.h"
#include "worker/model_config.h"
#include "worker/model_runner.h"

namespace vllm::worker {

enum class LoadFormat { kAuto, kSafetensors, kDummy };

// Parses "auto", "safetensors" or "dummy"; InvalidArgument listing them otherwise.
[[nodiscard]] absl::StatusOr<LoadFormat> ParseLoadFormat(std::string_view name);

struct WorkerConfig {
  // A Hugging Face model directory (config.json, *.safetensors).
  std::filesystem::path model;
  LoadFormat load_format = LoadFormat::kAuto;
  // Seeds dummy weights and requests that have no seed.
  uint64_t seed = 0;
  // Bytes for this rank's KV cache.
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
};

class Worker {
 public:
  // Loads the config and this rank's weights (`comm`, not owned, is the tensor-parallel
  // group and must outlive the worker). Errors name the file or tensor at fault.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Worker>> Create(const WorkerConfig& config,
                                                                      kernels::Communicator* comm);

  core::KVCacheSpec GetKVCacheSpec() const;
  int64_t DetermineAvailableMemory() const { return config_.kv_cache_memory_bytes; }
  [[nodiscard]] absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) {
    return runner_->InitializeKVCache(num_blocks, block_size);
  }
  [[nodiscard]] absl::StatusOr<core::ModelRunnerOutput> ExecuteModel(
      const core::SchedulerOutput& scheduler_output) {
    return runner_->ExecuteModel(scheduler_output);
  }

  const ModelConfig& model_config() const { return runner_->model().config(); }
  ModelRunner& runner() { return *runner_; }

 private:
  Worker(const WorkerConfig& config, std::unique_ptr<ModelRunner> runner)
      : config_(config), runner_(std::move(runner)) {}
  const WorkerConfig config_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_WORKER_H_
