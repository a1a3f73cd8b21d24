// KVCacheConfig: the KV cache as the engine sized it (vLLM's KVCacheConfig,
// vllm/v1/kv_cache_interface.py) — what is derived from the model and the workers' memory
// rather than given by the user. The user's settings (block size, prefix caching, KV events)
// stay in config::VllmConfig; the scheduler reads both.
#ifndef VLLM_CORE_KV_CACHE_CONFIG_H_
#define VLLM_CORE_KV_CACHE_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "config/vllm_config.h"

namespace vllm::core {

struct KVCacheConfig {
  // Blocks of config.cache.block_size tokens (EngineCore sizes them from the workers' memory,
  // or takes --num-gpu-blocks-override).
  int32_t num_blocks = 0;
  // > 0 when every attention layer sees only the last `sliding_window` positions (from the
  // model's config.json): blocks that fall out of the window are freed while the request runs
  // (vLLM's SlidingWindowManager), and the cache only needs to hold a window per request. 0 when
  // any layer attends to the whole context (those keep every block).
  int32_t sliding_window = 0;

  friend bool operator==(const KVCacheConfig&, const KVCacheConfig&) = default;
};

// InvalidArgument when `kv_cache` cannot serve `config` (a resolved config:
// VllmConfig::CheckResolved): no block, a negative window, or a cache too small for one
// request of max_model_len tokens (with a sliding window: for the window plus one step's
// tokens). The message names max_model_len and the numbers.
[[nodiscard]] absl::Status ValidateKVCacheConfig(const config::VllmConfig& config,
                                                 const KVCacheConfig& kv_cache);

}  // namespace vllm::core

#endif  // VLLM_CORE_KV_CACHE_CONFIG_H_
