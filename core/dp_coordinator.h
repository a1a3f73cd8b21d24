// DpCoordinator: the data-parallel coordinator (vLLM's vllm/v1/engine/coordinator.py,
// DPCoordinatorProc), which gathers every engine's load and publishes it to every API server.
//
//   engines  PUSH ──► stats PULL   [ EncodeLoadReport: engine_index, waiting, running,
//                                    kv_cache_usage ] (an engine sends on change)
//   coordinator XPUB publish ──► SUB of each API server
//                                  [ EncodeLoadPublication: sequence, publish time, one
//                                    (waiting, running, kv_cache_usage, reported) per engine ]
//
// A publication goes out when some figure changed, at most once per `publish_interval`
// (≈100 ms, as vLLM), and at once to a new subscriber (an API server that starts late sees the
// figures without waiting for a change). The publish time is the coordinator's monotonic
// clock (CLOCK_MONOTONIC, comparable between processes of one node: the benchmark measures
// publish-to-subscriber latency with it).
//
// Not done yet (the wave/lockstep part): the request wave (START_DP_WAVE) and its
// idle/running state; the product does not start the coordinator yet — the API server takes
// each engine's figures from its outputs (frontend/engine_core_client.h) until several API
// servers share the engines.
//
// Thread-safety: Run() on one thread; Stop() from any thread.
#ifndef VLLM_CORE_DP_COORDINATOR_H_
#define VLLM_CORE_DP_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

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
  bool operator==(const EngineLoadReport&) const = default;
};

struct PublishedEngineLoad {
  int32_t waiting = 0;
  int32_t running = 0;
  double kv_cache_usage = 0.0;
  bool reported = false;  // false until the engine's first report
  bool operator==(const PublishedEngineLoad&) const = default;
};

struct LoadPublication {
  uint64_t sequence = 0;                     // 1, 2, ... per coordinator
  int64_t publish_time_ns = 0;               // the coordinator's CLOCK_MONOTONIC at send time
  std::vector<PublishedEngineLoad> engines;  // index = data-parallel rank
  bool operator==(const LoadPublication&) const = default;
};

std::string EncodeLoadReport(const EngineLoadReport& report);
std::string EncodeLoadPublication(const LoadPublication& publication);
// InvalidArgument naming the field for anything off-schema (bounded: at most kMaxDpEngines
// engines; kv_cache_usage finite in [0, 1]).
[[nodiscard]] absl::StatusOr<EngineLoadReport> DecodeLoadReport(std::string_view bytes);
[[nodiscard]] absl::StatusOr<LoadPublication> DecodeLoadPublication(std::string_view bytes);

struct DpCoordinatorOptions {
  int32_t num_engines = 1;  // 1 .. kMaxDpEngines
  // Where to bind: "ipc://..." or "tcp://host:port" (port 0: a free one; see the endpoints).
  std::string stats_address;
  std::string publish_address;
  absl::Duration publish_interval = absl::Milliseconds(100);
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

  // Gathers and publishes until Stop(). Reports that do not decode (or name an engine out of
  // range) are counted and dropped, never fatal.
  [[nodiscard]] absl::Status Run();
  void Stop();

  // Counters (for tests and the benchmark; read after Run() returned, or racy).
  uint64_t reports_received() const;
  uint64_t reports_dropped() const;
  uint64_t publications_sent() const;

 private:
  class Impl;
  explicit DpCoordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_DP_COORDINATOR_H_
