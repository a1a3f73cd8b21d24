// vLLM's environment variables at start-up (config/vllm_envs.h has the table): the serve path
// and --headless read them once, refuse what cannot be honoured (naming the variable), apply
// the honoured ones to the parsed flags as vLLM applies them, and log one warning line naming
// every set variable that is not honoured and every unknown VLLM_* name.
#ifndef VLLM_LAUNCHER_SERVE_ENV_H_
#define VLLM_LAUNCHER_SERVE_ENV_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/vllm_envs.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {

// VLLM_LOGGING_LEVEL for this process's log (every subcommand calls it first), unless
// VLLM_CONFIGURE_LOGGING=0. A bad value leaves the level as it is (start-up reports it).
void ConfigureLoggingFromEnv();

// Applies `env` to `args` (validated again): VLLM_API_KEY when --api-key is not given,
// VLLM_CPU_KVCACHE_SPACE over --kv-cache-memory (as vLLM's CPU platform), VLLM_DP_* when
// --data-parallel-size is 1 (a size above 1 or a rank other than 0 is refused: vLLM's offline
// data parallelism). Then the refusals (config::CheckVllmEnvRefusals).
[[nodiscard]] absl::Status ApplyVllmEnv(const config::VllmEnv& env, ServeArgs& args);

// Reads the process environment, applies it (above) and logs the warning line. The serve path
// and --headless call it after parsing the flags; an error names the variable.
[[nodiscard]] absl::Status ApplyVllmEnvAtStartup(ServeArgs& args);

// VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (default 5): how long an engine-core process is given to
// exit before SIGKILL.
absl::Duration WorkerShutdownTimeout();

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SERVE_ENV_H_
