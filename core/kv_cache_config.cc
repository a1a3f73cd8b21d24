#include "core/kv_cache_config.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace vllm::core {

absl::Status ValidateKVCacheConfig(const config::VllmConfig& config,
                                   const KVCacheConfig& kv_cache) {
  const int32_t num_blocks = kv_cache.num_blocks;
  const int32_t sliding_window = kv_cache.sliding_window;
  const int32_t block_size = config.cache.block_size;
  const int32_t max_model_len = config.model.max_model_len;
  const int32_t max_num_batched_tokens = config.scheduler.max_num_batched_tokens;
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_gpu_blocks must be at least 1, got %d", num_blocks));
  }
  if (sliding_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sliding_window must be >= 0, got %d", sliding_window));
  }
  const int64_t max_tokens_cached = int64_t{num_blocks} * block_size;
  if (sliding_window > 0) {
    // One request holds at most the window behind its computed tokens plus one step's new
    // tokens, and one block more where the window starts mid-block (vLLM's
    // SlidingWindowSpec.max_memory_usage_bytes).
    const int64_t tokens =
        std::min<int64_t>(int64_t{sliding_window} - 1 + max_num_batched_tokens, max_model_len);
    const int64_t blocks =
        std::min<int64_t>((tokens + block_size - 1) / block_size + 1,
                          (int64_t{max_model_len} + block_size - 1) / block_size);
    if (num_blocks < blocks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the KV cache has %d blocks of %d tokens, fewer than the %d one request may hold "
          "(sliding window %d, max_num_batched_tokens %d, max_model_len %d); give the cache "
          "more memory",
          num_blocks, block_size, blocks, sliding_window, max_num_batched_tokens, max_model_len));
    }
    return absl::OkStatus();
  }
  if (max_tokens_cached < max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the KV cache holds %d tokens (%d blocks of %d), fewer than max_model_len (%d); "
        "lower max_model_len or give the cache more memory",
        max_tokens_cached, num_blocks, block_size, max_model_len));
  }
  return absl::OkStatus();
}

}  // namespace vllm::core
