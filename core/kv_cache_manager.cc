#include "core/kv_cache_manager.h"

#include <algorithm>

#include "base/status_macros.h"

namespace vllm::core {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, int32_t max_model_len,
                               bool enable_caching, bool enable_kv_cache_events,
                               int32_t sliding_window)
    : block_size_(block_size),
      max_model_len_(max_model_len),
      enable_caching_(enable_caching),
      sliding_window_(sliding_window),
      block_pool_(num_blocks, enable_caching, enable_kv_cache_events) {
  VLLM_CHECK(block_size > 0) << "block_size must be positive, got " << block_size;
  VLLM_CHECK(sliding_window >= 0) << "sliding_window must be >= 0, got " << sliding_window;
}

KVCacheManager::ComputedBlocks KVCacheManager::GetComputedBlocks(Request& request) {
  ComputedBlocks result;
  // A request asking for prompt logprobs needs every prompt position's logits, which cached
  // blocks no longer have: it never reads the cache (vLLM's skip_reading_prefix_cache). Its
  // blocks are still registered for others.
  if (!enable_caching_ || request.sampling_params.prompt_logprobs.has_value()) return result;
  ExtendBlockHashes(request.all_token_ids, block_size_, request.cache_salt, &request.block_hashes);
  // A full hit would leave nothing to compute; the last token must be recomputed to get
  // logits, so the hit may cover at most num_tokens - 1 tokens.
  const int32_t max_blocks = (request.num_tokens() - 1) / block_size_;
  for (int32_t i = 0; i < max_blocks; ++i) {
    std::optional<int32_t> block = block_pool_.GetCachedBlock(request.block_hashes[i]);
    if (!block.has_value()) break;
    result.block_ids.push_back(*block);
  }
  result.num_computed_tokens = static_cast<int32_t>(result.block_ids.size()) * block_size_;
  ++prefix_cache_stats_.requests;
  prefix_cache_stats_.queries += request.num_tokens();
  prefix_cache_stats_.hits += result.num_computed_tokens;
  return result;
}

std::optional<std::span<const int32_t>> KVCacheManager::AllocateSlots(
    Request& request, int32_t num_new_tokens, int32_t num_new_computed_tokens,
    std::span<const int32_t> new_computed_blocks, int32_t num_lookahead_tokens,
    bool delay_cache_blocks) {
  VLLM_CHECK(num_new_tokens > 0) << "AllocateSlots needs num_new_tokens > 0";
  VLLM_CHECK(new_computed_blocks.empty() || request.block_ids.empty())
      << "cache hits can only be adopted by a request without blocks";
  if (sliding_window_ > 0) RemoveSkippedBlocks(request);
  const int32_t num_computed_tokens = request.num_computed_tokens + num_new_computed_tokens;
  const int32_t num_tokens_need_slot =
      std::min(num_computed_tokens + num_new_tokens + num_lookahead_tokens, max_model_len_);
  const int32_t num_required_blocks = (num_tokens_need_slot + block_size_ - 1) / block_size_;
  const int32_t num_held =
      static_cast<int32_t>(new_computed_blocks.size() + request.block_ids.size());
  const int32_t num_new_blocks = std::max(0, num_required_blocks - num_held);
  // A cache hit on a free block takes that block out of the free queue, so it counts
  // against the free blocks like a new allocation.
  int32_t num_evictable_computed_blocks = 0;
  for (int32_t id : new_computed_blocks) {
    if (block_pool_.block(id).ref_cnt == 0) ++num_evictable_computed_blocks;
  }
  if (num_new_blocks + num_evictable_computed_blocks > block_pool_.GetNumFreeBlocks()) {
    return std::nullopt;
  }
  if (!new_computed_blocks.empty()) {
    block_pool_.Touch(new_computed_blocks);
    request.block_ids.assign(new_computed_blocks.begin(), new_computed_blocks.end());
    request.num_cached_blocks = static_cast<int32_t>(new_computed_blocks.size());
  }
  const size_t old_size = request.block_ids.size();
  if (num_new_blocks > 0) block_pool_.GetNewBlocks(num_new_blocks, &request.block_ids);
  // Most decode steps fill no block: skip the call.
  if (enable_caching_ && !delay_cache_blocks &&
      request.num_cached_blocks <
          std::min(num_computed_tokens + num_new_tokens, request.num_tokens()) / block_size_) {
    CacheBlocks(request, std::min(num_computed_tokens + num_new_tokens, request.num_tokens()));
  }
  return std::span<const int32_t>(request.block_ids).subspan(old_size);
}

void KVCacheManager::CacheBlocks(Request& request, int32_t num_tokens) {
  if (!enable_caching_) return;
  const int32_t num_full_blocks = num_tokens / block_size_;
  if (request.num_cached_blocks >= num_full_blocks) return;
  ExtendBlockHashes(request.all_token_ids, block_size_, request.cache_salt, &request.block_hashes);
  block_pool_.CacheFullBlocks(request.block_hashes, request.block_ids, request.num_cached_blocks,
                              num_full_blocks, request.all_token_ids, block_size_);
  request.num_cached_blocks = num_full_blocks;
}

void KVCacheManager::RemoveSkippedBlocks(Request& request) {
  // The earliest position any later query sees is num_computed_tokens - window + 1; blocks
  // wholly before it are dead. Walk back from the last dead block to the first already freed
  // (they are freed front to back), newest first as vLLM's free order.
  const int64_t skipped_tokens =
      std::max<int64_t>(0, int64_t{request.num_computed_tokens} - sliding_window_ + 1);
  const auto dead = static_cast<int32_t>(std::min<int64_t>(
      skipped_tokens / block_size_, static_cast<int64_t>(request.block_ids.size())));
  // Freed blocks were full and computed in earlier steps, so they are already registered
  // in the prefix cache (index < num_cached_blocks) when caching is on.
  std::vector<int32_t> removed;
  for (int32_t i = dead - 1; i >= 0 && request.block_ids[i] != kNullBlock; --i) {
    removed.push_back(request.block_ids[i]);
    request.block_ids[i] = kNullBlock;
  }
  if (!removed.empty()) block_pool_.FreeBlocks(removed);
}

void KVCacheManager::Free(Request& request) {
  // Tail first: the request's last blocks become the first eviction candidates, and the
  // leading (most shareable) blocks the last.
  std::reverse(request.block_ids.begin(), request.block_ids.end());
  std::erase(request.block_ids, kNullBlock);
  block_pool_.FreeBlocks(request.block_ids);
  request.block_ids.clear();
  request.num_cached_blocks = 0;
}

PrefixCacheStats KVCacheManager::MakePrefixCacheStats() {
  PrefixCacheStats stats = prefix_cache_stats_;
  prefix_cache_stats_ = PrefixCacheStats{};
  return stats;
}

bool KVCacheManager::ResetPrefixCache() {
  if (!block_pool_.ResetPrefixCache()) return false;
  prefix_cache_stats_.reset = true;
  return true;
}

}  // namespace vllm::core
