// A worker node of a multi-node engine: `vllm-launch MODEL -tp T -pp P --nnodes N --node-rank R
// --master-addr A --master-port M --headless` with R > 0 (vLLM's headless multiproc executor,
// run_headless with node_rank_within_dp > 0). It runs no engine core and no API server: it
// joins the head's NodeServer (executor/node_server.h) with HELLO, receives the engine's config
// and queue handles (or a REJECT naming the flag that differs), spawns its block of worker ranks
// (R × local world size ..), makes the TP groups that lie wholly on this node, and supervises
// them: it reports a rank that exits, sends heartbeats, and stops its ranks when the head says
// STOP, goes silent for the heartbeat timeout, or every rank has ended. Then it joins again, so
// a restarted head (or one behind a healed partition) gets its node back; SIGINT / SIGTERM stop
// it, and so does a silent head with --no-rejoin-head.
//
// Start-up errors name the flag: a REJECT (--nnodes, --node-rank, sizes, --model), or no answer
// within VLLM_ENGINE_READY_TIMEOUT_S (--master-addr / --master-port / --cluster-key-file).
#ifndef VLLM_LAUNCHER_WORKER_NODE_H_
#define VLLM_LAUNCHER_WORKER_NODE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {

// True for the flags of a worker node (nnodes > 1, this node's rank within its engine > 0).
bool IsWorkerNode(const ServeArgs& args);

// Runs the worker node until a signal stops it (OK), a start-up error (the flag's), or (with
// --no-rejoin-head) the head going silent.
[[nodiscard]] absl::Status ServeWorkerNode(const ServeArgs& args);

// The address of this node on the route to `host` (the source address of a UDP socket connected
// there; nothing is sent): what the head and the other nodes reach this node's sockets at.
[[nodiscard]] absl::StatusOr<std::string> LocalAddressTowards(const std::string& host, int port);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_WORKER_NODE_H_
