// `vllm-launch serve --api-server-count N` (N > 1; vLLM's APIServerProcessManager): this
// process serves no HTTP itself. It starts N `vllm-launch api-server` processes (the same
// serve flags; `--port 0` resolved to one free port for all, SO_REUSEPORT), reads each one's
// handshake address over its control socket (launcher/api_server_control.h), starts the local
// engine cores (which join every API server), waits for every API server to serve, prints the
// ready line, and supervises: an engine's death goes to every API server; an API server's
// death or the DP coordinator's stops everything (exit 1, as vLLM does); SIGTERM / SIGINT go
// to the API servers (they drain), then the engines stop.
#ifndef VLLM_LAUNCHER_API_SERVER_MANAGER_H_
#define VLLM_LAUNCHER_API_SERVER_MANAGER_H_

#include "absl/status/status.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {

// Runs until a signal (OK) or an API server's or the coordinator's end (its error).
[[nodiscard]] absl::Status ServeApiServers(const ServeArgs& args);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_API_SERVER_MANAGER_H_
