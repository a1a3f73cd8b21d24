// The scheduler side of a KV connector (vLLM's KVConnectorBase_V1 scheduler role,
// vllm/distributed/kv_transfer/kv_connector/v1/base.py): what the scheduler asks a connector
// about each request, and what the connector tells the workers each step
// (kv_transfer::KVConnectorMetadata). The worker side is worker/kv_connector.h.
//
// Connectors (config::KvTransferConfig::kv_connector):
// - ExampleConnector (vLLM's debug connector, formerly SharedStorageConnector): a prompt's KV
//   is stored in files under kv_connector_extra_config.shared_storage_path (one file per TP
//   rank) once the prompt was computed, and loaded instead of computed when a request with the
//   same prompt (block-aligned, salt included) arrives.
// - NixlConnector (its protocol; our ZMQ/TCP transport, docs/DECISIONS.md): a request with
//   kv_transfer_params.do_remote_decode keeps its blocks after it finished (until the decode
//   side read them, or kv_lease_duration passed) and answers kv_transfer_params naming them; a
//   request with do_remote_prefill loads them from the prefill instance's workers.
// - OffloadingConnector (--kv-offloading-size; core/kv_connector_offload.h): full prefix-cache
//   blocks are copied to a bounded host-memory tier keyed by their block hash, and loaded back
//   on a prefix hit beyond the device cache.
//
// Loads are asynchronous (the request waits in kWaitingForRemoteKvs). Not thread-safe: the
// scheduler's thread owns a connector.
#ifndef VLLM_CORE_KV_CONNECTOR_H_
#define VLLM_CORE_KV_CONNECTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"
#include "core/request.h"
#include "kv_transfer/types.h"

namespace vllm::core {

class KVConnectorScheduler {
 public:
  virtual ~KVConnectorScheduler() = default;

  // The connector's name as configured ("ExampleConnector", "NixlConnector").
  virtual std::string_view name() const = 0;

  // Tokens of `request` beyond its `num_computed_tokens` (the local prefix-cache hit, whole
  // blocks) that the connector can load, and whether it loads them asynchronously (vLLM's
  // get_num_new_matched_tokens). Called once, when the request is first considered.
  struct Match {
    int32_t num_external_tokens = 0;
    bool load_async = false;
  };
  virtual Match GetNumNewMatchedTokens(const Request& request, int32_t num_computed_tokens) = 0;

  // After the blocks for a match were allocated (vLLM's update_state_after_alloc): the request's
  // block table covers its `num_local_blocks` leading blocks from the local prefix cache, then
  // the blocks that receive `num_external_tokens` tokens.
  virtual void UpdateStateAfterAlloc(const Request& request, int32_t num_local_blocks,
                                     int32_t num_external_tokens) = 0;

  // A request got tokens in the step being built; its num_computed_tokens already counts them
  // (ExampleConnector saves a prompt once it was computed).
  virtual void OnScheduled(const Request& /*request*/) {}

  // The metadata for the step being built (vLLM's build_connector_meta); resets what it sent.
  virtual kv_transfer::KVConnectorMetadata BuildConnectorMeta() = 0;

  // A request finished (any status; vLLM's request_finished): whether its blocks stay held
  // after it (the scheduler frees them when the workers report finished_sending, or when
  // TakeExpired names it), and the kv_transfer_params for its final output.
  struct Finished {
    bool delay_free_blocks = false;
    std::optional<kv_transfer::KVTransferParams> params;
  };
  virtual Finished RequestFinished(const Request& request) = 0;

  // Held requests whose lease ran out at `now`: the scheduler frees their blocks; the next
  // metadata tells the workers to stop serving them.
  virtual std::vector<std::string> TakeExpired(absl::Time /*now*/) { return {}; }
  // The workers reported these held requests read (their blocks are being freed).
  virtual void OnSendingFinished(std::span<const std::string> /*req_ids*/) {}
};

// Everything the connector needs besides the request. `engine_id`: the resolved
// kv_transfer.engine_id. `fingerprint`: the model and cache layout (stored entries of another
// model or layout never match). `block_bytes`: one KV-cache block (block_size tokens, every
// layer, K and V) summed over all tensor-parallel ranks, without a draft model's KV (the
// OffloadingConnector sizes its host tier with it; 0 when unknown).
struct KVConnectorContext {
  std::string engine_id;
  std::string fingerprint;
  int64_t block_bytes = 0;
};

// The connector config.kv_transfer names; null when none. InvalidArgument naming the key of
// kv_connector_extra_config that is wrong or unknown.
[[nodiscard]] absl::StatusOr<std::unique_ptr<KVConnectorScheduler>> MakeKVConnectorScheduler(
    const config::VllmConfig& config, const KVConnectorContext& context);

// ExampleConnector's directory: kv_connector_extra_config.shared_storage_path, default "/tmp"
// (vLLM's). InvalidArgument for a non-string or an unknown key of the extra config.
[[nodiscard]] absl::StatusOr<std::string> ExampleStoragePath(const config::VllmConfig& config);

// The NixlConnector's side channel: VLLM_NIXL_SIDE_CHANNEL_HOST (default "localhost") and
// VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600) + data-parallel rank × TP size; TP rank r of the
// engine serves (and a decode rank r reads from) port + r. InvalidArgument for a bad variable.
struct SideChannel {
  std::string host;
  int32_t port = 0;
};
[[nodiscard]] absl::StatusOr<SideChannel> ResolveSideChannel(const config::VllmConfig& config);

}  // namespace vllm::core

#endif  // VLLM_CORE_KV_CONNECTOR_H_
