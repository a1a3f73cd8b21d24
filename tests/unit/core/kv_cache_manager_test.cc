#include "core/kv_cache_manager.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vllm::core {
namespace {

constexpr int32_t kBlockSize = 16;

class KVCacheManagerTest : public ::testing::Test {
 protected:
  void Init(int32_t num_blocks, bool caching = true) {
    manager_ =
        std::make_unique<KVCacheManager>(num_blocks, kBlockSize, /*max_model_len=*/1024, caching);
  }
  // A request whose prompt is `tokens`.
  std::unique_ptr<Request> MakeRequest(std::vector<int32_t> tokens, std::string salt = "") {
    EngineCoreRequest r;
    r.request_id = "req" + std::to_string(next_id_++);
    r.prompt_token_ids = std::move(tokens);
    if (!salt.empty()) r.cache_salt = salt;
    return std::make_unique<Request>(std::move(r), 1024);
  }
  static std::vector<int32_t> Tokens(int32_t n, int32_t start = 0) {
    std::vector<int32_t> t(n);
    for (int32_t i = 0; i < n; ++i) t[i] = start + i;
    return t;
  }
  // GetComputedBlocks + AllocateSlots for the whole prompt, like the scheduler's first step.
  KVCacheManager::ComputedBlocks Admit(Request& r) {
    auto computed = manager_->GetComputedBlocks(r);
    auto blocks = manager_->AllocateSlots(r, r.num_tokens() - computed.num_computed_tokens,
                                          computed.num_computed_tokens, computed.block_ids);
    EXPECT_TRUE(blocks.has_value());
    r.num_computed_tokens = r.num_tokens();
    return computed;
  }
  int32_t RefCount(int32_t block) const { return manager_->block_pool().block(block).ref_cnt; }

  std::unique_ptr<KVCacheManager> manager_;
  int next_id_ = 0;
};

TEST_F(KVCacheManagerTest, AllocatesEnoughBlocksAndFreesThemAll) {
  Init(10);
  auto r = MakeRequest(Tokens(40));
  auto blocks = manager_->AllocateSlots(*r, 40);
  ASSERT_TRUE(blocks.has_value());
  EXPECT_EQ(blocks->size(), 3u);
  EXPECT_EQ(r->block_ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 7);
  EXPECT_DOUBLE_EQ(manager_->GetUsage(), 0.3);
  manager_->Free(*r);
  EXPECT_TRUE(r->block_ids.empty());
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 10);
}

TEST_F(KVCacheManagerTest, DecodeAllocatesANewBlockOnlyAtBlockBoundaries) {
  Init(10);
  auto r = MakeRequest(Tokens(16));
  Admit(*r);
  EXPECT_EQ(r->block_ids.size(), 1u);
  EXPECT_EQ(r->num_cached_blocks, 1);  // the full prompt block is cached
  r->all_token_ids.push_back(7);
  auto step = manager_->AllocateSlots(*r, 1);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->size(), 1u);
  r->num_computed_tokens = 17;
  r->all_token_ids.push_back(8);
  step = manager_->AllocateSlots(*r, 1);
  ASSERT_TRUE(step.has_value());
  EXPECT_TRUE(step->empty());
}

// Sliding window 20, blocks of 16: once a request has computed c tokens, positions before
// c - 19 are dead, and a block wholly before them goes back to the pool (kNullBlock in the
// table) while the request runs; the freed blocks keep their hashes for prefix hits.
TEST_F(KVCacheManagerTest, SlidingWindowFreesBlocksThatFallOutOfTheWindow) {
  manager_ = std::make_unique<KVCacheManager>(10, kBlockSize, /*max_model_len=*/1024,
                                              /*enable_caching=*/true,
                                              /*enable_kv_cache_events=*/false,
                                              /*sliding_window=*/20);
  auto r = MakeRequest(Tokens(40));
  Admit(*r);  // 3 blocks; nothing computed before this step, so nothing freed yet
  EXPECT_EQ(r->block_ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 7);
  // Decode of token 40: computed 40, the earliest visible position is 21, so block 0
  // (positions 0-15) is dead and block 1 (16-31) still holds 21-31.
  r->all_token_ids.push_back(7);
  ASSERT_TRUE(manager_->AllocateSlots(*r, 1).has_value());
  EXPECT_EQ(r->block_ids, (std::vector<int32_t>{KVCacheManager::kNullBlock, 1, 2}));
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 8);
  EXPECT_EQ(RefCount(0), 0);
  // Up to 51 computed: earliest visible 32, block 1 dies; 48 needs a 4th block.
  for (int32_t c = 41; c <= 51; ++c) {
    r->num_computed_tokens = c;
    r->all_token_ids.push_back(7);
    ASSERT_TRUE(manager_->AllocateSlots(*r, 1).has_value());
  }
  ASSERT_EQ(r->block_ids.size(), 4u);
  EXPECT_EQ(r->block_ids[0], KVCacheManager::kNullBlock);
  EXPECT_EQ(r->block_ids[1], KVCacheManager::kNullBlock);
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 8);  // 2 live blocks of 10
  // The freed blocks still serve a prefix hit (the whole prefix is still cached).
  auto other = MakeRequest(Tokens(40));
  EXPECT_EQ(manager_->GetComputedBlocks(*other).num_computed_tokens, 32);
  // Free skips the null entries and returns exactly the live blocks.
  manager_->Free(*r);
  EXPECT_TRUE(r->block_ids.empty());
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 10);
}

