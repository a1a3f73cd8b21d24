#include "router/policy.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vllm::router {
namespace {

std::vector<Candidate> Three(int64_t a = 0, int64_t b = 0, int64_t c = 0) {
  return {{"http://w0:1", a}, {"http://w1:1", b}, {"http://w2:1", c}};
}

TEST(MakePolicyTest, KnowsEveryNameAndRejectsOthers) {
  for (const char* name :
       {"round_robin", "random", "power_of_two", "cache_aware", "consistent_hash", "kv_aware"}) {
    auto p = MakePolicy(name, {});
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  EXPECT_FALSE(MakePolicy("fastest", {}).ok());
}

TEST(RoundRobinPolicyTest, Cycles) {
  RoundRobinPolicy p;
  const auto w = Three();
  std::vector<size_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(p.Pick(w, {}));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

TEST(RandomPolicyTest, CoversEveryWorker) {
  RandomPolicy p(42);
  const auto w = Three();
  std::set<size_t> seen;
  for (int i = 0; i < 200; ++i) {
    const size_t i_picked = p.Pick(w, {});
    ASSERT_LT(i_picked, 3u);
    seen.insert(i_picked);
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST(PowerOfTwoPolicyTest, NeverPicksTheMostLoadedOfThree) {
  PowerOfTwoPolicy p(7);
  // Of any two distinct workers, the less loaded wins: worker 1 (load 9) never does.
  const auto w = Three(1, 9, 2);
  std::map<size_t, int> count;
  for (int i = 0; i < 300; ++i) ++count[p.Pick(w, {})];
  EXPECT_EQ(count[1], 0);
  EXPECT_GT(count[0], 0);
  EXPECT_GT(count[2], 0);
}

TEST(PowerOfTwoPolicyTest, SingleWorker) {
  PowerOfTwoPolicy p(1);
  const std::vector<Candidate> one = {{"http://a:1", 5}};
  EXPECT_EQ(p.Pick(one, {}), 0u);
}

TEST(CacheAwarePolicyTest, RepeatedPromptSticksToOneWorker) {
  CacheAwarePolicy p(PolicyOptions{});
  const auto w = Three();
  const std::string prompt(200, 'p');
  const size_t first = p.Pick(w, {prompt, ""});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p.Pick(w, {prompt, ""}), first);
  // A prompt sharing a long prefix follows it too.
  EXPECT_EQ(p.Pick(w, {prompt + " and a short tail", ""}), first);
}

TEST(CacheAwarePolicyTest, NewPromptsSpreadOverIdleWorkers) {
  CacheAwarePolicy p(PolicyOptions{});
  const auto w = Three();
  std::set<size_t> seen;
  seen.insert(p.Pick(w, {"alpha alpha alpha alpha", ""}));
  seen.insert(p.Pick(w, {"bravo bravo bravo bravo", ""}));
  seen.insert(p.Pick(w, {"charlie charlie charlie", ""}));
  EXPECT_EQ(seen.size(), 3u);  // ties on load go to the smallest tree
}

TEST(CacheAwarePolicyTest, ShortMatchBelowThresholdGoesToLeastLoaded) {
  PolicyOptions o;
  o.cache_threshold = 0.5;
  CacheAwarePolicy p(o);
  const std::string shared(10, 's');
  auto w = Three(0, 0, 0);
  const size_t owner = p.Pick(w, {shared + std::string(10, 'a'), ""});
  // Load the owner a little (still balanced), then a prompt that matches only 10 of 100 bytes.
  w[owner].outstanding = 3;
  const size_t pick = p.Pick(w, {shared + std::string(90, 'b'), ""});
  EXPECT_NE(pick, owner);
}

TEST(CacheAwarePolicyTest, ImbalanceOverridesAffinity) {
  PolicyOptions o;
  o.balance_abs_threshold = 4;
  o.balance_rel_threshold = 1.5;
  CacheAwarePolicy p(o);
  const std::string prompt(100, 'q');
  auto w = Three();
  const size_t owner = p.Pick(w, {prompt, ""});
  w[owner].outstanding = 10;  // 10 - 0 > 4 and 10 > 0 * 1.5: imbalanced
  const size_t pick = p.Pick(w, {prompt, ""});
  EXPECT_NE(pick, owner);
  EXPECT_EQ(w[pick].outstanding, 0);
  // Balanced again (within the absolute threshold): back to the owner... of the longest match.
  w[owner].outstanding = 2;
  const size_t again = p.Pick(w, {prompt, ""});
  EXPECT_TRUE(again == owner || again == pick);  // both have seen the prompt now
}

TEST(CacheAwarePolicyTest, RemoveWorkerDropsItsTree) {
  CacheAwarePolicy p(PolicyOptions{});
  const auto w = Three();
  const size_t owner = p.Pick(w, {"some prompt text", ""});
  ASSERT_NE(p.TreeOf(w[owner].url), nullptr);
  EXPECT_GT(p.TreeOf(w[owner].url)->Size(), 0u);
  p.RemoveWorker(w[owner].url);
  EXPECT_EQ(p.TreeOf(w[owner].url), nullptr);
}

TEST(CacheAwarePolicyTest, TreesStayBounded) {
  PolicyOptions o;
  o.max_tree_size = 500;
  CacheAwarePolicy p(o);
  const auto w = Three();
  for (int i = 0; i < 2000; ++i) p.Pick(w, {"prompt number " + std::to_string(i * 31), ""});
  for (const auto& c : w) {
    const PrefixTree* t = p.TreeOf(c.url);
    ASSERT_NE(t, nullptr);
    EXPECT_LE(t->Size(), 500u);
  }
}

TEST(ConsistentHashPolicyTest, SameKeySameWorker) {
  ConsistentHashPolicy p(PolicyOptions{});
  const auto w = Three();
  for (int k = 0; k < 50; ++k) {
    const std::string key = "session-" + std::to_string(k);
    const size_t first = p.Pick(w, {"", key});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(p.Pick(w, {"", key}), first);
  }
}

TEST(ConsistentHashPolicyTest, SpreadsKeysAndMovesOnlyTheLostWorkersKeys) {
  ConsistentHashPolicy p(PolicyOptions{});
  const auto w = Three();
  const std::vector<Candidate> two = {w[0], w[2]};  // w1 ejected
  std::map<size_t, int> count;
  int moved_wrongly = 0;
  for (int k = 0; k < 600; ++k) {
    const std::string key = "user-" + std::to_string(k);
    const size_t before = p.Pick(w, {"", key});
    ++count[before];
    const std::string& after = two[p.Pick(two, {"", key})].url;
    if (before != 1 && after != w[before].url) ++moved_wrongly;
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_GT(count[i], 100) << "worker " << i;
  EXPECT_EQ(moved_wrongly, 0);
  // The ring is rebuilt again when w1 returns: keys go back where they were.
  EXPECT_EQ(p.Pick(w, {"", "user-1"}), p.Pick(w, {"", "user-1"}));
}

TEST(ConsistentHashPolicyTest, NoKeyFallsBackToPowerOfTwo) {
  ConsistentHashPolicy p(PolicyOptions{});
  const auto w = Three(1, 9, 2);
  for (int i = 0; i < 100; ++i) EXPECT_NE(p.Pick(w, {"", ""}), 1u);
}

TEST(StableHashTest, IsStable) {
  EXPECT_EQ(StableHash("abc"), StableHash("abc"));
  EXPECT_NE(StableHash("abc"), StableHash("abd"));
}

}  // namespace
}  // namespace vllm::router
