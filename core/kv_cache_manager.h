// KVCacheManager: paged KV-cache allocation with prefix caching for one full-attention KV
// cache group (vLLM's vllm/v1/core/kv_cache_manager.py with its single-type manager).
//
// Each request's block table lives in the Request (Request::block_ids, written only here).
// Prefix caching: every full block is registered under a chained hash of (parent hash,
// tokens, cache salt); a new request reuses the longest run of registered leading blocks,
// adding a reference to each. A freed block keeps its hash in the free queue until it is
// evicted (taken for other tokens). Requests free their blocks tail first, so the blocks
// of a shared prefix stay cached longest.
//
// Sliding window (every layer sees only the last `sliding_window` positions): at each
// allocation the blocks wholly before the window of the request's computed tokens are freed
// and their entries in Request::block_ids become kNullBlock (vLLM's SlidingWindowManager with
// its null block). Workers keep the old ids in their block tables; attention never reads
// them. Cache hits still need the whole prefix (vLLM's sliding-window lookup can hit on the
// window alone: a missed hit here costs compute, never correctness).
//
// Not thread-safe: owned and used by the scheduler thread.
#ifndef VLLM_CORE_KV_CACHE_MANAGER_H_
#define VLLM_CORE_KV_CACHE_MANAGER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_pool.h"
#include "core/engine_core_types.h"
#include "core/request.h"

namespace vllm::core {

class KVCacheManager {
 public:
  // A block-table entry whose block was freed because it fell out of the sliding window.
  static constexpr int32_t kNullBlock = -1;

  // `num_blocks` blocks of `block_size` tokens each. Both must be positive (checked).
  // `enable_kv_cache_events`: the block pool records vLLM's KV-cache events (TakeEvents).
  // `sliding_window` > 0: every layer's window (blocks outside it are freed); 0: none.
  KVCacheManager(int32_t num_blocks, int32_t block_size, int32_t max_model_len, bool enable_caching,
                 bool enable_kv_cache_events = false, int32_t sliding_window = 0);
  KVCacheManager(const KVCacheManager&) = delete;
  KVCacheManager& operator=(const KVCacheManager&) = delete;

  // The longest prefix of `request` found in the cache, in whole blocks, never covering the
  // last token (at least one token must be computed to sample from). Counts one lookup in
  // the prefix-cache stats. Empty (and no lookup counted) when caching is off or the request
  // asks for prompt_logprobs. Does not take references: pass the
  // result to AllocateSlots before anything else allocates.
  struct ComputedBlocks {
    std::vector<int32_t> block_ids;
    int32_t num_computed_tokens = 0;
  };
  ComputedBlocks GetComputedBlocks(Request& request);

  // Makes room for `num_new_tokens` more tokens of `request` (plus `num_lookahead_tokens`),
  // after adopting `new_computed_blocks` (from GetComputedBlocks; only for a request with no
  // blocks yet) that hold `num_new_computed_tokens` tokens. Registers the blocks that
  // become full in the prefix cache.
  //
  // With a sliding window, first frees the request's blocks that fell out of the window of
  // its computed tokens (always, whether or not the allocation then succeeds).
  //
  // Returns the blocks newly taken from the free queue (a view into request.block_ids, valid
  // until the request's table changes), or nullopt — leaving everything else unchanged —
  // when there are not enough free blocks. Requires num_new_tokens > 0.
  // `delay_cache_blocks`: register nothing now (vLLM's delay_cache_blocks: the KV connector
  // loads the new tokens asynchronously; CacheBlocks once they arrived).
  std::optional<std::span<const int32_t>> AllocateSlots(
      Request& request, int32_t num_new_tokens, int32_t num_new_computed_tokens = 0,
      std::span<const int32_t> new_computed_blocks = {}, int32_t num_lookahead_tokens = 0,
      bool delay_cache_blocks = false);

  // True when AllocateSlots(request, num_new_tokens, 0, {}, num_lookahead_tokens) would
  // succeed and change nothing (most decode steps: no new block, no block filled), so the
  // caller may skip it.
  bool AllocateSlotsIsNoop(const Request& request, int32_t num_new_tokens,
                           int32_t num_lookahead_tokens) const {
    if (sliding_window_ > 0) return false;
    const int32_t end = request.num_computed_tokens + num_new_tokens;
    if (std::min(end + num_lookahead_tokens, max_model_len_) >
        static_cast<int32_t>(request.block_ids.size()) * block_size_) {
      return false;
    }
    return !enable_caching_ ||
           request.num_cached_blocks >= std::min(end, request.num_tokens()) / block_size_;
  }

  // Tokens of `request` covered by its blocks registered in the prefix cache (vLLM's
  // estimate_cached_tokens: the largest block_hash_num_tokens of its blocks); 0 without
  // prefix caching.
  int32_t EstimateCachedTokens(const Request& request) const {
    return enable_caching_ ? request.num_cached_blocks * block_size_ : 0;
  }

  // Registers the request's blocks that are full once it has `num_tokens` tokens computed
  // (no-op without prefix caching).
  void CacheBlocks(Request& request, int32_t num_tokens);

  // Releases the request's blocks (kNullBlock entries skipped), last block first; blocks keep
  // their hashes.
  void Free(Request& request);

  // Fraction of blocks in use.
  double GetUsage() const { return block_pool_.GetUsage(); }
  // Prefix-cache counters since the previous call; resets them.
  PrefixCacheStats MakePrefixCacheStats();
  // Forgets every cached prefix; fails (returns false) while any block is in use.
  bool ResetPrefixCache();

  // The block pool's KV-cache events since the last call (vLLM's take_events).
  std::vector<kv_events::KvEvent> TakeEvents() { return block_pool_.TakeEvents(); }

  int32_t block_size() const { return block_size_; }
  int32_t sliding_window() const { return sliding_window_; }
  bool enable_caching() const { return enable_caching_; }
  const BlockPool& block_pool() const { return block_pool_; }

 private:
  // Sliding window: frees the blocks no position from num_computed_tokens on can see.
  void RemoveSkippedBlocks(Request& request);

  const int32_t block_size_;
  const int32_t max_model_len_;
  const bool enable_caching_;
  const int32_t sliding_window_;
  BlockPool block_pool_;
  PrefixCacheStats prefix_cache_stats_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_KV_CACHE_MANAGER_H_
