// The circuit breaker's states over a simulated clock.
#include "router/circuit_breaker.h"

#include "gtest/gtest.h"

namespace vllm::router {
namespace {

using State = CircuitBreaker::State;
using std::chrono::milliseconds;
using std::chrono::seconds;

const CircuitBreaker::Time kT0 = CircuitBreaker::Time() + seconds(1000);

CircuitBreakerOptions Options() {
  CircuitBreakerOptions o;
  o.failure_threshold = 3;
  o.success_threshold = 2;
  o.timeout = seconds(10);
  o.window = seconds(60);
  o.max_timeout = seconds(35);
  return o;
}

TEST(CircuitBreakerTest, OpensAfterThresholdFailuresWithinTheWindow) {
  CircuitBreaker cb(Options());
  EXPECT_FALSE(cb.RecordFailure(kT0));
  EXPECT_FALSE(cb.RecordFailure(kT0 + seconds(70)));  // the first one left the window
  EXPECT_FALSE(cb.RecordFailure(kT0 + seconds(71)));
  EXPECT_TRUE(cb.Allows(kT0 + seconds(71)));
  EXPECT_TRUE(cb.RecordFailure(kT0 + seconds(72)));  // three within 60 s
  EXPECT_EQ(cb.state(kT0 + seconds(72)), State::kOpen);
  EXPECT_FALSE(cb.Allows(kT0 + seconds(81)));
  EXPECT_EQ(cb.opens(), 1);
  // Successes while closed change nothing; failures while open are late answers: ignored.
  EXPECT_FALSE(cb.RecordFailure(kT0 + seconds(75)));
  EXPECT_EQ(cb.opens(), 1);
}

TEST(CircuitBreakerTest, HalfOpenClosesAfterSuccessesOrReopensWithBackoff) {
  CircuitBreaker cb(Options());
  for (int i = 0; i < 3; ++i) cb.RecordFailure(kT0);
  EXPECT_EQ(cb.state(kT0 + seconds(9)), State::kOpen);
  EXPECT_EQ(cb.state(kT0 + seconds(10)), State::kHalfOpen);
  // A failure in half-open: open again for twice the period (20 s), then 35 s (the cap).
  cb.RecordFailure(kT0 + seconds(10));
  EXPECT_EQ(cb.open_period(), seconds(20));
  EXPECT_FALSE(cb.Allows(kT0 + seconds(29)));
  EXPECT_TRUE(cb.Allows(kT0 + seconds(30)));
  cb.RecordFailure(kT0 + seconds(30));
  EXPECT_EQ(cb.open_period(), seconds(35));
  EXPECT_FALSE(cb.Allows(kT0 + seconds(64)));
  EXPECT_TRUE(cb.Allows(kT0 + seconds(65)));
  // Two successes close it and reset the period.
  EXPECT_FALSE(cb.RecordSuccess(kT0 + seconds(65)));
  EXPECT_TRUE(cb.RecordSuccess(kT0 + seconds(66)));
  EXPECT_EQ(cb.state(kT0 + seconds(66)), State::kClosed);
  EXPECT_EQ(cb.open_period(), seconds(10));
  EXPECT_EQ(cb.opens(), 3);
  // Closed again: it takes the threshold again to open.
  EXPECT_FALSE(cb.RecordFailure(kT0 + seconds(67)));
  EXPECT_TRUE(cb.Allows(kT0 + seconds(67)));
}

TEST(CircuitBreakerTest, DisabledNeverOpens) {
  CircuitBreakerOptions o = Options();
  o.enabled = false;
  CircuitBreaker cb(o);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(cb.RecordFailure(kT0 + milliseconds(i)));
  EXPECT_TRUE(cb.Allows(kT0 + seconds(1)));
  EXPECT_EQ(CircuitStateName(cb.state(kT0)), "closed");
}

}  // namespace
}  // namespace vllm::router
