#include "worker/kv_connector.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/kv_connector.h"
#include "kv_transfer/file_store.h"
#include "spdlog/spdlog.h"
#include "worker/kv_connector_nixl.h"
#include "worker/kv_connector_offload.h"

namespace vllm::worker {
namespace {

// ExampleConnector: loads read the request's file in BeginStep (before the forward pass, so a
// load finishes in the step that started it); saves write after the forward pass.
class ExampleConnectorWorker final : public KVConnectorWorker {
 public:
  ExampleConnectorWorker(std::string storage_path, kv_transfer::KvCacheView view,
                         kernels::Communicator* comm)
      : storage_path_(std::move(storage_path)), view_(std::move(view)), agreement_(comm) {}

  absl::Status BeginStep(const std::optional<kv_transfer::KVConnectorMetadata>& metadata) override {
    if (!metadata.has_value()) return absl::OkStatus();
    for (const kv_transfer::LoadSpec& load : metadata->loads) {
      agreement_.AddLoad(load.req_id);
      int32_t num_tokens = 0;
      absl::Status s = kv_transfer::file_store::ReadBlocks(
          storage_path_, load.key, view_.layout, view_, load.local_block_ids, &num_tokens);
      if (s.ok() && num_tokens != load.num_tokens) {
        s = absl::DataLossError(
            absl::StrCat("the entry holds ", num_tokens, " tokens, not ", load.num_tokens));
      }
      if (!s.ok()) {
        spdlog::warn(
            "ExampleConnector: request {}: loading {}: {}", load.req_id,
            kv_transfer::file_store::EntryPath(storage_path_, load.key, view_.layout.tp_rank),
            s.ToString());
      }
      agreement_.LoadDone(load.req_id, s.ok());
    }
    for (const kv_transfer::SaveSpec& save : metadata->saves) saves_.push_back(save);
    return absl::OkStatus();
  }

  absl::StatusOr<kv_transfer::KVConnectorOutput> EndStep() override {
    for (const kv_transfer::SaveSpec& save : saves_) {
      const absl::Status s = kv_transfer::file_store::WriteBlocks(
          storage_path_, save.key, view_.layout, view_, save.block_ids, save.num_tokens);
      if (!s.ok()) {  // a missed save costs a later recompute, nothing else
        spdlog::warn("ExampleConnector: request {}: storing its KV: {}", save.req_id, s.ToString());
      }
    }
    saves_.clear();
    return agreement_.Agree();
  }

 private:
  const std::string storage_path_;
  const kv_transfer::KvCacheView view_;
  RankAgreement agreement_;
  std::vector<kv_transfer::SaveSpec> saves_;
};

}  // namespace

RankAgreement::RankAgreement(kernels::Communicator* comm) : comm_(comm) {}

void RankAgreement::AddLoad(const std::string& req_id) {
  if (loads_.emplace(req_id, kPending).second) load_order_.push_back(req_id);
}

void RankAgreement::LoadDone(const std::string& req_id, bool ok) {
  auto it = loads_.find(req_id);
  if (it != loads_.end() && it->second == kPending) it->second = ok ? kOk : kFailed;
}

void RankAgreement::AddSend(const std::string& req_id) {
  if (sends_.emplace(req_id, false).second) send_order_.push_back(req_id);
}

void RankAgreement::SendDone(const std::string& req_id) {
  auto it = sends_.find(req_id);
  if (it != sends_.end()) it->second = true;
}

void RankAgreement::RemoveSend(const std::string& req_id) {
  if (sends_.erase(req_id) > 0) std::erase(send_order_, req_id);
}

absl::StatusOr<kv_transfer::KVConnectorOutput> RankAgreement::Agree() {
  kv_transfer::KVConnectorOutput out;
  if (load_order_.empty() && send_order_.empty()) return out;
  const int32_t world = comm_ != nullptr ? comm_->world_size() : 1;
  // Per pending transfer: 1 when this rank finished it, + kFailedWeight when its load failed.
  constexpr float kFailedWeight = 4096.0f;
  std::vector<float> votes;
  votes.reserve(load_order_.size() + send_order_.size());
  for (const std::string& id : load_order_) {
    const State s = loads_.at(id);
    votes.push_back(s == kPending ? 0.0f : (s == kOk ? 1.0f : 1.0f + kFailedWeight));
  }
  for (const std::string& id : send_order_) votes.push_back(sends_.at(id) ? 1.0f : 0.0f);
  if (world > 1) VLLM_RETURN_IF_ERROR(comm_->AllReduceSum(votes.data(), votes.size()));
  std::vector<std::string> kept_loads;
  for (size_t i = 0; i < load_order_.size(); ++i) {
    const auto v = static_cast<int64_t>(votes[i]);
    const int64_t done = v % static_cast<int64_t>(kFailedWeight);
    if (done < world) {
      kept_loads.push_back(std::move(load_order_[i]));
      continue;
    }
    (v >= static_cast<int64_t>(kFailedWeight) ? out.failed_recving : out.finished_recving)
        .push_back(load_order_[i]);
    loads_.erase(load_order_[i]);
  }
  load_order_ = std::move(kept_loads);
  std::vector<std::string> kept_sends;
  const size_t base = votes.size() - send_order_.size();
  for (size_t i = 0; i < send_order_.size(); ++i) {
    if (static_cast<int64_t>(votes[base + i]) < world) {
      kept_sends.push_back(std::move(send_order_[i]));
      continue;
    }
    out.finished_sending.push_back(send_order_[i]);
    sends_.erase(send_order_[i]);
  }
  send_order_ = std::move(kept_sends);
  return out;
}

absl::StatusOr<std::unique_ptr<KVConnectorWorker>> MakeKVConnectorWorker(
    const config::VllmConfig& config, const kv_transfer::KvCacheView& view,
    kernels::Communicator* comm, const std::string& cluster_key_file) {
  const config::KvTransferConfig& kv = config.kv_transfer;
  if (kv.kv_connector.empty()) return std::unique_ptr<KVConnectorWorker>();
  VLLM_RETURN_IF_ERROR(kv_transfer::ValidateKvCacheView(view));
  if (kv.kv_connector == "ExampleConnector") {
    VLLM_ASSIGN_OR_RETURN(std::string path, core::ExampleStoragePath(config));
    return std::unique_ptr<KVConnectorWorker>(new ExampleConnectorWorker(path, view, comm));
  }
  if (kv.kv_connector == "NixlConnector") {
    VLLM_ASSIGN_OR_RETURN(core::SideChannel side_channel, core::ResolveSideChannel(config));
    return MakeNixlConnectorWorker(kv.engine_id, side_channel, view, comm, cluster_key_file);
  }
  if (kv.kv_connector == "OffloadingConnector") {
    return MakeOffloadingConnectorWorker(config, view, comm);
  }
  return absl::InvalidArgumentError(absl::StrCat("--kv-transfer-config: kv_connector \"",
                                                 kv.kv_connector,
                                                 "\" has no worker side in this engine"));
}

}  // namespace vllm::worker
