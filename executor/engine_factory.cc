#include "executor/engine_factory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "executor/multiproc_executor.h"
#include "executor/uniproc_executor.h"
#include "spdlog/spdlog.h"
#include "worker/worker.h"

namespace vllm::executor {

absl::StatusOr<config::VllmConfig> ResolveVllmConfig(const config::VllmConfig& config,
                                                     const worker::ModelConfig& model_config) {
  config::VllmConfig c = config;
  // Resolved once here so every rank runs on the same kind of device.
  VLLM_ASSIGN_OR_RETURN(c.device.device, worker::ResolveDevice(config.device.device));
  int64_t model_len = model_config.max_position_embeddings;
  if (c.model.max_model_len < 0 || c.model.max_model_len > model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max-model-len %d is outside [1, %d] (the model's max_position_embeddings)",
        c.model.max_model_len, model_len));
  }
  if (c.model.max_model_len == 0) c.model.max_model_len = static_cast<int32_t>(model_len);
  config::SchedulerConfig& s = c.scheduler;
  if (s.max_num_batched_tokens == 0) {
    s.max_num_batched_tokens =
        s.enable_chunked_prefill ? 2048 : std::max(c.model.max_model_len, 2048);
  }
  VLLM_RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<BuiltEngine> BuildEngineCore(const config::VllmConfig& config,
                                            const EngineRuntimeOptions& runtime) {
  VLLM_RETURN_IF_ERROR(config.Validate());
  // The engine needs the model's shape before any worker exists, and bad flags should fail
  // before processes are started.
  BuiltEngine built;
  VLLM_ASSIGN_OR_RETURN(built.model_config, worker::LoadModelConfig(config.model.model));
  VLLM_ASSIGN_OR_RETURN(built.config, ResolveVllmConfig(config, built.model_config));
  const config::VllmConfig& c = built.config;
  spdlog::info("Initializing a V1 LLM engine with config: {}", config::DescribeVllmConfig(c));

  core::EngineCoreConfig core_config;
  core_config.engine_index = c.parallel.data_parallel_rank;
  core::SchedulerConfig& s = core_config.scheduler;
  s.max_model_len = c.model.max_model_len;
  s.max_num_seqs = c.scheduler.max_num_seqs;
  s.max_num_batched_tokens = c.scheduler.max_num_batched_tokens;
  s.block_size = c.cache.block_size;
  s.enable_prefix_caching = c.cache.enable_prefix_caching;
  s.enable_kv_cache_events = c.kv_events.enable;
  s.sliding_window =
      built.model_config.AllLayersSliding() ? built.model_config.layer_windows.front() : 0;
  s.enable_chunked_prefill = c.scheduler.enable_chunked_prefill;
  s.long_prefill_token_threshold = c.scheduler.long_prefill_token_threshold;
  s.policy = c.scheduler.policy;
  core_config.num_gpu_blocks_override = c.cache.num_gpu_blocks_override;
  core_config.vocab_size = built.model_config.vocab_size;
  core_config.kv_events = c.kv_events;  // the engine core publishes what its scheduler records

  std::unique_ptr<core::Executor> executor;
  if (c.parallel.executor_backend() == config::ExecutorBackend::kUni) {
    VLLM_ASSIGN_OR_RETURN(std::unique_ptr<UniProcExecutor> uni,
                          UniProcExecutor::Create(worker::WorkerConfigFrom(c)));
    built.weight_bytes = uni->worker().runner().backend().weight_bytes();
    executor = std::move(uni);
  } else {
    MultiprocExecutorOptions mp;
    mp.config = c;
    mp.worker_binary = runtime.worker_binary;
    mp.execute_timeout = runtime.execute_timeout;
    VLLM_ASSIGN_OR_RETURN(executor, MultiprocExecutor::Create(mp));
  }
  VLLM_ASSIGN_OR_RETURN(built.core,
                        core::EngineCore::Create(std::move(core_config), std::move(executor)));
  return built;
}

}  // namespace vllm::executor
