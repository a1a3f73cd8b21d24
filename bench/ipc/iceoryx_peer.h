// Eclipse iceoryx (2.0, Debian's libiceoryx-posh-dev) as a peer of our MessageQueue in
// ipc_bench: the exchange of bench/ipc/ipc_peers.h over iceoryx publish/subscribe with zero-copy
// loans.
//
//   * The writer loans a chunk from iceoryx's shared-memory pool (UntypedPublisher::loan),
//     writes the payload into it (one copy, as our queue's Enqueue makes), stamps the sequence
//     number and publish()es it to N subscribers. Nothing is copied on the way: each reader
//     take()s a pointer into the same chunk, TouchBytes() it in place and release()s it.
//   * Replies: one reply publisher per reader (topic "reply-<r>"); the writer holds N reply
//     subscribers. Each reply is a 64-byte loaned chunk: {reader, seq, checksum, 0...}.
//   * Flow control: publishers WAIT_FOR_CONSUMER, subscribers BLOCK_PRODUCER, so a full queue
//     blocks the writer instead of dropping (iceoryx's default is to drop the oldest sample).
//     Round trips use a subscriber queue of 2; streams min(256, max(2, 64 MiB / payload)).
//   * Waiting: kWaitSet blocks in an iceoryx WaitSet (the subscriber's HAS_DATA state attached),
//     the usual way to use iceoryx; kBusyPoll spins on take() (pause; sched_yield() every 256
//     empty polls so that oversubscribed cores still make progress). Writer and readers use the
//     same strategy.
//
// Processes: every writer and reader is this binary re-executed
// (`<exe> iox-child writer|reader ...`, see RunIceoryxChild), so each gets a fresh iceoryx
// runtime with a unique name ("vllm-bench-w-<pid>", "vllm-bench-r<r>-<pid>") and unregisters
// from RouDi when it exits normally. The calling process never registers with RouDi. The writer
// process forks its readers, then runs a handshake: it publishes probe messages (sequence number
// ~0) every millisecond until every reader has answered one on its reply topic, since a
// subscription's state cannot tell (with iceoryx's many-to-many ports it reads SUBSCRIBED
// before the publisher has attached the subscriber's queue); readers answer and skip probes.
// Then it measures and hands its figures back to the caller through a file.
//
// RouDi: the first measurement starts `iox-roudi` (found in PATH) with a config written to
// /tmp/vllm-ipc-bench-iox-<pid>/roudi.toml (mempools sized for payloads up to 1 MiB plus the
// replies), and waits, with a deadline, until its log says it is ready. It runs until
// StopIceoryxRouDi() or process exit (atexit), and is also stopped (SIGTERM) when this process
// gets SIGINT, SIGTERM or SIGHUP, or dies (PR_SET_PDEATHSIG). Before starting, RouDis left by an
// earlier run (their command line names a /tmp/vllm-ipc-bench-iox-* config) are stopped and
// stale directories removed; RouDi itself purges stale /dev/shm/iceoryx_mgmt and its socket.
// A RouDi not started by this benchmark makes the start fail with a message that says so.
//
// Payloads: 8 bytes to 1 MiB. Without iceoryx at configure time (no VLLM_HAVE_ICEORYX), every
// measurement returns Unavailable and IceoryxUnavailableReason() says why.
#ifndef VLLM_BENCH_IPC_ICEORYX_PEER_H_
#define VLLM_BENCH_IPC_ICEORYX_PEER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/ipc/ipc_peers.h"

namespace vllm::bench {

enum class IceoryxWait { kWaitSet, kBusyPoll };

// "WaitSet" or "busy poll".
const char* IceoryxWaitName(IceoryxWait wait);

// Empty when the iceoryx rows can run (built with iceoryx and iox-roudi in PATH); otherwise a
// sentence saying why not.
std::string IceoryxUnavailableReason();

// Round trips as ZmqIpcRoundTrip (ns per timed iteration). payload_bytes in [8, 1 MiB].
[[nodiscard]] absl::StatusOr<std::vector<double>> IceoryxRoundTrip(const RoundTripConfig& config,
                                                                   IceoryxWait wait);

// One-way stream as ZmqIpcThroughput. payload_bytes in [8, 1 MiB].
[[nodiscard]] absl::StatusOr<ThroughputResult> IceoryxThroughput(const ThroughputConfig& config,
                                                                 IceoryxWait wait);

// Stops the RouDi this process started, waits for it to exit and removes its directory.
// Idempotent; also runs at exit.
void StopIceoryxRouDi();

// The argv[1] of a re-executed iceoryx writer or reader.
inline constexpr char kIceoryxChildCommand[] = "iox-child";

// main() of a re-executed writer or reader (argv[1] == kIceoryxChildCommand): every binary
// that calls IceoryxRoundTrip or IceoryxThroughput must dispatch to it first thing in main().
// Returns the exit code.
int RunIceoryxChild(int argc, char** argv);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_IPC_ICEORYX_PEER_H_
