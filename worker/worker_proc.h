// WorkerProc: the body of one worker process (vLLM's WorkerProc.worker_main /
// worker_busy_loop). Started by MultiprocExecutor as `vllm-launch worker-proc FLAGS...`.
//
// Start-up: die with the parent (PR_SET_PDEATHSIG, then a check that the parent is still the
// one that started us), attach to the broadcast queue as reader `rank`, create this rank's
// response queue, join the tensor-parallel group, load the model, then send a ReadyMessage
// (worker_protocol.h) — or the error that stopped it — to the executor's ready address.
// Busy loop: dequeue a call, run it, reply; the queue's wait strategy blocks when idle, so an
// idle worker uses no CPU. Ends with exit code 0 on a `shutdown` call, when the executor
// closes the queue, or on SIGTERM; 1 when start-up fails or the executor dies.
//
// Flags (all required unless a default is given):
//   --rank R --broadcast-handle TEXT --ready-address ADDR --parent-pid PID --config-fd FD
//   [--comm-spec TEXT] (required when the world size is above 1) [--startup-timeout-s SECONDS]
//   [--node-address HOST] [--cluster-key-file PATH]
// Across nodes (the config's nnodes > 1): a rank on a node other than the head's reads the
// broadcast over TCP and answers on a queue that the executor reads over TCP, bound on
// --node-address; a pipeline stage whose next stage is on another node does the same with its
// stage queue; every such socket is CURVE with the key of --cluster-key-file when given.
// The engine's resolved VllmConfig arrives on descriptor FD (config/config_codec.h); the world
// size is its tensor × pipeline parallel size.
#ifndef VLLM_WORKER_WORKER_PROC_H_
#define VLLM_WORKER_WORKER_PROC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"
#include "worker/worker.h"

namespace vllm::worker {

struct WorkerProcOptions {
  int32_t rank = 0;
  std::string broadcast_handle;  // ipc::Handle::ToText()
  std::string ready_address;     // ZMQ endpoint the executor PULLs from
  std::string comm_spec;         // CommGroupSpec::Encode(); empty when world_size == 1
  int64_t parent_pid = 0;
  absl::Duration startup_timeout = absl::Minutes(10);
  // This rank's node as other nodes reach it: where its TCP queues (responses to a remote
  // executor, hidden states to a stage on another node) and its gloo device listen.
  std::string node_address = "127.0.0.1";
  // The cluster key file (ipc/curve.h) for every TCP socket between nodes; empty: plain TCP.
  std::string cluster_key_file;
  // The engine's resolved config (not a flag: read from --config-fd).
  config::VllmConfig config;

  int32_t world_size() const { return config.parallel.world_size(); }
};

// The subcommand's name on the vllm-launch command line.
inline constexpr char kWorkerProcSubcommand[] = "worker-proc";

// Flags <-> options. ToWorkerProcFlags leaves `config` out (the caller passes it on descriptor
// config::kConfigFd). Parsing reads and decodes the config from --config-fd and rejects unknown
// flags, missing values and out-of-range numbers with InvalidArgument naming the flag.
std::vector<std::string> ToWorkerProcFlags(const WorkerProcOptions& options);
[[nodiscard]] absl::StatusOr<WorkerProcOptions> ParseWorkerProcFlags(
    const std::vector<std::string>& flags);

// Runs the worker process to its end and returns the exit code. Logs to stderr.
int RunWorkerProc(const WorkerProcOptions& options);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_WORKER_PROC_H_