TEST_F(KVCacheManagerTest, FullPrefixHitSharesBlocksWithRefCounts) {
  Init(20);
  auto a = MakeRequest(Tokens(3 * kBlockSize + 7));
  Admit(*a);
  auto b_tokens = Tokens(3 * kBlockSize);
  auto tail = Tokens(5, 5000);
  b_tokens.insert(b_tokens.end(), tail.begin(), tail.end());
  auto b = MakeRequest(b_tokens);
  auto computed = Admit(*b);
  EXPECT_EQ(computed.num_computed_tokens, 3 * kBlockSize);
  EXPECT_EQ(computed.block_ids,
            std::vector<int32_t>(a->block_ids.begin(), a->block_ids.begin() + 3));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(RefCount(a->block_ids[i]), 2);
  EXPECT_EQ(RefCount(a->block_ids[3]), 1);
  EXPECT_NE(b->block_ids[3], a->block_ids[3]);
  const PrefixCacheStats stats = manager_->MakePrefixCacheStats();
  EXPECT_EQ(stats.requests, 2);
  EXPECT_EQ(stats.queries, a->num_tokens() + b->num_tokens());
  EXPECT_EQ(stats.hits, 3 * kBlockSize);
  EXPECT_EQ(manager_->MakePrefixCacheStats(), PrefixCacheStats{});
}

TEST_F(KVCacheManagerTest, PartialHitStopsAtTheFirstDifferentBlock) {
  Init(20);
  auto a = MakeRequest(Tokens(4 * kBlockSize));
  Admit(*a);
  auto tokens = Tokens(4 * kBlockSize);
  tokens[kBlockSize + 3] = 77777;  // second block differs
  auto b = MakeRequest(tokens);
  EXPECT_EQ(Admit(*b).num_computed_tokens, kBlockSize);
}

TEST_F(KVCacheManagerTest, NeverHitsTheLastToken) {
  Init(20);
  auto a = MakeRequest(Tokens(2 * kBlockSize));
  Admit(*a);
  auto b = MakeRequest(Tokens(2 * kBlockSize));
  // Both blocks are cached, but the last token must be computed: only one block is used.
  EXPECT_EQ(Admit(*b).num_computed_tokens, kBlockSize);
  auto c = MakeRequest(Tokens(2 * kBlockSize + 1));
  EXPECT_EQ(Admit(*c).num_computed_tokens, 2 * kBlockSize);
}

TEST_F(KVCacheManagerTest, CacheSaltIsolatesPrefixes) {
  Init(20);
  auto a = MakeRequest(Tokens(3 * kBlockSize), "alice");
  Admit(*a);
  EXPECT_EQ(Admit(*MakeRequest(Tokens(3 * kBlockSize), "bob")).num_computed_tokens, 0);
  EXPECT_EQ(Admit(*MakeRequest(Tokens(3 * kBlockSize))).num_computed_tokens, 0);
  EXPECT_EQ(Admit(*MakeRequest(Tokens(3 * kBlockSize), "alice")).num_computed_tokens,
            2 * kBlockSize);
}

// vLLM skips reading the cache for a request asking for prompt logprobs (the cached
// positions' logits are gone); its own blocks are still cached for others.
TEST_F(KVCacheManagerTest, PromptLogprobsRequestsNeverReadTheCache) {
  Init(20);
  Admit(*MakeRequest(Tokens(3 * kBlockSize)));
  manager_->MakePrefixCacheStats();
  auto wants = MakeRequest(Tokens(3 * kBlockSize));
  wants->sampling_params.prompt_logprobs = 0;
  EXPECT_EQ(Admit(*wants).num_computed_tokens, 0);
  EXPECT_EQ(manager_->MakePrefixCacheStats().requests, 0);  // no lookup counted
  auto other = MakeRequest(Tokens(4 * kBlockSize));
  other->sampling_params.prompt_logprobs = 0;
  Admit(*other);  // registers its fourth block
  EXPECT_EQ(Admit(*MakeRequest(Tokens(4 * kBlockSize + 1))).num_computed_tokens, 4 * kBlockSize);
}

