// Our MessageQueue measured with the exchange bench/ipc/ipc_peers.h defines for every transport:
// the writer (this process) broadcasts to N reader processes, each reads every byte once
// (TouchBytes) and answers with a 64-byte reply on its own response MessageQueue — the shape of
// an engine core and its workers (vLLM's rpc_broadcast_mq + worker_response_mq).
//
// Readers are this binary re-executed (`<exe> shm-reader ...`, see RunShmQueueReader): a
// ZeroMQ context must not cross a fork, so a fresh image is the honest way to get a peer.
#ifndef VLLM_BENCH_IPC_SHM_QUEUE_BENCH_H_
#define VLLM_BENCH_IPC_SHM_QUEUE_BENCH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/bench_util.h"
#include "bench/ipc/ipc_peers.h"

namespace vllm::bench {

// Round trips through our queue; ns per timed iteration (as ZmqIpcRoundTrip).
[[nodiscard]] absl::StatusOr<std::vector<double>> ShmQueueRoundTrip(const RoundTripConfig& config);

// One-way stream of `messages` messages (as ZmqIpcThroughput): each reader touches every byte
// and acks once at the end with its count and checksum, which the writer verifies.
[[nodiscard]] absl::StatusOr<ThroughputResult> ShmQueueThroughput(const ThroughputConfig& config);

struct WakeupResult {
  double idle_cpu_percent = 0;      // reader blocked on an empty queue for `idle`
  double periodic_cpu_percent = 0;  // reader fed one 64 B message every `period`
  LatencyStats wakeup;              // write → reader has the message, at that rate
  int messages = 0;
};

// How an idle and a slowly fed reader wait: CPU of the reader process (from /proc) over an idle
// stretch and over `messages` messages sent every `period`, and the wake-up latency of each.
[[nodiscard]] absl::StatusOr<WakeupResult> ShmQueueWakeup(absl::Duration idle,
                                                          absl::Duration period, int messages);

// main() of a reader process; argv[1] == "shm-reader". Returns the exit code.
int RunShmQueueReader(int argc, char** argv);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_IPC_SHM_QUEUE_BENCH_H_
