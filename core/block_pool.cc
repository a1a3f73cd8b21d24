#include "core/block_pool.h"

#include <algorithm>

#include "base/status_macros.h"

namespace vllm::core {
namespace {

std::vector<KVCacheBlock> MakeBlocks(int32_t num_blocks) {
  VLLM_CHECK(num_blocks > 0) << "a block pool needs at least one block";
  std::vector<KVCacheBlock> blocks(num_blocks);
  for (int32_t i = 0; i < num_blocks; ++i) blocks[i].block_id = i;
  return blocks;
}

// vLLM's values for a block of its one full-attention KV-cache group in GPU memory (vLLM
// says "GPU" whatever its platform, and so do we on the CPU).
constexpr char kMediumGpu[] = "GPU";
constexpr char kFullAttention[] = "full_attention";

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching, bool enable_kv_cache_events)
    : enable_caching_(enable_caching),
      enable_kv_cache_events_(enable_kv_cache_events),
      blocks_(MakeBlocks(num_blocks)),
      free_queue_(&blocks_) {
  // Registered hashes never outnumber blocks; sizing the map once avoids rehashing it (and
  // its cache misses) while the cache warms up.
  if (enable_caching_) cached_block_hash_to_block_.reserve(std::min(num_blocks, 1 << 20));
}

double BlockPool::GetUsage() const {
  return 1.0 - static_cast<double>(GetNumFreeBlocks()) / static_cast<double>(num_blocks());
}

std::optional<int32_t> BlockPool::GetCachedBlock(const BlockHash& block_hash) const {
  auto it = cached_block_hash_to_block_.find(block_hash);
  if (it == cached_block_hash_to_block_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::GetNewBlocks(int32_t num_blocks, std::vector<int32_t>* out) {
  VLLM_CHECK(num_blocks <= GetNumFreeBlocks())
      << "cannot get " << num_blocks << " free blocks, only " << GetNumFreeBlocks() << " left";
  for (int32_t i = 0; i < num_blocks; ++i) {
    KVCacheBlock& block = blocks_[free_queue_.PopLeft()];
    VLLM_CHECK(block.ref_cnt == 0) << "free block " << block.block_id << " has references";
    if (enable_caching_) MaybeEvictCachedBlock(block);
    block.ref_cnt = 1;
    out->push_back(block.block_id);
  }
  PrefetchHead();
}

void BlockPool::PrefetchHead() const {
  // The next allocation takes the new head. Its metadata is cached (popping wrote its link),
  // so what the next pop will miss on can be fetched now: the map slot its eviction looks
  // up, and the metadata of the block after it (whose link that pop writes). Decode steps
  // allocate one block per request every block_size tokens, each otherwise a few DRAM misses.
  const int32_t head = free_queue_.head();
  if (head < 0) return;
  const KVCacheBlock& block = blocks_[head];
  if (block.has_hash) cached_block_hash_to_block_.prefetch(block.block_hash);
  if (block.next_free >= 0) __builtin_prefetch(&blocks_[block.next_free]);
}

void BlockPool::Touch(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    KVCacheBlock& block = blocks_[id];
    if (block.ref_cnt == 0) free_queue_.Remove(id);
    ++block.ref_cnt;
  }
}

void BlockPool::FreeBlocks(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    KVCacheBlock& block = blocks_[id];
    VLLM_CHECK(block.ref_cnt > 0) << "double free of block " << id;
    if (--block.ref_cnt == 0) free_queue_.Append(id);
  }
}

void BlockPool::CacheFullBlocks(std::span<const BlockHash> block_hashes,
                                std::span<const int32_t> block_ids, int32_t num_cached_blocks,
                                int32_t num_full_blocks, std::span<const int32_t> token_ids,
                                int32_t block_size) {
  VLLM_CHECK(num_full_blocks <= static_cast<int32_t>(block_hashes.size()) &&
             num_full_blocks <= static_cast<int32_t>(block_ids.size()))
      << "caching " << num_full_blocks << " blocks with " << block_hashes.size() << " hashes";
  for (int32_t i = num_cached_blocks; i < num_full_blocks; ++i) {
    KVCacheBlock& block = blocks_[block_ids[i]];
    // A block reused from the prefix cache already carries this hash.
    if (block.has_hash) continue;
    block.has_hash = true;
    block.block_hash = block_hashes[i];
    auto [it, inserted] = cached_block_hash_to_block_.try_emplace(block.block_hash, block.block_id);
    if (!inserted) {
      // A duplicate: chain it behind the first block with this hash.
      KVCacheBlock& first = blocks_[it->second];
      block.next_same_hash = first.next_same_hash;
      first.next_same_hash = block.block_id;
    }
  }
  if (enable_kv_cache_events_ && num_cached_blocks < num_full_blocks) {
    VLLM_CHECK(block_size > 0 &&
               static_cast<int64_t>(token_ids.size()) >= int64_t{num_full_blocks} * block_size)
        << "BlockStored needs the tokens of " << num_full_blocks << " blocks of " << block_size;
    kv_events::KvBlockStored stored;
    stored.block_hashes.reserve(num_full_blocks - num_cached_blocks);
    for (int32_t i = num_cached_blocks; i < num_full_blocks; ++i) {
      stored.block_hashes.push_back(block_hashes[i].low);
    }
    if (num_cached_blocks > 0) stored.parent_block_hash = block_hashes[num_cached_blocks - 1].low;
    stored.token_ids.assign(token_ids.begin() + int64_t{num_cached_blocks} * block_size,
                            token_ids.begin() + int64_t{num_full_blocks} * block_size);
    stored.block_size = block_size;
    stored.medium = kMediumGpu;
    stored.group_idx = 0;
    stored.kv_cache_spec_kind = kFullAttention;
    kv_event_queue_.emplace_back(std::move(stored));
  }
}

void BlockPool::MaybeEvictCachedBlock(KVCacheBlock& block) {
  if (!block.has_hash) return;
  auto it = cached_block_hash_to_block_.find(block.block_hash);
  VLLM_CHECK(it != cached_block_hash_to_block_.end()) << "hashed block missing from the map";
  if (it->second == block.block_id) {
    if (block.next_same_hash >= 0) {
      it->second = block.next_same_hash;
    } else {
      cached_block_hash_to_block_.erase(it);
    }
  } else {
    int32_t prev = it->second;
    while (blocks_[prev].next_same_hash != block.block_id) {
      prev = blocks_[prev].next_same_hash;
      VLLM_CHECK(prev >= 0) << "hashed block " << block.block_id << " missing from its chain";
    }
    blocks_[prev].next_same_hash = block.next_same_hash;
  }
  if (enable_kv_cache_events_) {
    kv_events::KvBlockRemoved removed;
    removed.block_hashes = {block.block_hash.low};
    removed.medium = kMediumGpu;
    removed.group_idx = 0;
    kv_event_queue_.emplace_back(std::move(removed));
  }
  block.next_same_hash = -1;
  block.has_hash = false;
  block.block_hash = BlockHash{};
}

bool BlockPool::ResetPrefixCache() {
  if (GetNumFreeBlocks() != num_blocks()) return false;
  cached_block_hash_to_block_.clear();
  for (KVCacheBlock& block : blocks_) {
    block.next_same_hash = -1;
    block.has_hash = false;
    block.block_hash = BlockHash{};
  }
  if (enable_kv_cache_events_) kv_event_queue_.emplace_back(kv_events::KvAllBlocksCleared{});
  return true;
}

std::vector<kv_events::KvEvent> BlockPool::TakeEvents() {
  std::vector<kv_events::KvEvent> events;
  events.swap(kv_event_queue_);
  return events;
}

}  // namespace vllm::core
