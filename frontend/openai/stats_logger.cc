#include "frontend/openai/stats_logger.h"

#include <pthread.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "frontend/openai/http_session.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {

std::string StatsLogLine(const StatsLineValues& v) {
  std::string line = absl::StrFormat(
      "Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
      "tokens/s, Running: %d reqs, Waiting: %d reqs, ",
      v.engine_rank, v.prompt_throughput, v.generation_throughput, v.running, v.waiting);
  if (v.preemptions > 0) absl::StrAppendFormat(&line, "Preemptions: %d, ", v.preemptions);
  absl::StrAppendFormat(&line, "%s KV cache usage: %.1f%%", v.kv_cache_device,
                        v.kv_cache_usage * 100);
  if (v.prefix_hit_rate.has_value()) {
    absl::StrAppendFormat(&line, ", Prefix cache hit rate: %.1f%%", *v.prefix_hit_rate * 100);
  }
  return line;
}

namespace api_server_internal {

// What the last line of an engine counted from.
struct StatsLogger::EngineState {
  double prompt_tokens = 0, generation_tokens = 0;
  int64_t preemptions = 0;
  double last_prompt_throughput = 0, last_generation_throughput = 0;
};

StatsLogger::StatsLogger(std::shared_ptr<ServerContext> ctx) : ctx_(std::move(ctx)) {
  engines_.resize(static_cast<size_t>(ctx_->metrics.num_engines()));
  for (size_t i = 0; i < engines_.size(); ++i) {
    const EngineMetrics& m = ctx_->metrics.engine(static_cast<int32_t>(i));
    engines_[i].prompt_tokens = m.prompt_tokens_by_source[0]->value();
    engines_[i].generation_tokens = m.generation_tokens->value();
  }
  thread_ = std::thread([this] { Run(); });
  pthread_setname_np(thread_.native_handle(), "api-stats");
}

StatsLogger::~StatsLogger() { Stop(); }

void StatsLogger::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StatsLogger::Run() {
  const absl::Duration interval = absl::Seconds(ctx_->options.http.log_stats_interval_s);
  auto last = std::chrono::steady_clock::now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) return;
    }
    const auto now = std::chrono::steady_clock::now();
    LogOnce(std::chrono::duration<double>(now - last).count());
    last = now;
  }
}

void StatsLogger::LogOnce(double elapsed_s) {
  for (const EngineStatus& e : ctx_->engine->Engines()) {
    if (e.index < 0 || static_cast<size_t>(e.index) >= engines_.size()) continue;
    EngineState& s = engines_[static_cast<size_t>(e.index)];
    const EngineMetrics& m = ctx_->metrics.engine(e.index);
    const double prompt = m.prompt_tokens_by_source[0]->value();  // computed, not cached
    const double generated = m.generation_tokens->value();
    StatsLineValues v;
    v.engine_rank = e.rank;
    v.prompt_throughput = elapsed_s > 0 ? (prompt - s.prompt_tokens) / elapsed_s : 0;
    v.generation_throughput = elapsed_s > 0 ? (generated - s.generation_tokens) / elapsed_s : 0;
    v.running = e.stats.num_requests_running;
    v.waiting = e.stats.num_requests_waiting;
    v.preemptions = e.stats.num_preemptions - s.preemptions;
    v.kv_cache_device = ctx_->options.http.kv_cache_device;
    v.kv_cache_usage = e.stats.kv_cache_usage;
    if (e.stats.prefix_cache_queries > 0) {
      v.prefix_hit_rate = static_cast<double>(e.stats.prefix_cache_hits) /
                          static_cast<double>(e.stats.prefix_cache_queries);
    }
    // vLLM: an engine with no throughput this interval and the last logs at DEBUG.
    const bool idle = v.prompt_throughput == 0 && v.generation_throughput == 0 &&
                      s.last_prompt_throughput == 0 && s.last_generation_throughput == 0;
    spdlog::log(idle ? spdlog::level::debug : spdlog::level::info, "{}", StatsLogLine(v));
    s.prompt_tokens = prompt;
    s.generation_tokens = generated;
    s.preemptions = e.stats.num_preemptions;
    s.last_prompt_throughput = v.prompt_throughput;
    s.last_generation_throughput = v.generation_throughput;
  }
}

}  // namespace api_server_internal
}  // namespace vllm::frontend
