#include "frontend/engine/dp_load_balancer.h"

#include <algorithm>
#include <limits>

namespace vllm::frontend {

DpLoadBalancer::DpLoadBalancer(int32_t num_engines, int32_t client_count, int32_t client_index,
                               DpBalancePolicy policy)
    : loads_(std::max(num_engines, 1)),
      own_in_flight_(loads_.size(), 0),
      own_outstanding_(loads_.size(), 0),
      policy_(policy),
      client_count_(std::max(client_count, 1)),
      start_index_(static_cast<int32_t>((int64_t{std::clamp(client_index, 0, client_count_ - 1)} *
                                         static_cast<int64_t>(loads_.size())) /
                                        client_count_)),
      next_start_(start_index_) {}

double DpLoadBalancer::Score(int32_t engine) const {
  const EngineLoad& l = loads_[engine];
  const double queued = static_cast<double>(l.waiting) + l.running;
  const int32_t mine =
      policy_ == DpBalancePolicy::kOutstanding ? own_outstanding_[engine] : own_in_flight_[engine];
  const double own = static_cast<double>(client_count_) * mine;
  return std::max(own, queued) + l.waiting * 6.0 * std::max(0.0, l.kv_cache_usage - 0.5);
}

std::optional<int32_t> DpLoadBalancer::Pick() {
  const int32_t n = num_engines();
  std::optional<int32_t> best;
  double best_score = std::numeric_limits<double>::infinity();
  // vLLM scans from a fixed start, so with sequential requests (each done before the next)
  // every tie goes to the same engine; ours starts after the engine picked last.
  const int32_t start = policy_ == DpBalancePolicy::kVllm ? start_index_ : next_start_;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t e = (start + i) % n;
    if (!loads_[e].alive) continue;
    const double s = Score(e);
    if (s < best_score) {
      best_score = s;
      best = e;
    }
  }
  if (best.has_value()) {
    ++own_in_flight_[*best];
    ++own_outstanding_[*best];
    next_start_ = (*best + 1) % n;
  }
  return best;
}

void DpLoadBalancer::Publish(std::span<const EngineLoad> loads) {
  if (loads.size() != loads_.size()) return;
  loads_.assign(loads.begin(), loads.end());
  std::fill(own_in_flight_.begin(), own_in_flight_.end(), 0);
}

void DpLoadBalancer::Update(int32_t engine, const EngineLoad& load) {
  if (engine < 0 || engine >= num_engines()) return;
  const bool alive = loads_[engine].alive;
  loads_[engine] = load;
  loads_[engine].alive = alive;
  own_in_flight_[engine] = 0;
}

void DpLoadBalancer::Finished(int32_t engine) {
  if (engine < 0 || engine >= num_engines()) return;
  own_outstanding_[engine] = std::max(own_outstanding_[engine] - 1, 0);
}

void DpLoadBalancer::Reset(int32_t engine) {
  if (engine < 0 || engine >= num_engines()) return;
  own_outstanding_[engine] = 0;
  own_in_flight_[engine] = 0;
}

void DpLoadBalancer::SetAlive(int32_t engine, bool alive) {
  if (engine >= 0 && engine < num_engines()) loads_[engine].alive = alive;
}

}  // namespace vllm::frontend
