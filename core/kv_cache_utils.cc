#include "core/kv_cache_utils.h"

#include <cstring>

#include "base/status_macros.h"
#include "xxhash.h"

namespace vllm::core {

BlockHash HashBlockTokens(const BlockHash& parent, std::span<const int32_t> token_ids,
                          std::string_view extra_key) {
  // Layout: parent.low, parent.high, token ids (little-endian int32 as in memory),
  // then, only when an extra key exists, its length (uint64) and bytes.
  constexpr size_t kInline = 16 + 64 * sizeof(int32_t) + 8 + 64;
  const size_t token_bytes = token_ids.size() * sizeof(int32_t);
  const size_t extra_bytes = extra_key.empty() ? 0 : sizeof(uint64_t) + extra_key.size();
  const size_t size = 16 + token_bytes + extra_bytes;
  unsigned char inline_buffer[kInline];
  std::vector<unsigned char> heap_buffer;
  unsigned char* buffer = inline_buffer;
  if (size > kInline) {
    heap_buffer.resize(size);
    buffer = heap_buffer.data();
  }
  std::memcpy(buffer, &parent.low, 8);
  std::memcpy(buffer + 8, &parent.high, 8);
  if (token_bytes > 0) std::memcpy(buffer + 16, token_ids.data(), token_bytes);
  if (!extra_key.empty()) {
    const uint64_t len = extra_key.size();
    std::memcpy(buffer + 16 + token_bytes, &len, sizeof(len));
    std::memcpy(buffer + 16 + token_bytes + sizeof(len), extra_key.data(), extra_key.size());
  }
  const XXH128_hash_t h = XXH3_128bits(buffer, size);
  return BlockHash{h.low64, h.high64};
}

void ExtendBlockHashes(std::span<const int32_t> token_ids, int32_t block_size,
                       std::string_view cache_salt, std::vector<BlockHash>* block_hashes) {
  const size_t num_full_blocks = token_ids.size() / static_cast<size_t>(block_size);
  for (size_t i = block_hashes->size(); i < num_full_blocks; ++i) {
    const BlockHash& parent = i == 0 ? kNoneHash : (*block_hashes)[i - 1];
    block_hashes->push_back(HashBlockTokens(parent, token_ids.subspan(i * block_size, block_size),
                                            i == 0 ? cache_salt : std::string_view()));
  }
}

FreeKVCacheBlockQueue::FreeKVCacheBlockQueue(std::vector<KVCacheBlock>* blocks) : blocks_(*blocks) {
  for (KVCacheBlock& block : blocks_) {
    block.prev_free = block.next_free = -1;
    Append(block.block_id);
  }
}

int32_t FreeKVCacheBlockQueue::PopLeft() {
  VLLM_CHECK(head_ >= 0) << "PopLeft on an empty free-block queue";
  const int32_t id = head_;
  Remove(id);
  return id;
}

void FreeKVCacheBlockQueue::Remove(int32_t block_id) {
  KVCacheBlock& block = blocks_[block_id];
  VLLM_CHECK(block.prev_free >= 0 || head_ == block_id)
      << "block " << block_id << " is not in the free queue";
  if (block.prev_free >= 0) {
    blocks_[block.prev_free].next_free = block.next_free;
  } else {
    head_ = block.next_free;
  }
  if (block.next_free >= 0) {
    blocks_[block.next_free].prev_free = block.prev_free;
  } else {
    tail_ = block.prev_free;
  }
  block.prev_free = block.next_free = -1;
  --num_free_blocks_;
}

void FreeKVCacheBlockQueue::Append(int32_t block_id) {
  KVCacheBlock& block = blocks_[block_id];
  VLLM_CHECK(block.prev_free < 0 && block.next_free < 0 && head_ != block_id)
      << "block " << block_id << " is already in the free queue";
  block.prev_free = tail_;
  block.next_free = -1;
  if (tail_ >= 0) {
    blocks_[tail_].next_free = block_id;
  } else {
    head_ = block_id;
  }
  tail_ = block_id;
  ++num_free_blocks_;
}

std::vector<int32_t> FreeKVCacheBlockQueue::GetAllFreeBlocks() const {
  std::vector<int32_t> ids;
  ids.reserve(num_free_blocks_);
  for (int32_t id = head_; id >= 0; id = blocks_[id].next_free) ids.push_back(id);
  return ids;
}

}  // namespace vllm::core
