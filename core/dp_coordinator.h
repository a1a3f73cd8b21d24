// DpCoordinator: the data-parallel coordinator (vLLM's vllm/v1/engine/coordinator.py,
// DPCoordinatorProc), which gathers every engine's load and publishes it to every API server,
// and, in lockstep mode, decides the request waves.
//
//   engines  PUSH ──► stats PULL   [ EncodeLoadReport: engine_index, waiting, running,
//                                    kv_cache_usage, timestamp ] (an engine sends on change, at
//                                    most every ~100 ms, at once when it goes from idle to busy)
//   coordinator XPUB publish ──► SUB of each API server
//                                  [ EncodeLoadPublication: sequence, publish time, current
//                                    wave, engines running, one (waiting, running,
//                                    kv_cache_usage, reported, timestamp) per engine ]
//   coordinator XPUB wave ──► SUB of each engine (lockstep only)
//                                  [ EncodeDpWave: wave, running, exclude_engine_index ]
//
// A publication goes out when some figure changed, at most once per `publish_interval`
// (≈100 ms, as vLLM), and at once to a new subscriber (an API server that starts late sees the
// figures without waiting for a change). The publish time is the coordinator's monotonic
// clock (CLOCK_MONOTONIC, comparable between processes of one node: the benchmark measures
// publish-to-subscriber latency with it).
//
// Request waves (vLLM's current_wave / START_DP_WAVE / wave_complete), with `wave_address`
// set: the engines are "running" from the first report of an engine with unfinished requests
// (waiting + running > 0) until every engine's latest report shows none. At the start the
// coordinator sends START_DP_WAVE [wave, true, the engine that reported] on the wave socket
// (that engine already runs); at the end [wave, false, -1] (wave complete), and the next
// wave's number is wave + 1. An engine in lockstep mode runs a dummy step whenever it has no
// work of its own while the wave runs (core/engine_core_proc.h). vLLM decides the end of a
// wave by an all-reduce over the DP ranks every 32 steps and starts one from the client
// (FIRST_REQ) or an engine (start_wave); here the engines' own reports decide both, since
// there is no process group across DP ranks. A new subscriber on the wave socket gets the
// current state at once (an engine that joins during a wave steps with the others). An engine
// with work that goes silent for `engine_timeout` (lockstep engines report every second) is
// taken as gone, so a dead replica does not keep the others stepping for ever.
//
// ipc:// addresses (one node) follow the socket rules of docs/DECISIONS.md: the coordinator
// unlinks its socket files once every engine has reported and every expected subscriber has
// subscribed (each proved by a message). TCP sockets (several nodes) stay open, optionally
// CURVE with the cluster key.
//
// Report datagrams (several nodes): the coordinator takes the engines' reports as UDP
// datagrams instead of through a ZMQ socket (`udp_stats_address`; at 1024 engines ZMQ's receive
// path alone cost more than the 5 % of a core budget, docs/BENCHMARKS.md). A datagram is
// EncodeLoadReport's bytes, an 8-byte sequence number (little-endian, strictly increasing per
// engine: its CLOCK_REALTIME in ns, or the last + 1) and a 16-byte MAC over both (keyed
// BLAKE2b, libsodium's crypto_generichash) with the run's report key: kReportKeyBytes random
// bytes the coordinator makes at start, which reach the engines in CONFIG (CURVE-encrypted with
// the cluster key). The coordinator drops, counting, a datagram whose MAC does not verify or
// whose sequence is not above the last it took from that engine (a replay).
//
// The product starts it as its own process on the head when -dp > 1 (`vllm-launch
// dp-coordinator`, launcher/dp_coordinator_main.h).
//
// Thread-safety: Run() on one thread; Stop() from any thread.
#ifndef VLLM_CORE_DP_COORDINATOR_H_
#define VLLM_CORE_DP_COORDINATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ipc/curve.h"

namespace zmq {
class context_t;
}

