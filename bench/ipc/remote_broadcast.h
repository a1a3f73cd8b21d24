// The executor's broadcast step measured across a network: one writer, one reader, on our
// MessageQueue (shared memory, or TCP to a remote reader), ZeroMQ PUB/SUB over TCP and a raw TCP
// socket (the floor). remote_broadcast_bench.cc runs these beside each other.
//
// The exchange, identical for every transport (as bench/ipc/ipc_peers.h's):
//   * the writer (the calling process) sends a message of `payload_bytes` (>= 8; its first 8
//     bytes carry a sequence number, the rest a fixed pattern);
//   * the reader, a separate process, reads every byte of it once with TouchBytes()
//     (bench_util.h), in place where the message landed, and replies with 64 bytes carrying the
//     sequence number and that sum;
//   * the writer checks the reply (a lost, stale or corrupt message fails the run). One round
//     trip is timed from just before the send to the moment the writer holds the reply.
//
// Readers are this binary re-executed (`<exe> reader <kind> ...`, RunRemoteBroadcastReader):
// a ZeroMQ context must not cross a fork. A remote reader is started as
// `ip netns exec <namespace> <exe> reader ...`. Every wait on either side has a deadline, a
// reader dies with the writer (PR_SET_PDEATHSIG), and every error path kills and reaps it.
//
// Not thread-safe: call from one thread of a process with no other thread inside a fork.
#ifndef VLLM_BENCH_IPC_REMOTE_BROADCAST_H_
#define VLLM_BENCH_IPC_REMOTE_BROADCAST_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::bench {

enum class BroadcastTransport {
  // ipc::MessageQueue broadcast, the reply on a second MessageQueue written by the reader (the
  // executor's rpc_broadcast_mq and worker_response_mq). Local: both through shared memory.
  // Remote: both over TCP (each queue's only reader is remote: local_reader_ranks = {}).
  kMessageQueue,
  // ZeroMQ: writer XPUB -> reader SUB over TCP (the writer counts the subscription before
  // sending: no slow-joiner loss), reply reader PUSH -> writer PULL.
  kZmq,
  // One TCP connection, TCP_NODELAY on both ends, blocking send/recv of whole messages: the
  // floor any TCP transport pays.
  kRawTcp,
};

// Where the reader runs and which addresses the two sides use.
struct ReaderPlacement {
  std::string exe;  // absolute path of this binary (not /proc/self/exe: `ip` would resolve it)
  // Network namespace of the reader; empty: the writer's own.
  std::string netns;
  // For kMessageQueue only: false = shared memory both ways (hosts unused).
  bool remote = true;
  std::string writer_host;  // an address of the writer's node the reader can reach
  std::string reader_host;  // an address of the reader's node the writer can reach
};

struct RemoteRoundTripConfig {
  size_t payload_bytes = 64;  // >= 8
  int warmup = 100;           // untimed round trips first (>= 0)
  int max_iterations = 1000;  // timed round trips, at most (>= 1)
  // Timing stops after this long even short of max_iterations (at least one is timed).
  absl::Duration budget = absl::Seconds(2);
};

// Runs one session: starts the reader, connects, warms up, times round trips, shuts the reader
// down cleanly. Returns the duration of each timed round trip in nanoseconds. Errors: the
// reader failed to start or died (naming its exit status), a wait passed its deadline
// (DeadlineExceeded naming what was awaited), a reply did not match (DataLoss).
[[nodiscard]] absl::StatusOr<std::vector<double>> RemoteBroadcastRoundTrip(
    BroadcastTransport transport, const ReaderPlacement& placement,
    const RemoteRoundTripConfig& config);

// main() of a reader process; argv[1] == "reader". Returns the exit code.
int RunRemoteBroadcastReader(int argc, char** argv);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_IPC_REMOTE_BROADCAST_H_
