// CircuitBreaker: keeps requests away from a worker that keeps failing them (connection
// errors, no answer, 5xx), which health checks alone miss when the worker's /health still
// says OK. sglang-router's rule, plus backoff:
//   closed    — failures are counted over a sliding window; `failure_threshold` of them in
//               `window` opens the circuit;
//   open      — the worker gets no request for the open period (`timeout` at first);
//   half-open — after the period requests flow again: `success_threshold` successes close
//               the circuit (and reset the period), one failure opens it again for twice the
//               previous period (at most `max_timeout`).
// Pure: the caller passes the time, so it is tested without clocks or networks. Not
// thread-safe (the router's one I/O thread owns it).
#ifndef VLLM_ROUTER_CIRCUIT_BREAKER_H_
#define VLLM_ROUTER_CIRCUIT_BREAKER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <string_view>

namespace vllm::router {

struct CircuitBreakerOptions {
  bool enabled = true;
  int failure_threshold = 10;
  int success_threshold = 3;
  std::chrono::milliseconds timeout{60'000};
  std::chrono::milliseconds window{120'000};
  std::chrono::milliseconds max_timeout{600'000};
};

class CircuitBreaker {
 public:
  using Time = std::chrono::steady_clock::time_point;
  enum class State { kClosed, kOpen, kHalfOpen };

  explicit CircuitBreaker(const CircuitBreakerOptions& options = {});

  // The state at `now` (an open circuit whose period passed is half-open).
  State state(Time now) const;
  // Whether a request may go to the worker at `now`.
  bool Allows(Time now) const { return state(now) != State::kOpen; }
  // The outcome of a request sent to the worker. True when this call changed the state
  // between closed and open/half-open (for logging).
  bool RecordSuccess(Time now);
  bool RecordFailure(Time now);

  int64_t opens() const { return opens_; }  // times the circuit opened
  std::chrono::milliseconds open_period() const { return period_; }

 private:
  void Open(Time now);
  void Advance(Time now);  // makes an open circuit whose period passed half-open

  CircuitBreakerOptions options_;
  State state_ = State::kClosed;
  std::deque<Time> failures_;  // closed: failure times within the window
  Time opened_at_{};
  std::chrono::milliseconds period_;
  int half_open_successes_ = 0;
  int64_t opens_ = 0;
};

std::string_view CircuitStateName(CircuitBreaker::State state);

}  // namespace vllm::router

#endif  // VLLM_ROUTER_CIRCUIT_BREAKER_H_
