// The server of `vllm-launch serve` in this process (vLLM's run_server): the API server, its
// client of every engine, this node's engine cores (unless the launcher of
// `--api-server-count N` starts them: `role.control_fd` >= 0) and, on the head of -dp > 1 with
// internal load balancing, the DP coordinator; serves until a signal (SIGTERM drains for
// --shutdown-timeout, SIGINT stops at once), the coordinator's death, or the launcher's end.
#ifndef VLLM_LAUNCHER_SERVE_H_
#define VLLM_LAUNCHER_SERVE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "launcher/api_server_control.h"
#include "launcher/dp_coordinator_main.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {

// Serves until stopped; OK after an orderly stop, the failure otherwise (bad model files,
// an engine or the coordinator that did not start, the coordinator's death).
[[nodiscard]] absl::Status Serve(const ServeArgs& args, const ApiServerRole& role = {});

// The head of -dp > 1 with internal load balancing runs a DP coordinator (vLLM:
// launch_core_engines starts one whenever the API servers balance over several engines).
bool NeedsCoordinator(const ServeArgs& args);

// Starts the DP coordinator for `api_servers` subscribers (TCP on -dpa when multi_node).
[[nodiscard]] absl::StatusOr<std::unique_ptr<DpCoordinatorProcess>> StartCoordinator(
    const ServeArgs& args, int32_t api_servers);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SERVE_H_
