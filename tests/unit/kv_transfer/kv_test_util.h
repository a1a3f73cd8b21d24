// Helpers of the kv_transfer transport tests: a KV cache on the heap behind a KvCacheView, and
// waiting for a condition with a deadline (no sleeps as synchronisation).
#ifndef VLLM_TESTS_UNIT_KV_TRANSFER_KV_TEST_UTIL_H_
#define VLLM_TESTS_UNIT_KV_TRANSFER_KV_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kv_transfer/kv_cache_view.h"

namespace vllm::kv_transfer::testing {

// The bundled model's shape (models/kjv-llama-tiny: 6 layers, 4 KV heads, head_dim 32),
// block size 16, float32.
inline KvLayout TinyLayout() {
  KvLayout l;
  l.num_layers = 6;
  l.num_kv_heads = 4;
  l.head_dim = 32;
  l.block_size = 16;
  l.dtype_bytes = 4;
  return l;
}

// One layer's K and V buffers per layer, num_blocks blocks each.
class HeapCache {
 public:
  HeapCache(const KvLayout& layout, int32_t num_blocks) {
    const size_t bytes = static_cast<size_t>(layout.layer_block_bytes()) * num_blocks;
    k_.resize(layout.num_layers, std::vector<uint8_t>(bytes));
    v_.resize(layout.num_layers, std::vector<uint8_t>(bytes));
    view_.layout = layout;
    view_.num_blocks = num_blocks;
    for (int32_t l = 0; l < layout.num_layers; ++l) {
      view_.k.push_back(k_[l].data());
      view_.v.push_back(v_[l].data());
    }
  }
  // A copy with its own buffers (the view points at them).
  HeapCache(const HeapCache& other) : HeapCache(other.view_.layout, other.view_.num_blocks) {
    for (size_t l = 0; l < k_.size(); ++l) {
      std::memcpy(k_[l].data(), other.k_[l].data(), k_[l].size());
      std::memcpy(v_[l].data(), other.v_[l].data(), v_[l].size());
    }
  }
  HeapCache& operator=(const HeapCache&) = delete;

  const KvCacheView& view() const { return view_; }

  // Fills every byte from a generator seeded with `seed`.
  void FillRandom(uint32_t seed) {
    std::mt19937 gen(seed);
    for (auto* layers : {&k_, &v_}) {
      for (auto& buffer : *layers) {
        for (auto& byte : buffer) byte = static_cast<uint8_t>(gen());
      }
    }
  }
  void Fill(uint8_t value) {
    for (auto* layers : {&k_, &v_}) {
      for (auto& buffer : *layers) std::memset(buffer.data(), value, buffer.size());
    }
  }
  // Fills block `block` (every layer, K and V) with `value`.
  void FillBlock(int32_t block, uint8_t value) {
    const size_t bytes = static_cast<size_t>(view_.layout.layer_block_bytes());
    for (int32_t l = 0; l < view_.layout.num_layers; ++l) {
      std::memset(view_.k[l] + block * bytes, value, bytes);
      std::memset(view_.v[l] + block * bytes, value, bytes);
    }
  }
  // Block `block` in wire order.
  std::vector<uint8_t> Block(int32_t block) const {
    std::vector<uint8_t> out(static_cast<size_t>(view_.layout.block_bytes()));
    CopyBlockOut(view_, block, out.data());
    return out;
  }

 private:
  std::vector<std::vector<uint8_t>> k_, v_;
  KvCacheView view_;
};

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
inline bool WaitFor(const std::function<bool()>& condition,
                    absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace vllm::kv_transfer::testing

#endif  // VLLM_TESTS_UNIT_KV_TRANSFER_KV_TEST_UTIL_H_
