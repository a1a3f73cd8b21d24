#include "core/block_pool.h"

#include <memory>
#include <string>
#include <vector>

#include "core/kv_cache_manager.h"
#include "gtest/gtest.h"

namespace vllm::core {
namespace {

constexpr int32_t kBlockSize = 2;

std::vector<int32_t> Tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = start + i;
  return t;
}

std::vector<uint64_t> Lows(const std::vector<BlockHash>& hashes, size_t from, size_t to) {
  std::vector<uint64_t> lows;
  for (size_t i = from; i < to; ++i) lows.push_back(hashes[i].low);
  return lows;
}

// The events vLLM's block_pool.py emits, at the same points.
class BlockPoolEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = Tokens(10);
    ExtendBlockHashes(tokens_, kBlockSize, "", &hashes_);
    ASSERT_EQ(hashes_.size(), 5u);
  }

  std::vector<int32_t> tokens_;
  std::vector<BlockHash> hashes_;
};

TEST_F(BlockPoolEventsTest, StoredCarriesTheNewBlocksTheirTokensAndTheParent) {
  BlockPool pool(8, /*enable_caching=*/true, /*enable_kv_cache_events=*/true);
  std::vector<int32_t> ids;
  pool.GetNewBlocks(5, &ids);
  EXPECT_TRUE(pool.TakeEvents().empty());  // fresh blocks: nothing evicted

  pool.CacheFullBlocks(hashes_, ids, 0, 3, tokens_, kBlockSize);
  pool.CacheFullBlocks(hashes_, ids, 3, 3, tokens_, kBlockSize);  // nothing new: no event
  pool.CacheFullBlocks(hashes_, ids, 3, 5, tokens_, kBlockSize);
  std::vector<kv_events::KvEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  const auto& first = std::get<kv_events::KvBlockStored>(events[0]);
  EXPECT_EQ(first.block_hashes, Lows(hashes_, 0, 3));
  EXPECT_FALSE(first.parent_block_hash.has_value());
  EXPECT_EQ(first.token_ids, Tokens(6));
  EXPECT_EQ(first.block_size, kBlockSize);
  EXPECT_EQ(first.medium, "GPU");
  EXPECT_FALSE(first.lora_id.has_value());
  EXPECT_FALSE(first.lora_name.has_value());
  EXPECT_EQ(first.group_idx, 0);
  EXPECT_EQ(first.kv_cache_spec_kind, "full_attention");
  const auto& second = std::get<kv_events::KvBlockStored>(events[1]);
  EXPECT_EQ(second.block_hashes, Lows(hashes_, 3, 5));
  EXPECT_EQ(second.parent_block_hash, hashes_[2].low);
  EXPECT_EQ(second.token_ids, Tokens(4, 6));
  EXPECT_TRUE(pool.TakeEvents().empty());  // taken
}

TEST_F(BlockPoolEventsTest, RemovedWhenACachedBlockIsEvicted) {
  BlockPool pool(6, true, true);
  std::vector<int32_t> ids;
  pool.GetNewBlocks(5, &ids);
  pool.CacheFullBlocks(hashes_, ids, 0, 5, tokens_, kBlockSize);
  pool.TakeEvents();
  // Freed tail first, as a request frees: blocks 4, 3, 2, 1, 0 join the queue after block 5.
  std::vector<int32_t> reversed(ids.rbegin(), ids.rend());
  pool.FreeBlocks(reversed);
  EXPECT_TRUE(pool.TakeEvents().empty());  // freeing keeps the hashes: no event
  std::vector<int32_t> taken;
  pool.GetNewBlocks(3, &taken);  // the never-used block 5, then blocks 4 and 3 are evicted
  std::vector<kv_events::KvEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::get<kv_events::KvBlockRemoved>(events[0]).block_hashes,
            std::vector<uint64_t>{hashes_[4].low});
  EXPECT_EQ(std::get<kv_events::KvBlockRemoved>(events[1]).block_hashes,
            std::vector<uint64_t>{hashes_[3].low});
  EXPECT_EQ(std::get<kv_events::KvBlockRemoved>(events[0]).medium, "GPU");
  EXPECT_EQ(std::get<kv_events::KvBlockRemoved>(events[0]).group_idx, 0);
}

