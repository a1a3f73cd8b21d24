// EngineArgs: the engine's settings as one flat struct (vLLM's vllm/engine/arg_utils.py
// EngineArgs), for code that builds an engine in-process (LLMEngine, benchmarks, tests) and
// for the CLI, which parses into it. CreateEngineConfig() turns it into the VllmConfig that
// every process of the engine receives.
#ifndef VLLM_CONFIG_ENGINE_ARGS_H_
#define VLLM_CONFIG_ENGINE_ARGS_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"

namespace vllm::config {

struct EngineArgs {
  std::filesystem::path model;
  LoadFormat load_format = LoadFormat::kAuto;
  // 0: the model's max_position_embeddings.
  int32_t max_model_len = 0;
  int32_t max_num_seqs = 256;
  // 0: 2048 with chunked prefill, else max(max_model_len, 2048) (vLLM's defaults).
  int32_t max_num_batched_tokens = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  int32_t long_prefill_token_threshold = 0;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  std::optional<int32_t> num_gpu_blocks_override;
  uint64_t seed = 0;
  int32_t tensor_parallel_size = 1;
  int32_t pipeline_parallel_size = 1;
  int32_t data_parallel_size = 1;
  int32_t data_parallel_size_local = 1;
  int32_t data_parallel_start_rank = 0;
  std::string data_parallel_address = "127.0.0.1";
  int32_t data_parallel_rpc_port = 13345;
  ExecutorBackend distributed_executor_backend = ExecutorBackend::kAuto;
  CommBackend comm_backend = CommBackend::kShm;
  // kCpu here so engines built in code stay on the CPU unless asked; the CLI's default is
  // kAuto (cuda when a GPU is visible).
  Device device = Device::kCpu;
  // CUDA only.
  ModelDType dtype = ModelDType::kAuto;
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  // --kv-events-config (ParseKvEventsConfig, config/kv_events_config.h).
  KvEventsConfig kv_events;

  // Not configuration but how this process runs the engine's workers (mp): the vllm-launch
  // binary (empty: next to this executable) and how long a step may take before the workers
  // count as hung.
  std::string worker_binary;
  absl::Duration execute_timeout = absl::Minutes(5);

  // The VllmConfig these arguments describe, validated (InvalidArgument naming the flag).
  [[nodiscard]] absl::StatusOr<VllmConfig> CreateEngineConfig() const;
};

}  // namespace vllm::config

#endif  // VLLM_CONFIG_ENGINE_ARGS_H_