TEST_F(KVCacheManagerTest, DisabledCachingNeverHits) {
  Init(20, /*caching=*/false);
  Admit(*MakeRequest(Tokens(3 * kBlockSize)));
  EXPECT_EQ(Admit(*MakeRequest(Tokens(3 * kBlockSize))).num_computed_tokens, 0);
  EXPECT_EQ(manager_->block_pool().num_cached_hashes(), 0u);
}

TEST_F(KVCacheManagerTest, FreedBlocksKeepTheirHashUntilEvicted) {
  Init(6);
  auto a = MakeRequest(Tokens(3 * kBlockSize));
  Admit(*a);
  const std::vector<int32_t> a_blocks = a->block_ids;  // {0, 1, 2}
  manager_->Free(*a);
  // Tail first: a's last block is the first eviction candidate, its first block the last.
  EXPECT_EQ(manager_->block_pool().free_queue().GetAllFreeBlocks(),
            (std::vector<int32_t>{3, 4, 5, 2, 1, 0}));
  // Still cached: a new identical request hits the freed blocks.
  auto b = MakeRequest(Tokens(3 * kBlockSize + 1));
  auto hit = manager_->GetComputedBlocks(*b);
  EXPECT_EQ(hit.block_ids, a_blocks);
  // Fill the never-used blocks and one more: block 2 (a's tail) is evicted first.
  auto filler = MakeRequest(Tokens(4 * kBlockSize, 9000));
  ASSERT_TRUE(manager_->AllocateSlots(*filler, 4 * kBlockSize).has_value());
  EXPECT_EQ(filler->block_ids, (std::vector<int32_t>{3, 4, 5, 2}));
  hit = manager_->GetComputedBlocks(*b);
  EXPECT_EQ(hit.block_ids, (std::vector<int32_t>{0, 1}));
}

TEST_F(KVCacheManagerTest, HitOnAFreeBlockCountsAgainstFreeBlocks) {
  Init(4);
  auto a = MakeRequest(Tokens(2 * kBlockSize));
  Admit(*a);
  manager_->Free(*a);
  // b hits both blocks of a (free, ref 0) and needs 2 more: 4 in total, exactly the pool.
  auto b = MakeRequest(Tokens(4 * kBlockSize));
  auto computed = manager_->GetComputedBlocks(*b);
  EXPECT_EQ(computed.num_computed_tokens, 2 * kBlockSize);
  ASSERT_TRUE(
      manager_->AllocateSlots(*b, 2 * kBlockSize, computed.num_computed_tokens, computed.block_ids)
          .has_value());
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 0);
  EXPECT_EQ(RefCount(computed.block_ids[0]), 1);
}

TEST_F(KVCacheManagerTest, FailedAllocationChangesNothing) {
  Init(4);
  auto a = MakeRequest(Tokens(3 * kBlockSize));
  Admit(*a);
  manager_->Free(*a);
  auto b = MakeRequest(Tokens(3 * kBlockSize + 5));
  auto computed = manager_->GetComputedBlocks(*b);
  ASSERT_EQ(computed.block_ids.size(), 3u);
  // Needs 3 (hits) + 2 (new) > 4.
  EXPECT_FALSE(manager_
                   ->AllocateSlots(*b, kBlockSize + 5 + kBlockSize, computed.num_computed_tokens,
                                   computed.block_ids)
                   .has_value());
  EXPECT_TRUE(b->block_ids.empty());
  EXPECT_EQ(manager_->block_pool().GetNumFreeBlocks(), 4);
  for (int32_t id : computed.block_ids) EXPECT_EQ(RefCount(id), 0);
}

TEST_F(KVCacheManagerTest, ChunkedPrefillCachesBlocksAsTheyFill) {
  Init(10);
  auto a = MakeRequest(Tokens(3 * kBlockSize));
  ASSERT_TRUE(manager_->AllocateSlots(*a, 20).has_value());  // 1 full block + 4 tokens
  EXPECT_EQ(a->num_cached_blocks, 1);
  a->num_computed_tokens = 20;
  ASSERT_TRUE(manager_->AllocateSlots(*a, 28).has_value());
  EXPECT_EQ(a->num_cached_blocks, 3);
  EXPECT_EQ(manager_->block_pool().num_cached_hashes(), 3u);
}

TEST_F(KVCacheManagerTest, ResetPrefixCacheOnlyWhenIdle) {
  Init(10);
  auto a = MakeRequest(Tokens(2 * kBlockSize));
  Admit(*a);
  EXPECT_FALSE(manager_->ResetPrefixCache());
  manager_->Free(*a);
  EXPECT_TRUE(manager_->ResetPrefixCache());
  EXPECT_EQ(manager_->block_pool().num_cached_hashes(), 0u);
  EXPECT_TRUE(manager_->MakePrefixCacheStats().reset);
}

}  // namespace
}  // namespace vllm::core
