#include "config/engine_args.h"

#include "base/status_macros.h"

namespace vllm::config {

absl::StatusOr<VllmConfig> EngineArgs::CreateEngineConfig() const {
  VllmConfig c = config;
  c.parallel.data_parallel_rank = c.parallel.data_parallel_start_rank;
  VLLM_RETURN_IF_ERROR(c.ResolveKvOffloading());  // --kv-offloading-size's connector
  VLLM_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace vllm::config
