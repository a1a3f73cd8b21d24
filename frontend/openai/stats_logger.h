// vLLM's LoggingStatLogger in the API server (vllm/v1/metrics/loggers.py): every
// HttpOptions::log_stats_interval_s, one line per engine of this server from what /metrics
// shows (the engines' scheduler stats, the server's token counters):
//   Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s,
//   Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 50.0%
// at INFO, or DEBUG while the engine was idle this interval and the last (as vLLM). Off with
// --disable-log-stats.
#ifndef VLLM_FRONTEND_OPENAI_STATS_LOGGER_H_
#define VLLM_FRONTEND_OPENAI_STATS_LOGGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace vllm::frontend {

// One interval of one engine, as the line shows it.
struct StatsLineValues {
  int32_t engine_rank = 0;
  double prompt_throughput = 0;      // prompt tokens computed (not cached) per second
  double generation_throughput = 0;  // tokens per second
  int32_t running = 0, waiting = 0;
  int64_t preemptions = 0;                // this interval; shown when > 0
  std::string kv_cache_device = "GPU";    // vLLM: GPU for cuda, else the device in capitals
  double kv_cache_usage = 0;              // 0 .. 1
  std::optional<double> prefix_hit_rate;  // 0 .. 1; none before any lookup
};
std::string StatsLogLine(const StatsLineValues& v);

namespace api_server_internal {

struct ServerContext;

// Logs every interval on its own thread ("api-stats") until Stop() or destruction.
class StatsLogger {
 public:
  explicit StatsLogger(std::shared_ptr<ServerContext> ctx);
  ~StatsLogger();
  void Stop();

 private:
  struct EngineState;
  void Run();
  void LogOnce(double elapsed_s);

  std::shared_ptr<ServerContext> ctx_;
  std::vector<EngineState> engines_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace api_server_internal
}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_STATS_LOGGER_H_
