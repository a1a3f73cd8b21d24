#include "router/circuit_breaker.h"

#include <algorithm>

namespace vllm::router {

CircuitBreaker::CircuitBreaker(const CircuitBreakerOptions& options)
    : options_(options), period_(options.timeout) {}

CircuitBreaker::State CircuitBreaker::state(Time now) const {
  if (state_ == State::kOpen && now >= opened_at_ + period_) return State::kHalfOpen;
  return state_;
}

void CircuitBreaker::Advance(Time now) {
  if (state_ == State::kOpen && now >= opened_at_ + period_) {
    state_ = State::kHalfOpen;
    half_open_successes_ = 0;
  }
}

void CircuitBreaker::Open(Time now) {
  state_ = State::kOpen;
  opened_at_ = now;
  failures_.clear();
  ++opens_;
}

bool CircuitBreaker::RecordSuccess(Time now) {
  if (!options_.enabled) return false;
  Advance(now);
  if (state_ != State::kHalfOpen) return false;
  if (++half_open_successes_ < options_.success_threshold) return false;
  state_ = State::kClosed;
  period_ = options_.timeout;
  return true;
}

bool CircuitBreaker::RecordFailure(Time now) {
  if (!options_.enabled) return false;
  Advance(now);
  switch (state_) {
    case State::kOpen:  // an answer to a request sent before it opened
      return false;
    case State::kHalfOpen:
      period_ = std::min(period_ * 2, std::max(options_.max_timeout, options_.timeout));
      Open(now);
      return false;  // half-open → open: still not serving
    case State::kClosed:
      failures_.push_back(now);
      while (!failures_.empty() && failures_.front() + options_.window <= now) {
        failures_.pop_front();
      }
      if (static_cast<int>(failures_.size()) < options_.failure_threshold) return false;
      Open(now);
      return true;
  }
  return false;
}

std::string_view CircuitStateName(CircuitBreaker::State state) {
  switch (state) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

}  // namespace vllm::router
