// The worker side of a KV connector (vLLM's KVConnectorBase_V1 worker role: start_load_kv,
// wait_for_save, get_finished; vllm/distributed/kv_transfer/kv_connector/v1/base.py). The
// scheduler side is core/kv_connector.h; what passes between them is kv_transfer/types.h.
//
// Each step, before the forward pass (BeginStep): stop serving the held requests the scheduler
// released (their blocks may be rewritten in this very step), start serving the newly held
// ones, and start the loads. After it (EndStep): store what the step computed (ExampleConnector
// writes its files here, after the whole forward pass: on the CPU there is no transfer to
// overlap with the layers) and report the transfers that completed.
//
// With tensor parallelism every rank moves its own heads' share of each block, and a transfer
// is reported only once every rank of the group finished it: the ranks agree over the group's
// all-reduce (one small vector per step while transfers are pending), so the output rank's
// report speaks for all of them.
//
// Thread-safety: none; the worker's thread calls it (the transports run their own threads).
#ifndef VLLM_WORKER_KV_CONNECTOR_H_
#define VLLM_WORKER_KV_CONNECTOR_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "kernels/communicator.h"
#include "kv_transfer/kv_cache_view.h"
#include "kv_transfer/types.h"

namespace vllm::worker {

class KVConnectorWorker {
 public:
  virtual ~KVConnectorWorker() = default;

  // Before the step's forward pass.
  [[nodiscard]] virtual absl::Status BeginStep(
      const std::optional<kv_transfer::KVConnectorMetadata>& metadata) = 0;
  // After it: the transfers finished by every rank since the last call.
  [[nodiscard]] virtual absl::StatusOr<kv_transfer::KVConnectorOutput> EndStep() = 0;
};

// The transfers a rank has pending, in the order the scheduler started them (the same on every
// rank of the group), and the group's verdict on them: a transfer is reported once every rank
// finished it, as failed when any rank's load failed.
class RankAgreement {
 public:
  // `comm` (not owned; null: a group of one).
  explicit RankAgreement(kernels::Communicator* comm);
  void AddLoad(const std::string& req_id);
  void LoadDone(const std::string& req_id, bool ok);
  void AddSend(const std::string& req_id);
  void SendDone(const std::string& req_id);
  // A held request the scheduler released (the lease ran out): no longer reported.
  void RemoveSend(const std::string& req_id);
  bool has_pending_load(const std::string& req_id) const { return loads_.contains(req_id); }
  // Runs one all-reduce over the group when anything is pending (every rank calls it in the same
  // step, having seen the same metadata), and returns what every rank finished.
  [[nodiscard]] absl::StatusOr<kv_transfer::KVConnectorOutput> Agree();

 private:
  enum State : uint8_t { kPending, kOk, kFailed };
  kernels::Communicator* const comm_;
  absl::flat_hash_map<std::string, State> loads_;
  std::vector<std::string> load_order_;
  absl::flat_hash_map<std::string, bool> sends_;
  std::vector<std::string> send_order_;
};

// The connector config.kv_transfer names, over `view` (this rank's cache; it must outlive the
// connector). `comm` (not owned, outlives it): the tensor-parallel group. `cluster_key_file`
// (may be empty): CURVE keys for the NixlConnector's sockets. Null when no connector is
// configured; InvalidArgument for what is not built (a CUDA cache, pipeline parallelism).
[[nodiscard]] absl::StatusOr<std::unique_ptr<KVConnectorWorker>> MakeKVConnectorWorker(
    const config::VllmConfig& config, const kv_transfer::KvCacheView& view,
    kernels::Communicator* comm, const std::string& cluster_key_file);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_KV_CONNECTOR_H_
