// BuildEngineCore: an EngineCore with its executor (and worker processes, for mp) from a
// VllmConfig — what vLLM's EngineCore.__init__ does with the executor class the config picks.
// Used by LLMEngine (frontend/) and by the engine-core process (launcher/).
//
// Resolution happens here, once, before any worker starts: --device auto becomes the device
// found, max_model_len 0 becomes the model's max_position_embeddings (a larger value is an
// error naming the flag), max_num_batched_tokens 0 becomes vLLM's default. The workers receive
// this resolved config, so every process of the engine runs with the same values.
#ifndef VLLM_EXECUTOR_ENGINE_FACTORY_H_
#define VLLM_EXECUTOR_ENGINE_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"
#include "config/vllm_envs.h"
#include "core/engine_core.h"
#include "worker/hf_config.h"

namespace vllm::executor {

// How this process runs the engine's workers (not configuration: the same config may run
// with another binary).
struct EngineRuntimeOptions {
  // The vllm-launch binary for worker processes; empty: the one next to this executable.
  std::string worker_binary;
  // A step not answered by then fails (a hung worker), and the engine with it; a set
  // VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS takes its place (ExecuteModelTimeoutFromEnv).
  absl::Duration execute_timeout = absl::Minutes(5);
  // Across nodes (--nnodes): the cluster key file for the sockets between them (empty: plain
  // TCP) and how long a silent node is given before the engine fails.
  std::string cluster_key_file;
  absl::Duration node_heartbeat_timeout = absl::Seconds(10);
};

struct BuiltEngine {
  std::unique_ptr<core::EngineCore> core;
  // The config as resolved (see above).
  config::VllmConfig config;
  // The model's Hugging Face config (vocabulary size, EOS ids).
  worker::HfConfig model_config;
  int64_t weight_bytes = 0;  // in-process worker only
};

// Resolves `config` against the model's config.json (see above) and validates the result.
// InvalidArgument naming the flag; the model's errors name the file and field. A
// --max-model-len past max_position_embeddings is refused unless `allow_long_max_model_len`
// (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN; then a warning, as vLLM).
[[nodiscard]] absl::StatusOr<config::VllmConfig> ResolveVllmConfig(
    const config::VllmConfig& config, const worker::HfConfig& model_config,
    bool allow_long_max_model_len = config::ProcessVllmEnv().allow_long_max_model_len);

// vLLM's VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (envs.py: int(os.getenv(..., "300"))): how long
// the multi-process executor waits on its workers for a step (and every other call) before the
// engine fails naming the rank. `unset` when the variable is unset; InvalidArgument naming it
// when Python's int() refuses it or it is outside [1, 604800] s (vLLM would fail the first step
// on a bad value, and time every step out at once on 0 or less).
[[nodiscard]] absl::StatusOr<absl::Duration> ExecuteModelTimeoutFromEnv(absl::Duration unset);

// Loads the model's config, resolves, logs the resolved config ("Initializing a V1 LLM engine
// with config: ...") and builds the engine. Bad flags fail before any worker starts; errors
// name the flag, file or tensor at fault.
[[nodiscard]] absl::StatusOr<BuiltEngine> BuildEngineCore(const config::VllmConfig& config,
                                                          const EngineRuntimeOptions& runtime = {});

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_ENGINE_FACTORY_H_
