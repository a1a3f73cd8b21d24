// The RouDi daemon that ipc_bench's iceoryx rows need (see bench/ipc/iceoryx_peer.h): started
// on first use with a config this file writes, stopped on every exit path. Internal to
// iceoryx_peer.cc; built only with iceoryx.
#ifndef VLLM_BENCH_IPC_ICEORYX_ROUDI_H_
#define VLLM_BENCH_IPC_ICEORYX_ROUDI_H_

#include <string>

#include "absl/status/statusor.h"

namespace vllm::bench::iceoryx_internal {

// The largest payload the mempools of our RouDi config hold.
inline constexpr size_t kMaxPayloadBytes = size_t{1} << 20;

// Starts RouDi unless the one this process started still runs; returns the directory that
// holds its config and log (the place for result files). Waits until RouDi is ready.
[[nodiscard]] absl::StatusOr<std::string> EnsureRouDi();

// Stops the RouDi this process started (SIGTERM, then SIGKILL after 15 s) and removes its
// directory. Idempotent.
void StopRouDi();

}  // namespace vllm::bench::iceoryx_internal

#endif  // VLLM_BENCH_IPC_ICEORYX_ROUDI_H_
