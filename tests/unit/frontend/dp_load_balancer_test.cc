#include "frontend/engine/dp_load_balancer.h"

#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::frontend {
namespace {

std::map<int32_t, int> Counts(DpLoadBalancer& lb, int picks) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < picks; ++i) ++counts[lb.Pick().value_or(-1)];
  return counts;
}

TEST(DpLoadBalancerTest, IdleEnginesShareNewRequestsEvenly) {
  DpLoadBalancer lb(4, /*client_count=*/1, /*client_index=*/0);
  EXPECT_EQ(lb.Pick(), 0);
  EXPECT_EQ(lb.Pick(), 1);
  EXPECT_EQ(lb.Pick(), 2);
  EXPECT_EQ(lb.Pick(), 3);
  EXPECT_EQ(Counts(lb, 400), (std::map<int32_t, int>{{0, 100}, {1, 100}, {2, 100}, {3, 100}}));
}

TEST(DpLoadBalancerTest, PublishedQueuesSteerRequestsAway) {
  DpLoadBalancer lb(2, 1, 0, DpBalancePolicy::kVllm);
  const std::vector<EngineLoad> loads = {{/*waiting=*/6, /*running=*/4}, {0, 0}};
  lb.Publish(loads);
  // Engine 1 takes requests until this client's own count there reaches engine 0's queue.
  EXPECT_EQ(Counts(lb, 10), (std::map<int32_t, int>{{1, 10}}));
  EXPECT_EQ(lb.Pick(), 0);  // tie at 10: the first engine scanned
  // New figures include what was sent: the local counts start again.
  lb.Publish(std::vector<EngineLoad>{{0, 1}, {0, 11}});
  EXPECT_EQ(lb.Pick(), 0);
  EXPECT_DOUBLE_EQ(lb.Score(1), 11.0);
}

TEST(DpLoadBalancerTest, KvCachePressurePenalisesWaitingRequests) {
  DpLoadBalancer lb(2, 1, 0);
  // Same queue length; engine 0's cache is 90 % full with 4 waiting: 8 + 4 × 6 × 0.4.
  lb.Publish(std::vector<EngineLoad>{{4, 4, 0.9}, {2, 6, 0.3}});
  EXPECT_DOUBLE_EQ(lb.Score(0), 8 + 4 * 6 * 0.4);
  EXPECT_DOUBLE_EQ(lb.Score(1), 8.0);
  EXPECT_EQ(lb.Pick(), 1);
}

TEST(DpLoadBalancerTest, OtherClientsAreAssumedToSendAsMuch) {
  DpLoadBalancer lb(2, /*client_count=*/3, /*client_index=*/0);
  lb.Publish(std::vector<EngineLoad>{{0, 2}, {0, 5}});
  EXPECT_EQ(lb.Pick(), 0);             // 2 < 5
  EXPECT_DOUBLE_EQ(lb.Score(0), 3.0);  // one own request counts 3
  EXPECT_EQ(lb.Pick(), 0);             // 3 < 5
  EXPECT_DOUBLE_EQ(lb.Score(0), 6.0);
  EXPECT_EQ(lb.Pick(), 1);  // 6 > 5
}

// vLLM's rule forgets this client's picks at every new figure from the engine, though
// requests still in transit to it are missing from those figures; ours counts them until
// they finish.
TEST(DpLoadBalancerTest, OutstandingRequestsCountUntilTheyFinish) {
  DpLoadBalancer vllm(2, 1, 0, DpBalancePolicy::kVllm), ours(2, 1, 0);
  for (DpLoadBalancer* lb : {&vllm, &ours}) {
    lb->Update(1, EngineLoad{0, 4});                            // engine 1 runs 4
    for (int i = 0; i < 4; ++i) ASSERT_EQ(lb->Pick(), 0) << i;  // so 4 go to engine 0
    // Engine 0 reports after a step that saw only 1 of the 4 sent to it.
    lb->Update(0, EngineLoad{0, 1});
  }
  EXPECT_DOUBLE_EQ(vllm.Score(0), 1.0);  // the 3 in transit are forgotten
  EXPECT_DOUBLE_EQ(ours.Score(0), 4.0);
  EXPECT_EQ(vllm.Pick(), 0);  // piles onto engine 0
  EXPECT_EQ(ours.Pick(), 1);  // 4 vs 4: a tie, the engine after the last one picked
  EXPECT_EQ(ours.Pick(), 0);  // 5 vs 4
  // Finished requests leave the count; a restarted engine starts from nothing.
  for (int i = 0; i < 5; ++i) ours.Finished(0);
  EXPECT_DOUBLE_EQ(ours.Score(0), 1.0);  // the engine's own figure (1 running) remains
  ours.Finished(0);                      // never below zero
  ours.Update(0, EngineLoad{});
  EXPECT_DOUBLE_EQ(ours.Score(0), 0.0);
  ours.Reset(1);
  ours.Update(1, EngineLoad{});
  EXPECT_DOUBLE_EQ(ours.Score(1), 0.0);
  ours.Finished(9);  // no such engine: ignored
}

// A client whose requests never overlap (each finished before the next) spreads them over
// idle engines; vLLM's rule sends every one to its first engine.
TEST(DpLoadBalancerTest, SequentialRequestsRotateOverIdleEngines) {
  DpLoadBalancer vllm(3, 1, 0, DpBalancePolicy::kVllm), ours(3, 1, 0);
  std::vector<int32_t> vllm_picks, our_picks;
  for (int i = 0; i < 6; ++i) {
    vllm_picks.push_back(*vllm.Pick());
    vllm.Update(vllm_picks.back(), EngineLoad{});  // done: the engine reports an empty queue
    our_picks.push_back(*ours.Pick());
    ours.Finished(our_picks.back());
    ours.Update(our_picks.back(), EngineLoad{});
  }
  EXPECT_EQ(vllm_picks, (std::vector<int32_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(our_picks, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(DpLoadBalancerTest, ClientsStartTheirScanAtDifferentEngines) {
  DpLoadBalancer a(4, 2, 0), b(4, 2, 1);
  EXPECT_EQ(a.Pick(), 0);
  EXPECT_EQ(b.Pick(), 2);
}

TEST(DpLoadBalancerTest, DeadEnginesAreNeverPicked) {
  DpLoadBalancer lb(3, 1, 0);
  lb.SetAlive(1, false);
  EXPECT_EQ(Counts(lb, 10), (std::map<int32_t, int>{{0, 5}, {2, 5}}));
  lb.Publish(std::vector<EngineLoad>{{0, 0, 0, false}, {0, 0, 0, false}, {0, 0, 0, false}});
  EXPECT_EQ(lb.Pick(), std::nullopt);
  lb.SetAlive(2, true);
  EXPECT_EQ(lb.Pick(), 2);
  lb.SetAlive(7, true);                    // no such engine: ignored
  lb.Publish(std::vector<EngineLoad>(2));  // wrong size: ignored
  EXPECT_EQ(lb.Pick(), 2);
}

}  // namespace
}  // namespace vllm::frontend
