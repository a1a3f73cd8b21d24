// The worker side of our NixlConnector (vLLM's NixlConnectorWorker, pull mode): a prefill
// rank serves the blocks of held requests (kv_transfer::BlockServer on the side channel's
// port + TP rank); a decode rank reads a request's blocks from the prefill rank of the same TP
// rank (kv_transfer::BlockReader) into the blocks the scheduler allocated for it. The
// transport is ZMQ over TCP (docs/DECISIONS.md: why not UCX); every socket uses CURVE with the
// cluster key when one is given.
#ifndef VLLM_WORKER_KV_CONNECTOR_NIXL_H_
#define VLLM_WORKER_KV_CONNECTOR_NIXL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/kv_connector.h"
#include "kernels/communicator.h"
#include "kv_transfer/kv_cache_view.h"
#include "worker/kv_connector.h"

namespace vllm::worker {

// Binds this rank's BlockServer at side_channel.host:side_channel.port + view.layout.tp_rank
// and starts its BlockReader. Unavailable when the port is taken.
[[nodiscard]] absl::StatusOr<std::unique_ptr<KVConnectorWorker>> MakeNixlConnectorWorker(
    const std::string& engine_id, const core::SideChannel& side_channel,
    const kv_transfer::KvCacheView& view, kernels::Communicator* comm,
    const std::string& cluster_key_file);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_KV_CONNECTOR_NIXL_H_
