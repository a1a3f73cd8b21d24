#include "executor/engine_factory.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "config/vllm_envs.h"
#include "executor/multiproc_executor.h"
#include "executor/uniproc_executor.h"
#include "spdlog/spdlog.h"
#include "structured_output/reasoning.h"
#include "worker/worker.h"

namespace vllm::executor {

absl::StatusOr<absl::Duration> ExecuteModelTimeoutFromEnv(absl::Duration unset) {
  constexpr char kName[] = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS";
  const char* v = std::getenv(kName);
  if (v == nullptr) return unset;
  // Python's int(), as config::ReadVllmEnv (which the launcher runs first) parses it.
  VLLM_ASSIGN_OR_RETURN(const int64_t seconds, config::ParsePythonInt(kName, v));
  if (seconds < 1 || seconds > 604800) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": expected a whole number of seconds in [1, 604800], got '",
                     std::string(v).substr(0, 64), "'"));
  }
  return absl::Seconds(seconds);
}

absl::StatusOr<config::VllmConfig> ResolveVllmConfig(const config::VllmConfig& config,
                                                     const worker::HfConfig& model_config,
                                                     bool allow_long_max_model_len) {
  config::VllmConfig c = config;
  // Resolved once here so every rank runs on the same kind of device.
  VLLM_ASSIGN_OR_RETURN(c.device.device, worker::ResolveDevice(config.device.device));
  int64_t model_len = model_config.max_position_embeddings;
  if (c.model.max_model_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-model-len %d is outside [1, %d]", c.model.max_model_len, model_len));
  }
  if (c.model.max_model_len > model_len) {
    // vLLM's _get_and_verify_max_len: refused, or with VLLM_ALLOW_LONG_MAX_MODEL_LEN a warning
    // (the workers compute RoPE tables that long: worker/worker.cc).
    const std::string msg = absl::StrFormat(
        "User-specified max_model_len (%d) is greater than the derived max_model_len "
        "(max_position_embeddings=%d in model's config.json).",
        c.model.max_model_len, model_len);
    constexpr char kWarning[] =
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution: positions past the "
        "model's trained length give output of unknown quality.";
    if (!allow_long_max_model_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-model-len ", c.model.max_model_len, " is outside [1, ", model_len,
          "] (the model's max_position_embeddings). ", msg,
          " To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. ",
          kWarning));
    }
    spdlog::warn("{} {}", msg, kWarning);
  }
  if (c.model.max_model_len == 0) c.model.max_model_len = static_cast<int32_t>(model_len);
  config::SchedulerConfig& s = c.scheduler;
  if (s.max_num_batched_tokens == 0) {
    s.max_num_batched_tokens =
        s.enable_chunked_prefill ? 2048 : std::max(c.model.max_model_len, 2048);
  }
  if (!c.kv_transfer.kv_connector.empty() && c.kv_transfer.engine_id.empty()) {
    // vLLM's default engine_id: a fresh UUID for this engine.
    absl::BitGen gen;
    const uint64_t hi = absl::Uniform<uint64_t>(gen);
    const uint64_t lo = absl::Uniform<uint64_t>(gen);
    c.kv_transfer.engine_id =
        absl::StrFormat("%08x-%04x-4%03x-%04x-%012x", hi >> 32, (hi >> 16) & 0xffff, hi & 0xfff,
                        ((lo >> 48) & 0x3fff) | 0x8000, lo & 0xffffffffffffULL);
  }
  VLLM_RETURN_IF_ERROR(c.Validate());
  VLLM_RETURN_IF_ERROR(c.CheckResolved());
  return c;
}

absl::StatusOr<BuiltEngine> BuildEngineCore(const config::VllmConfig& config,
                                            const EngineRuntimeOptions& runtime) {
  VLLM_RETURN_IF_ERROR(config.Validate());
  // The engine needs the model's shape before any worker exists, and bad flags should fail
  // before processes are started.
  BuiltEngine built;
  VLLM_ASSIGN_OR_RETURN(built.model_config, worker::LoadHfConfig(config.model.model));
  VLLM_ASSIGN_OR_RETURN(built.config, ResolveVllmConfig(config, built.model_config));
  const config::VllmConfig& c = built.config;
  spdlog::info("Initializing a V1 LLM engine with config: {}", config::DescribeVllmConfig(c));

  core::EngineCoreOptions options;
  options.sliding_window =
      built.model_config.AllLayersSliding() ? built.model_config.layer_windows.front() : 0;
  options.vocab_size = built.model_config.vocab_size;
  options.eos_token_ids = built.model_config.eos_token_ids;
  if (!c.structured_outputs.reasoning_parser.empty()) {
    // Before any worker loads the model: a parser that does not fit the tokenizer is a flag
    // error (vLLM's StructuredOutputManager refuses it at start too).
    VLLM_ASSIGN_OR_RETURN(options.reasoning_tokens,
                          structured_output::LoadReasoningTokens(
                              c.structured_outputs.reasoning_parser, c.model.model));
  }

  std::unique_ptr<core::Executor> executor;
  if (c.parallel.executor_backend() == config::ExecutorBackend::kUni) {
    VLLM_ASSIGN_OR_RETURN(std::unique_ptr<UniProcExecutor> uni,
                          UniProcExecutor::Create(c, runtime.cluster_key_file));
    built.weight_bytes = uni->worker().runner().backend().weight_bytes();
    executor = std::move(uni);
  } else {
    MultiprocExecutorOptions mp;
    mp.config = c;
    mp.worker_binary = runtime.worker_binary;
    VLLM_ASSIGN_OR_RETURN(mp.execute_timeout, ExecuteModelTimeoutFromEnv(runtime.execute_timeout));
    mp.cluster_key_file = runtime.cluster_key_file;
    // VLLM_MQ_MAX_CHUNK_BYTES_MB (vLLM's default 16): the broadcast ring's chunk.
    mp.broadcast_chunk_bytes = static_cast<uint64_t>(config::ProcessVllmEnv().mq_max_chunk_bytes_mb)
                               << 20;
    mp.node_heartbeat_timeout = runtime.node_heartbeat_timeout;
    VLLM_ASSIGN_OR_RETURN(executor, MultiprocExecutor::Create(mp));
  }
  VLLM_ASSIGN_OR_RETURN(built.core, core::EngineCore::Create(c, options, std::move(executor)));
  return built;
}

}  // namespace vllm::executor