namespace vllm::core {

// Most engines one coordinator takes (and a publication may hold).
inline constexpr int32_t kMaxDpEngines = 4096;

struct EngineLoadReport {
  int32_t engine_index = 0;     // 0 .. kMaxDpEngines - 1
  int32_t waiting = 0;          // >= 0
  int32_t running = 0;          // >= 0
  double kv_cache_usage = 0.0;  // in [0, 1]
  // When the engine took the figures: its wall clock in seconds, as EngineCoreOutputs'
  // timestamp (an API server compares the two to keep the newer figures). Finite, >= 0.
  double timestamp = 0.0;
  bool operator==(const EngineLoadReport&) const = default;
};

struct PublishedEngineLoad {
  int32_t waiting = 0;
  int32_t running = 0;
  double kv_cache_usage = 0.0;
  bool reported = false;   // false until the engine's first report
  double timestamp = 0.0;  // the report's
  bool operator==(const PublishedEngineLoad&) const = default;
};

struct LoadPublication {
  uint64_t sequence = 0;                     // 1, 2, ... per coordinator
  int64_t publish_time_ns = 0;               // the coordinator's CLOCK_MONOTONIC at send time
  int32_t current_wave = 0;                  // >= 0 (waves: the running or next wave)
  bool engines_running = false;              // waves: a wave is running
  std::vector<PublishedEngineLoad> engines;  // index = data-parallel rank
  bool operator==(const LoadPublication&) const = default;
};

// Coordinator → engines on the wave socket: START_DP_WAVE (running) or wave complete.
struct DpWave {
  int32_t wave = 0;                   // >= 0
  bool running = false;               // true: START_DP_WAVE; false: `wave` completed
  int32_t exclude_engine_index = -1;  // START_DP_WAVE: the engine that started it, or -1
  bool operator==(const DpWave&) const = default;
};

// Report datagrams (see the top of this file).
inline constexpr size_t kReportKeyBytes = 32;
inline constexpr size_t kReportMacBytes = 16;
inline constexpr size_t kMaxReportDatagram = 128;  // a sealed report is < 96 bytes
// kReportKeyBytes random bytes (libsodium's randombytes_buf); Internal if libsodium cannot start.
[[nodiscard]] absl::StatusOr<std::string> NewReportKey();
// A report key from its 2 × kReportKeyBytes hex digits (as written by absl::BytesToHexString);
// nullopt for anything else.
std::optional<std::string> ReportKeyFromHex(std::string_view hex);
// `report` (EncodeLoadReport's bytes) + sequence + MAC. `key`: kReportKeyBytes bytes.
std::string SealReportDatagram(std::string_view report, uint64_t sequence, std::string_view key);
struct OpenedReportDatagram {
  std::string_view report;  // into the datagram: EncodeLoadReport's bytes (not yet decoded)
  uint64_t sequence = 0;
};
// InvalidArgument for a datagram of the wrong size or whose MAC does not verify with `key`.
[[nodiscard]] absl::StatusOr<OpenedReportDatagram> OpenReportDatagram(std::string_view datagram,
                                                                      std::string_view key);

// An engine's sender of report datagrams to "udp://IPv4:port" or "udp://[IPv6]:port".
// Not thread-safe.
class ReportDatagramSender {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ReportDatagramSender>> Create(
      std::string_view endpoint, std::string key);
  ~ReportDatagramSender();
  ReportDatagramSender(const ReportDatagramSender&) = delete;
  ReportDatagramSender& operator=(const ReportDatagramSender&) = delete;
  // Seals and sends one report; never blocks. False when it was not sent (socket buffer full,
  // or the network said no: the next report replaces it).
  bool Send(std::string_view report);

 private:
  ReportDatagramSender(int fd, std::string key) : fd_(fd), key_(std::move(key)) {}
  int fd_;
  std::string key_;
  uint64_t last_sequence_ = 0;
};

std::string EncodeLoadReport(const EngineLoadReport& report);
std::string EncodeLoadPublication(const LoadPublication& publication);
std::string EncodeDpWave(const DpWave& wave);
// InvalidArgument naming the field for anything off-schema (bounded: at most kMaxDpEngines
// engines; kv_cache_usage finite in [0, 1]).
[[nodiscard]] absl::StatusOr<EngineLoadReport> DecodeLoadReport(std::string_view bytes);
[[nodiscard]] absl::StatusOr<LoadPublication> DecodeLoadPublication(std::string_view bytes);
[[nodiscard]] absl::StatusOr<DpWave> DecodeDpWave(std::string_view bytes);

struct DpCoordinatorOptions {
  int32_t num_engines = 1;  // 1 .. kMaxDpEngines
  // Where to bind: "ipc://..." or "tcp://host:port" (port 0: a free one; see the endpoints).
  // stats_address may be empty with udp_stats_address set.
  std::string stats_address;
  std::string publish_address;
  // Request waves for lockstep engines: where to bind the wave XPUB; empty: no waves.
  std::string wave_address;
  absl::Duration publish_interval = absl::Milliseconds(100);
  // ipc:// only: the socket files are unlinked once every engine has reported, this many
  // subscribers have subscribed to the publications, and (with waves) every engine to the
  // wave socket. 0: never unlinked (tests, the benchmark).
  int32_t expected_subscribers = 0;
  // TCP: CURVE servers with the cluster key (clients must hold it).
  std::optional<ipc::CurveKeys> curve;
  // Waves: an engine with work that sent no report for this long is taken as gone (it died,
  // or its node did), so the wave can complete without it. Lockstep engines report at least
  // every second. Zero: never.
  absl::Duration engine_timeout = absl::Seconds(10);
  // Also take reports as sealed datagrams (SealReportDatagram with `report_key`, which must
  // then be kReportKeyBytes bytes) at "IPv4:port" or "[IPv6]:port" (port 0: a free one), read
  // with recvmmsg; held in the socket until a publication is due when its receive buffer has
  // room for every engine's reports. `stats_address` may then be empty (no ZMQ report socket).
  std::string udp_stats_address;
  std::string report_key;
  // The ZMQ context for the sockets (nullptr: ipc::ZmqContext()).
  zmq::context_t* context = nullptr;
};

class DpCoordinator {
 public:
  // Binds both sockets. Errors: an address that cannot be bound, num_engines out of range.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DpCoordinator>> Create(
      const DpCoordinatorOptions& options);
  ~DpCoordinator();

  // The bound endpoints (with the port chosen for port 0).
  const std::string& stats_endpoint() const;
  const std::string& publish_endpoint() const;
  const std::string& wave_endpoint() const;       // empty without waves
  const std::string& udp_stats_endpoint() const;  // "udp://host:port"; empty without

  // Gathers and publishes until Stop(). Reports that do not decode (or name an engine out of
  // range; datagrams: a bad MAC or a replayed sequence) are counted and dropped, never fatal.
  [[nodiscard]] absl::Status Run();
  void Stop();

  // Counters (for tests and the benchmark; read after Run() returned, or racy).
  uint64_t reports_received() const;
  uint64_t reports_dropped() const;
  uint64_t publications_sent() const;
  uint64_t waves_started() const;
  uint64_t waves_completed() const;

 private:
  class Impl;
  explicit DpCoordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_DP_COORDINATOR_H_
