// BlockPool: owns every KV-cache block's metadata, the free queue and the prefix-cache map
// from block hash to blocks (vLLM's vllm/v1/core/block_pool.py).
//
// Not thread-safe: owned by the KVCacheManager, which the scheduler thread owns.
#ifndef VLLM_CORE_BLOCK_POOL_H_
#define VLLM_CORE_BLOCK_POOL_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/kv_cache_utils.h"
#include "kv_events/kv_events.h"

namespace vllm::core {

class BlockPool {
 public:
  // All `num_blocks` blocks start free, in id order. With `enable_kv_cache_events` the pool
  // records vLLM's KV-cache events (TakeEvents) where vLLM's block_pool.py does: BlockStored
  // when CacheFullBlocks registers blocks, BlockRemoved when a registered block is evicted,
  // AllBlocksCleared when ResetPrefixCache succeeds. A block's external hash is the `low` word
  // of its BlockHash (for the blocks and their parent alike). Without it nothing is recorded.
  BlockPool(int32_t num_blocks, bool enable_caching, bool enable_kv_cache_events = false);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t GetNumFreeBlocks() const { return free_queue_.num_free_blocks(); }
  // Fraction of blocks in use, in [0, 1].
  double GetUsage() const;
  const KVCacheBlock& block(int32_t block_id) const { return blocks_[block_id]; }
  const FreeKVCacheBlockQueue& free_queue() const { return free_queue_; }
  size_t num_cached_hashes() const { return cached_block_hash_to_block_.size(); }

  // A block registered under `block_hash`, free or in use, if any.
  std::optional<int32_t> GetCachedBlock(const BlockHash& block_hash) const;

  // Takes `num_blocks` blocks from the head of the free queue (least recently used first),
  // evicting their prefix-cache entries, and appends their ids to `out` with ref_cnt 1.
  // Requires num_blocks <= GetNumFreeBlocks() (a bug otherwise).
  void GetNewBlocks(int32_t num_blocks, std::vector<int32_t>* out);

  // Adds a reference to each block (cache hits); a block with no references leaves the free
  // queue, so it cannot be evicted while in use.
  void Touch(std::span<const int32_t> block_ids);

  // Drops one reference from each block, in the given order; blocks reaching zero join the
  // free queue's tail in that order (so the first ones given are evicted first).
  void FreeBlocks(std::span<const int32_t> block_ids);

  // Registers the now-full blocks block_ids[num_cached_blocks, num_full_blocks) under
  // block_hashes[i] (the hashes of the same positions). Blocks already hashed are skipped.
  // `token_ids` (the request's tokens, at least num_full_blocks * block_size of them) and
  // `block_size` feed the BlockStored event; unused when events are off.
  void CacheFullBlocks(std::span<const BlockHash> block_hashes, std::span<const int32_t> block_ids,
                       int32_t num_cached_blocks, int32_t num_full_blocks,
                       std::span<const int32_t> token_ids = {}, int32_t block_size = 0);

  // Drops every prefix-cache entry. Only possible when no block is in use (as in vLLM, so
  // that running requests keep consistent hashes); returns whether it happened.
  bool ResetPrefixCache();

  // The events recorded since the last call, oldest first (vLLM's take_events); empty when
  // events are off.
  std::vector<kv_events::KvEvent> TakeEvents();
  bool enable_kv_cache_events() const { return enable_kv_cache_events_; }

 private:
  // Prefetches what taking the free queue's head will touch.
  void PrefetchHead() const;
  // Removes `block`'s prefix-cache entry, if any.
  void MaybeEvictCachedBlock(KVCacheBlock& block);

  bool enable_caching_;
  bool enable_kv_cache_events_;
  std::vector<kv_events::KvEvent> kv_event_queue_;
  std::vector<KVCacheBlock> blocks_;
  FreeKVCacheBlockQueue free_queue_;
  // Hash -> first block registered under it. Several blocks may share a hash when requests
  // with the same prefix computed it concurrently; the others hang off the first through
  // KVCacheBlock::next_same_hash. Lookups return the first.
  absl::flat_hash_map<BlockHash, int32_t> cached_block_hash_to_block_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_BLOCK_POOL_H_