TEST_F(BlockPoolEventsTest, AllBlocksClearedOnlyWhenTheResetHappens) {
  BlockPool pool(6, true, true);
  std::vector<int32_t> ids;
  pool.GetNewBlocks(2, &ids);
  pool.CacheFullBlocks(hashes_, ids, 0, 2, tokens_, kBlockSize);
  pool.TakeEvents();
  EXPECT_FALSE(pool.ResetPrefixCache());  // blocks in use
  EXPECT_TRUE(pool.TakeEvents().empty());
  pool.FreeBlocks(ids);
  EXPECT_TRUE(pool.ResetPrefixCache());
  std::vector<kv_events::KvEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<kv_events::KvAllBlocksCleared>(events[0]));
  // The reset dropped the hashes: taking the blocks again evicts nothing.
  pool.GetNewBlocks(6, &ids);
  EXPECT_TRUE(pool.TakeEvents().empty());
}

TEST_F(BlockPoolEventsTest, NothingIsRecordedWhenEventsAreOff) {
  BlockPool pool(6, true);
  EXPECT_FALSE(pool.enable_kv_cache_events());
  std::vector<int32_t> ids;
  pool.GetNewBlocks(5, &ids);
  pool.CacheFullBlocks(hashes_, ids, 0, 5);  // no tokens needed
  pool.FreeBlocks(ids);
  ids.clear();
  pool.GetNewBlocks(6, &ids);
  pool.FreeBlocks(ids);
  EXPECT_TRUE(pool.ResetPrefixCache());
  EXPECT_TRUE(pool.TakeEvents().empty());
}

// Through the KV-cache manager: a request's prompt becomes one BlockStored of its full
// blocks; a second request sharing the first two blocks stores only what follows them.
TEST_F(BlockPoolEventsTest, ManagerStoresARequestsFullBlocksChained) {
  KVCacheManager manager(16, kBlockSize, /*max_model_len=*/64, /*enable_caching=*/true,
                         /*enable_kv_cache_events=*/true);
  auto make = [](std::vector<int32_t> tokens, const std::string& id) {
    EngineCoreRequest r;
    r.request_id = id;
    r.prompt_token_ids = std::move(tokens);
    return std::make_unique<Request>(std::move(r), 64);
  };
  auto admit = [&manager](Request& r) {
    auto computed = manager.GetComputedBlocks(r);
    ASSERT_TRUE(manager
                    .AllocateSlots(r, r.num_tokens() - computed.num_computed_tokens,
                                   computed.num_computed_tokens, computed.block_ids)
                    .has_value());
    r.num_computed_tokens = r.num_tokens();
  };
  auto a = make(Tokens(7), "a");  // 3 full blocks + 1 token
  admit(*a);
  std::vector<kv_events::KvEvent> events = manager.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  const auto& stored = std::get<kv_events::KvBlockStored>(events[0]);
  EXPECT_EQ(stored.token_ids, Tokens(6));
  EXPECT_EQ(stored.block_hashes, Lows(a->block_hashes, 0, 3));
  EXPECT_FALSE(stored.parent_block_hash.has_value());

  std::vector<int32_t> b_tokens = Tokens(4);
  for (int32_t t : {50, 51, 52, 53, 54}) b_tokens.push_back(t);
  auto b = make(b_tokens, "b");  // shares blocks 0-1, then 2 new full blocks + 1 token
  admit(*b);
  events = manager.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  const auto& stored_b = std::get<kv_events::KvBlockStored>(events[0]);
  EXPECT_EQ(stored_b.token_ids, (std::vector<int32_t>{50, 51, 52, 53}));
  EXPECT_EQ(stored_b.parent_block_hash, a->block_hashes[1].low);
  EXPECT_EQ(stored_b.block_hashes, Lows(b->block_hashes, 2, 4));
}

}  // namespace
}  // namespace vllm::core
