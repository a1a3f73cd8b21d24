// The worker side of the OffloadingConnector (vLLM's OffloadingConnectorWorker with its CPU
// spec; the scheduler side and the whole design are core/kv_connector_offload.h): this rank's
// share of the host tier, num_slots blocks of view.layout.block_bytes() bytes each in wire
// order (kv_cache_view.h), num_slots as core::OffloadingNumSlots computes it for the scheduler.
// The buffer is an anonymous private mapping made at start-up (MAP_NORESERVE: pages cost
// memory only once a block was stored in them).
//
// BeginStep copies each load's host slots into its device blocks at once (before the forward
// pass) and queues the saves; EndStep copies the saves' device blocks into their host slots
// (after the forward pass wrote them), then reports the loads once every rank did them
// (RankAgreement). A load naming a block or slot out of range fails (the scheduler recomputes
// or fails the request under kv_load_failure_policy); such a save is skipped with a warning.
//
// Thread-safety: none; the worker's thread calls it.
#ifndef VLLM_WORKER_KV_CONNECTOR_OFFLOAD_H_
#define VLLM_WORKER_KV_CONNECTOR_OFFLOAD_H_

#include <memory>

#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "kernels/communicator.h"
#include "kv_transfer/kv_cache_view.h"
#include "worker/kv_connector.h"

namespace vllm::worker {

// The tier over `view` (this rank's cache; it outlives the connector). `comm` (not owned,
// outlives it; null: one rank): the tensor-parallel group. InvalidArgument for a bad
// kv_connector_extra_config or a tier that holds no block; ResourceExhausted when the mapping
// cannot be made.
[[nodiscard]] absl::StatusOr<std::unique_ptr<KVConnectorWorker>> MakeOffloadingConnectorWorker(
    const config::VllmConfig& config, const kv_transfer::KvCacheView& view,
    kernels::Communicator* comm);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_KV_CONNECTOR_OFFLOAD_H_
