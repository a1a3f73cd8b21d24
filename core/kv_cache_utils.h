// Building blocks of the paged KV cache (vLLM's vllm/v1/core/kv_cache_utils.py): the
// block hash used by prefix caching, the per-block metadata, and the free-block queue.
#ifndef VLLM_CORE_KV_CACHE_UTILS_H_
#define VLLM_CORE_KV_CACHE_UTILS_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace vllm::core {

// 128-bit XXH3 hash of one full block of tokens, chained through its parent block's hash
// (so equal hashes mean equal prefixes, not just equal blocks).
struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.low, b.high);
  }
};

// Parent hash of a request's first block.
inline constexpr BlockHash kNoneHash{0x9e3779b97f4a7c15ULL, 0x6a09e667f3bcc908ULL};

// Hashes one full block: XXH3-128 over (parent hash, the block's token ids, extra keys).
// `extra_key` is the cache salt for a request's first block and empty otherwise (vLLM salts
// only the first block; the chain carries it to the others). The encoding is unambiguous:
// the token count is fixed per cache and the extra key is length-prefixed.
BlockHash HashBlockTokens(const BlockHash& parent, std::span<const int32_t> token_ids,
                          std::string_view extra_key);

// Extends `block_hashes` (the hashes of `token_ids`' first full blocks) to cover every full
// block of `token_ids`. Idempotent; O(new blocks).
void ExtendBlockHashes(std::span<const int32_t> token_ids, int32_t block_size,
                       std::string_view cache_salt, std::vector<BlockHash>* block_hashes);

// Metadata of one KV-cache block. Owned by the BlockPool; everything else refers to blocks
// by id. Invariant: ref_cnt == 0 exactly when the block is in the free queue.
struct KVCacheBlock {
  int32_t block_id = 0;
  // Number of block tables (requests) holding the block.
  int32_t ref_cnt = 0;
  // Set while the block is full and registered in the prefix cache; kept after the block
  // is freed, until it is evicted (reused for other tokens).
  bool has_hash = false;
  BlockHash block_hash;
  // Intrusive links of the free queue (block ids; -1 = none).
  int32_t prev_free = -1;
  int32_t next_free = -1;
  // Next block registered under the same hash (duplicates; -1 = none).
  int32_t next_same_hash = -1;
};

// Free blocks as an intrusive doubly-linked list over KVCacheBlock::prev_free/next_free,
// ordered for eviction: the head is the least recently used block and is taken first.
// Freed blocks are appended at the tail; a cache hit removes a block from the middle in
// O(1). Not thread-safe; owned by a BlockPool, which owns the blocks it links.
class FreeKVCacheBlockQueue {
 public:
  // Links all `blocks` in id order.
  explicit FreeKVCacheBlockQueue(std::vector<KVCacheBlock>* blocks);

  int32_t num_free_blocks() const { return num_free_blocks_; }
  // The block PopLeft takes next; -1 when empty.
  int32_t head() const { return head_; }
  // Removes and returns the head. Requires num_free_blocks() > 0.
  int32_t PopLeft();
  // Removes a block that is in the queue.
  void Remove(int32_t block_id);
  // Appends a block that is not in the queue.
  void Append(int32_t block_id);
  // The ids from head to tail (for tests and invariant checks; O(n)).
  std::vector<int32_t> GetAllFreeBlocks() const;

 private:
  std::vector<KVCacheBlock>& blocks_;
  int32_t head_ = -1;
  int32_t tail_ = -1;
  int32_t num_free_blocks_ = 0;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_KV_CACHE_UTILS_H_
