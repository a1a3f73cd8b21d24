// dp_coordinator_bench's trials: one trial is N simulated engines and the API-server
// subscribers against one peer (the coordinator with ZMQ or UDP reports, the relay or the sink)
// running in a re-executed child process. What is measured and how: dp_coordinator_bench.cc.
#ifndef VLLM_BENCH_DP_DP_COORDINATOR_TRIAL_H_
#define VLLM_BENCH_DP_DP_COORDINATOR_TRIAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/bench_util.h"

namespace vllm::bench {

// What the engines report to: the coordinator (ZMQ PUSH or UDP datagrams) or a peer.
enum class Peer { kCoordinator, kRelay, kSink, kCoordinatorUdp };

// The coordinator, whichever transport its reports take.
inline bool IsCoordinator(Peer p) { return p == Peer::kCoordinator || p == Peer::kCoordinatorUdp; }

// The peer's name on the command line and in the tables ("coordinator-udp", ...).
const char* PeerName(Peer p);

// The command line of a run (defaults: the documented run).
struct Config {
  std::vector<int32_t> engines = {64, 256, 1024};
  int32_t subscribers = 8;
  int32_t engine_threads = 1;
  double warmup_s = 1.0;
  double measure_s = 5.0;
  double report_interval_ms = 100.0;
  double publish_interval_ms = 100.0;
  std::vector<Peer> peers = {Peer::kCoordinator, Peer::kCoordinatorUdp, Peer::kRelay, Peer::kSink};
  std::string markdown;
};

// The figures of one trial (N engines, one peer).
struct Trial {
  int32_t engines = 0;
  Peer peer = Peer::kCoordinator;
  double window_s = 0;
  double reports_per_s = 0;
  double messages_per_s = 0;  // per subscriber: publications (coordinator), reports (relay)
  double cpu_pct = 0, main_cpu_pct = 0, cpu_stat_pct = 0, parent_cpu_pct = 0;
  double rss_mib = 0, hwm_mib = 0;
  LatencyStats latency;
  double max_ms = 0;
  uint64_t sent_total = 0, hwm_drops = 0, gaps = 0;
  uint64_t child_received = 0, child_dropped = 0, child_published = 0;
};

// Runs one trial: starts `/proc/self/exe --serve PEER` as the child, connects the
// subscribers and the N engines (ZMQ PUSH sockets, or UDP senders for coordinator-udp), warms
// up, measures one window of `c.measure_s`, stops the engines and waits until every subscriber
// has seen every engine's last report, then stops the child and checks it received every
// report. Returns DataLoss for a bad message at a subscriber or a report the child did not
// get, DeadlineExceeded when a subscriber got nothing or never converged; may throw
// zmq::error_t. Not thread-safe (runs threads of its own and joins them before returning).
absl::StatusOr<Trial> RunTrial(const Config& c, int32_t n, Peer peer);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_DP_DP_COORDINATOR_TRIAL_H_
