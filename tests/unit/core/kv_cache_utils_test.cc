#include "core/kv_cache_utils.h"

#include <vector>

#include "gtest/gtest.h"

namespace vllm::core {
namespace {

class FreeKVCacheBlockQueueTest : public ::testing::Test {
 protected:
  std::vector<KVCacheBlock> MakeBlocks(int n) {
    std::vector<KVCacheBlock> blocks(n);
    for (int i = 0; i < n; ++i) blocks[i].block_id = i;
    return blocks;
  }
};

TEST_F(FreeKVCacheBlockQueueTest, StartsInIdOrderAndPopsFromTheHead) {
  auto blocks = MakeBlocks(5);
  FreeKVCacheBlockQueue queue(&blocks);
  EXPECT_EQ(queue.num_free_blocks(), 5);
  EXPECT_EQ(queue.GetAllFreeBlocks(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(queue.PopLeft(), 0);
  EXPECT_EQ(queue.PopLeft(), 1);
  EXPECT_EQ(queue.num_free_blocks(), 3);
}

TEST_F(FreeKVCacheBlockQueueTest, RemoveFromMiddleHeadAndTailThenAppend) {
  auto blocks = MakeBlocks(5);
  FreeKVCacheBlockQueue queue(&blocks);
  queue.Remove(2);
  EXPECT_EQ(queue.GetAllFreeBlocks(), (std::vector<int32_t>{0, 1, 3, 4}));
  queue.Remove(0);
  queue.Remove(4);
  EXPECT_EQ(queue.GetAllFreeBlocks(), (std::vector<int32_t>{1, 3}));
  queue.Append(2);
  queue.Append(0);
  EXPECT_EQ(queue.GetAllFreeBlocks(), (std::vector<int32_t>{1, 3, 2, 0}));
  EXPECT_EQ(queue.num_free_blocks(), 4);
  while (queue.num_free_blocks() > 0) queue.PopLeft();
  EXPECT_TRUE(queue.GetAllFreeBlocks().empty());
  queue.Append(4);
  EXPECT_EQ(queue.PopLeft(), 4);
}

TEST_F(FreeKVCacheBlockQueueTest, DoubleAppendIsABug) {
  auto blocks = MakeBlocks(2);
  FreeKVCacheBlockQueue queue(&blocks);
  EXPECT_DEATH(queue.Append(1), "already in the free queue");
}

class BlockHashTest : public ::testing::Test {};

TEST_F(BlockHashTest, ChainedThroughTheParent) {
  std::vector<int32_t> tokens(8);
  for (int i = 0; i < 8; ++i) tokens[i] = i;
  std::vector<BlockHash> hashes;
  ExtendBlockHashes(tokens, 4, "", &hashes);
  ASSERT_EQ(hashes.size(), 2u);
  EXPECT_EQ(hashes[0], HashBlockTokens(kNoneHash, std::span(tokens).first(4), ""));
  EXPECT_EQ(hashes[1], HashBlockTokens(hashes[0], std::span(tokens).subspan(4, 4), ""));
  // Same second block under a different first block hashes differently.
  std::vector<int32_t> other = tokens;
  other[0] = 99;
  std::vector<BlockHash> other_hashes;
  ExtendBlockHashes(other, 4, "", &other_hashes);
  EXPECT_NE(other_hashes[1], hashes[1]);
}

TEST_F(BlockHashTest, ExtendsOnlyFullBlocksAndIsIdempotent) {
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7};
  std::vector<BlockHash> hashes;
  ExtendBlockHashes(tokens, 4, "", &hashes);
  EXPECT_EQ(hashes.size(), 1u);
  tokens.push_back(8);
  ExtendBlockHashes(tokens, 4, "", &hashes);
  EXPECT_EQ(hashes.size(), 2u);
  const auto copy = hashes;
  ExtendBlockHashes(tokens, 4, "", &hashes);
  EXPECT_EQ(hashes, copy);
}

TEST_F(BlockHashTest, CacheSaltChangesEveryBlock) {
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<BlockHash> plain, salted, salted_again;
  ExtendBlockHashes(tokens, 4, "", &plain);
  ExtendBlockHashes(tokens, 4, "salt", &salted);
  ExtendBlockHashes(tokens, 4, "salt", &salted_again);
  EXPECT_NE(plain[0], salted[0]);
  EXPECT_NE(plain[1], salted[1]);  // through the chain
  EXPECT_EQ(salted, salted_again);
}

}  // namespace
}  // namespace vllm::core
