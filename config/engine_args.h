// EngineArgs: what code that builds an engine in-process (LLMEngine, benchmarks, tests) fills
// (vLLM's vllm/engine/arg_utils.py EngineArgs): the VllmConfig as given, and how this process
// runs the engine's workers. CreateEngineConfig() validates it into the VllmConfig every
// process of the engine receives. The CLI binds its flags to a VllmConfig directly
// (launcher/serve_args.cc).
#ifndef VLLM_CONFIG_ENGINE_ARGS_H_
#define VLLM_CONFIG_ENGINE_ARGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"

namespace vllm::config {

struct EngineArgs {
  // The settings. The device is kCpu here, so engines built in code stay on the CPU unless
  // asked (the CLI's default is kAuto: cuda when a GPU is visible).
  VllmConfig config = CodeDefaults();

  // Not configuration but how this process runs the engine's workers (mp): the vllm-launch
  // binary (empty: next to this executable) and how long a step may take before the workers
  // count as hung.
  std::string worker_binary;
  absl::Duration execute_timeout = absl::Minutes(5);

  // `config` validated (InvalidArgument naming the flag), as replica 0 of its node
  // (data_parallel_rank = data_parallel_start_rank), its kv_offloading_size resolved into the
  // KV-transfer config (VllmConfig::ResolveKvOffloading).
  [[nodiscard]] absl::StatusOr<VllmConfig> CreateEngineConfig() const;

  static VllmConfig CodeDefaults() {
    VllmConfig c;
    c.device.device = Device::kCpu;
    return c;
  }
};

}  // namespace vllm::config

#endif  // VLLM_CONFIG_ENGINE_ARGS_H_
