// Host-name resolution shared by the engine-core client (its TCP sockets, --data-parallel-
// address) and the API server (--host).
#ifndef VLLM_FRONTEND_ENGINE_LISTEN_ADDRESS_H_
#define VLLM_FRONTEND_ENGINE_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace vllm::frontend {

// Resolves `host` (an address or a name) to the address the server binds, preferring IPv4.
// InvalidArgument naming the host when it does not resolve. Thread-safe.
[[nodiscard]] absl::StatusOr<std::string> ResolveListenAddress(const std::string& host);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_LISTEN_ADDRESS_H_
