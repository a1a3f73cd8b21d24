#include "worker/kv_connector_nixl.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ipc/zmq_util.h"
#include "kv_transfer/block_reader.h"
#include "kv_transfer/block_server.h"
#include "spdlog/spdlog.h"

namespace vllm::worker {
namespace {

class NixlConnectorWorker final : public KVConnectorWorker {
 public:
  NixlConnectorWorker(std::unique_ptr<kv_transfer::BlockServer> server,
                      std::unique_ptr<kv_transfer::BlockReader> reader, int32_t tp_rank,
                      kernels::Communicator* comm)
      : server_(std::move(server)),
        reader_(std::move(reader)),
        tp_rank_(tp_rank),
        agreement_(comm) {}

  absl::Status BeginStep(const std::optional<kv_transfer::KVConnectorMetadata>& metadata) override {
    if (!metadata.has_value()) return absl::OkStatus();
    // First stop serving what the scheduler freed: this step may write into those blocks.
    for (const std::string& id : metadata->sends_released) {
      server_->Release(id);
      agreement_.RemoveSend(id);
    }
    for (const kv_transfer::SendSpec& send : metadata->sends) {
      const absl::Status s = server_->Hold(send.req_id, send.block_ids);
      if (!s.ok()) {
        // Not served: its lease frees it; the decode side's read fails and recomputes or fails.
        spdlog::warn("NixlConnector: request {}: cannot serve its blocks: {}", send.req_id,
                     s.ToString());
        continue;
      }
      agreement_.AddSend(send.req_id);
    }
    for (const kv_transfer::LoadSpec& load : metadata->loads) {
      kv_transfer::LoadSpec spec = load;
      spec.remote_port = load.remote_port + tp_rank_;  // the same TP rank of the prefill engine
      const bool notify_only = spec.local_block_ids.empty();
      if (!notify_only) agreement_.AddLoad(load.req_id);
      const absl::Status s = reader_->Submit(spec);
      if (!s.ok()) {
        spdlog::warn("NixlConnector: request {}: cannot load its KV: {}", load.req_id,
                     s.ToString());
        if (!notify_only) agreement_.LoadDone(load.req_id, false);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<kv_transfer::KVConnectorOutput> EndStep() override {
    for (const std::string& id : server_->TakeFinished()) agreement_.SendDone(id);
    kv_transfer::BlockReader::Results results = reader_->TakeResults();
    for (const std::string& id : results.finished) agreement_.LoadDone(id, true);
    for (const std::string& id : results.failed) agreement_.LoadDone(id, false);
    return agreement_.Agree();
  }

 private:
  std::unique_ptr<kv_transfer::BlockServer> server_;
  std::unique_ptr<kv_transfer::BlockReader> reader_;
  const int32_t tp_rank_;
  RankAgreement agreement_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KVConnectorWorker>> MakeNixlConnectorWorker(
    const std::string& engine_id, const core::SideChannel& side_channel,
    const kv_transfer::KvCacheView& view, kernels::Communicator* comm,
    const std::string& cluster_key_file) {
  kv_transfer::BlockServerOptions so;
  VLLM_ASSIGN_OR_RETURN(so.host, ipc::NumericHost(side_channel.host));
  so.port = side_channel.port + view.layout.tp_rank;
  so.engine_id = engine_id;
  so.view = view;
  so.cluster_key_file = cluster_key_file;
  absl::StatusOr<std::unique_ptr<kv_transfer::BlockServer>> server =
      kv_transfer::BlockServer::Start(so);
  if (!server.ok()) {
    return absl::Status(
        server.status().code(),
        absl::StrCat("NixlConnector: TP rank ", view.layout.tp_rank, " serving KV blocks on ",
                     so.host, ":", so.port,
                     " (VLLM_NIXL_SIDE_CHANNEL_HOST/PORT): ", server.status().message()));
  }
  kv_transfer::BlockReaderOptions ro;
  ro.engine_id = engine_id;
  ro.view = view;
  ro.cluster_key_file = cluster_key_file;
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<kv_transfer::BlockReader> reader,
                        kv_transfer::BlockReader::Start(ro));
  spdlog::info(
      "NixlConnector: TP rank {} serves and reads KV blocks over ZMQ/TCP at {} (engine_id {}, "
      "{} layers × {} KV heads × {} head_dim, block_size {})",
      view.layout.tp_rank, (*server)->endpoint(), engine_id, view.layout.num_layers,
      view.layout.num_kv_heads, view.layout.head_dim, view.layout.block_size);
  return std::unique_ptr<KVConnectorWorker>(
      new NixlConnectorWorker(std::move(*server), std::move(reader), view.layout.tp_rank, comm));
}

}  // namespace vllm::worker
