// Peer and limit measurements for the IPC benchmark: the same broadcast exchange as our
// shared-memory MessageQueue, run over ZeroMQ ipc:// and boost::interprocess::message_queue,
// plus two hardware floors (a cache-line ping-pong between two processes and single-thread
// memcpy bandwidth). bench/ipc/ipc_bench_main.cc runs these beside our queue and prints ratios.
//
// The exchange, identical for every transport:
//   * the writer (the calling process) broadcasts a payload of `payload_bytes` to N reader
//     processes (forked children, see ChildProcess);
//   * each reader, on receiving a message, reads every byte of it once with
//     TouchBytes() (bench_util.h: sums it as 8-byte words, in place where the message landed;
//     no extra copy) and replies with a 64-byte message on a response channel carrying that
//     sum and the message's sequence number;
//   * the writer waits for all N replies and checks each one (sequence number and sum), so a
//     lost, stale or corrupted message fails the run instead of skewing it.
// The first 8 bytes of each payload carry its sequence number, so payload_bytes must be >= 8.
//
// Every function forks its readers, creates and removes its own channels (nothing is left in
// /dev/shm or the file system), bounds every wait in the writer (60 s without progress, or a
// reader dying, fails the call) and kills its children on every error path. None is
// thread-safe with respect to fork: call them from a process that has no other thread inside a
// ZeroMQ or Boost.Interprocess call. Errors come back as absl::Status, never as exceptions.
#ifndef VLLM_BENCH_IPC_IPC_PEERS_H_
#define VLLM_BENCH_IPC_IPC_PEERS_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::bench {

// The 64-byte message a reader sends back (ZeroMQ, Boost and iceoryx rows): after each message
// in the round-trip tests (`seq` of that message, its TouchBytes sum), once at the end of a
// stream (`seq` = messages received, `checksum` = sum of their sums).
struct PeerReply {
  uint64_t reader;
  uint64_t seq;
  uint64_t checksum;
  uint64_t reserved[5];
};
static_assert(sizeof(PeerReply) == 64);

// One round-trip measurement: `warmup` untimed exchanges, then `iterations` timed ones.
struct RoundTripConfig {
  size_t payload_bytes = 64;  // >= 8
  int n_readers = 1;          // 1..64
  int iterations = 1000;      // >= 1
  int warmup = 200;           // >= 0
};

// Each returns the duration of every timed round trip in nanoseconds: from just before the
// writer starts sending (after it has stamped the sequence number) to when it holds all N
// replies. Timestamps are chained (one clock read per iteration).
//
// ZeroMQ: the writer's XPUB socket (XPUB_VERBOSE, so the writer counts the N subscriptions
// before sending anything: no slow-joiner loss, no sleeps) bound to an abstract-namespace
// ipc:// endpoint, readers' SUB sockets; replies over PUSH (readers) -> PULL (writer). Each
// message is sent with a copy into a zmq message (zmq::buffer), received into ZeroMQ's buffer.
[[nodiscard]] absl::StatusOr<std::vector<double>> ZmqIpcRoundTrip(const RoundTripConfig& config);

// boost::interprocess::message_queue: one request queue per reader (the writer sends N copies,
// one per queue) and one shared reply queue. Readers receive into a private heap buffer (the
// queue's copy-out), then TouchBytes() it. Boost 1.74 locks a queue's mutex without a timeout
// even in its timed calls, and the mutex is not robust; ipc_peers.cc enables Boost's
// BOOST_INTERPROCESS_ENABLE_TIMEOUT_WHEN_LOCKING (10 s) so that a reader killed while holding
// it fails the call instead of hanging the writer; it costs one calendar-clock read (about
// 60 ns) per lock on both sides.
[[nodiscard]] absl::StatusOr<std::vector<double>> BoostMqRoundTrip(const RoundTripConfig& config);

// The hardware floor for two hops: the writer and one forked child bounce one value in one
// shared cache line (std::atomic<uint64_t>, both sides spinning, release stores and acquire
// loads). Returns ns per round trip for each timed iteration (including one clock read, about
// 20 ns). `iterations` >= 1, `warmup` >= 0.
[[nodiscard]] absl::StatusOr<std::vector<double>> CacheLinePingPong(int iterations, int warmup);

struct ThroughputConfig {
  size_t payload_bytes = 64;  // >= 8
  int n_readers = 1;          // 1..64
  int messages = 10000;       // >= 1
};

struct ThroughputResult {
  double messages_per_s = 0;
  // Payload bytes delivered to ONE reader per second, in GB/s (1e9 bytes).
  double gb_per_s = 0;
};

// One-way stream: the writer sends `messages` messages back to back, with whatever flow control
// the transport provides; every reader TouchBytes() each message, checks that sequence numbers
// arrive in order without gaps, and sends one ack at the end carrying its count and the sum of
// its checksums, which the writer verifies. Timed from the first send to the last ack. Readers
// are started and connected before the clock starts.
//
// ZeroMQ: as in ZmqIpcRoundTrip, with XPUB_NODROP set and a high-water mark bounding the queued
// bytes to about 64 MiB per reader, so a full pipe blocks the writer instead of dropping.
[[nodiscard]] absl::StatusOr<ThroughputResult> ZmqIpcThroughput(const ThroughputConfig& config);

// boost::interprocess::message_queue as in BoostMqRoundTrip; each request queue holds
// min(64, max(2, 64 MiB / payload_bytes)) messages, and the writer blocks when one is full.
[[nodiscard]] absl::StatusOr<ThroughputResult> BoostMqThroughput(const ThroughputConfig& config);

// Single-thread memcpy bandwidth: copies `block_bytes` blocks from one source buffer into a
// ring of destination slots totalling `working_set_bytes` (at least one slot), slot after slot,
// for at least `min_seconds` after one untimed lap, so the footprint matches a ring buffer of
// that size. Returns GB/s (1e9 bytes) copied, or 0 if block_bytes == 0. Buffers are page-aligned
// and pre-faulted.
double MemcpyBandwidthGBps(size_t block_bytes, size_t working_set_bytes, double min_seconds);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_IPC_IPC_PEERS_H_
