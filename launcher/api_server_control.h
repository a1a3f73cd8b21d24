// The launcher's side and the API server's side of their control socket (a socketpair;
// descriptor 3 in the API server): typed frames of launcher/spec/api_server_spec.h. The
// launcher sends the ApiServerSpec first (the whole serve configuration: the API server parses
// no flags), then "engine dead" messages; the API server answers "handshake" then "ready".
#ifndef VLLM_LAUNCHER_API_SERVER_CONTROL_H_
#define VLLM_LAUNCHER_API_SERVER_CONTROL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "launcher/serve_args.h"
#include "launcher/spec/api_server_spec.h"
#include "launcher/spec/coordinator_spec.h"

namespace vllm::launcher {

// Which API server this process is, for Serve.
struct ApiServerRole {
  int32_t index = 0;
  int32_t count = 1;
  int control_fd = -1;                 // >= 0: an API server process started by the launcher
  DpCoordinatorAddresses coordinator;  // the launcher's coordinator (publish empty: none)
};

// Sends one message; false when the peer is gone.
bool SendApiServerMessage(int fd, const ApiServerMessage& message);

// The spec of API server `index` of `args.api_server_count`, listening on `port`.
[[nodiscard]] absl::StatusOr<std::string> EncodeSpecFor(const ServeArgs& args, int32_t index,
                                                        int32_t port,
                                                        const DpCoordinatorAddresses& coordinator);

// The serve arguments an API server runs with, from its spec (the engine's flags are not
// carried: `config` is, made from them).
ServeArgs ServeArgsFromSpec(const ApiServerSpec& spec);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_API_SERVER_CONTROL_H_
