// The scheduler side of the OffloadingConnector (vLLM's OffloadingConnector with its CPU
// spec, `--kv-offloading-size GiB`; vllm/distributed/kv_transfer/kv_connector/v1/
// offloading_connector.py): a bounded host-memory tier of KV blocks per worker rank, keyed by
// block hash, below the device's prefix cache.
//
// - Stores. Every full block a request computed (its prompt's only, under vLLM's default
//   offload_prompt_only) whose block hash is not in the tier gets a host slot, taking the least
//   recently used one when the tier is full, and is copied there by every rank after the
//   step's forward pass (SaveSpec.host_slots). Each block of a request is looked at once.
// - Loads. A waiting request whose leading blocks beyond its local prefix-cache hit are in the
//   tier (consecutive blocks, never its last prompt token's) loads them asynchronously: it waits
//   in kWaitingForRemoteKvs until the workers copied the slots into its device blocks
//   (LoadSpec.remote_block_ids are the host slots), then computes the rest. A request loads
//   once, again only after a preemption; a failed load is recomputed (kv_load_failure_policy).
//   Requests with prompt_logprobs never load (they read no cache).
// - The directory (hash → slot, LRU) lives here only; the workers hold the bytes and copy what
//   the metadata says, in order (a step's loads before its saves), so a slot reassigned in a
//   step is read by that step's loads before its saves overwrite it.
//
// kv_connector_extra_config keys: cpu_bytes_to_use (bytes over all TP ranks; required; set by
// --kv-offloading-size), offload_prompt_only (bool, default true), eviction_policy ("lru" only),
// block_size (tokens per offloaded block: only --block-size). Not built: vLLM's ARC eviction,
// multi-block chunks, a file or disk tier, store thresholds.
//
// Not thread-safe: the scheduler's thread owns the connector.
#ifndef VLLM_CORE_KV_CONNECTOR_OFFLOAD_H_
#define VLLM_CORE_KV_CONNECTOR_OFFLOAD_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "core/kv_connector.h"

namespace vllm::core {

// kv_connector_extra_config of the OffloadingConnector, checked.
struct OffloadingSettings {
  // Host memory for the tier over all TP ranks (vLLM: --kv-offloading-size × 2^30, floored).
  int64_t cpu_bytes_to_use = 0;
  // Store only blocks of the prompt (vLLM's default), not generated tokens' blocks.
  bool offload_prompt_only = true;
};

// Reads config.kv_transfer.kv_connector_extra_config. InvalidArgument naming the key for an
// unknown key, a wrong type, a missing or non-positive cpu_bytes_to_use, an eviction_policy
// other than "lru", or a block_size other than config.cache.block_size.
[[nodiscard]] absl::StatusOr<OffloadingSettings> ParseOffloadingSettings(
    const config::VllmConfig& config);

// Host slots of the tier, one block each, the same on every rank and in the scheduler:
// cpu_bytes_to_use / `block_bytes_all_ranks` (one block, every layer, K and V, summed over the
// TP ranks), at most INT32_MAX. InvalidArgument naming --kv-offloading-size when it holds no
// block, or for a bad extra config (ParseOffloadingSettings).
[[nodiscard]] absl::StatusOr<int32_t> OffloadingNumSlots(const config::VllmConfig& config,
                                                         int64_t block_bytes_all_ranks);

// The scheduler side described above, sized from context.block_bytes. InvalidArgument when
// prefix caching is off (--no-enable-prefix-caching: blocks have no hashes), for a bad extra
// config, or when the tier holds no block.
[[nodiscard]] absl::StatusOr<std::unique_ptr<KVConnectorScheduler>>
MakeOffloadingConnectorScheduler(const config::VllmConfig& config,
                                 const KVConnectorContext& context);

}  // namespace vllm::core

#endif  // VLLM_CORE_KV_CONNECTOR_OFFLOAD_H_
