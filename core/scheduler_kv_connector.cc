// Scheduler: the KV-connector parts (vLLM's scheduler.py WAITING_FOR_REMOTE_KVS handling,
// _update_waiting_for_remote_kv, _update_from_kv_xfer_finished, _handle_failed_recving and
// _connector_finished).
#include <algorithm>

#include "absl/time/clock.h"
#include "core/scheduler.h"
#include "spdlog/spdlog.h"

namespace vllm::core {

bool Scheduler::MaybeStartKvLoad(Request* request, const KVCacheManager::ComputedBlocks& computed,
                                 bool* no_room) {
  const KVConnectorScheduler::Match match =
      kv_connector_->GetNumNewMatchedTokens(*request, computed.num_computed_tokens);
  const int32_t queries = request->num_tokens() - computed.num_computed_tokens;
  if (!match.load_async || match.num_external_tokens <= 0) {
    if (queries > 0) {
      ++connector_prefix_cache_stats_.requests;
      connector_prefix_cache_stats_.queries += queries;
    }
    return false;
  }
  const int32_t external = std::min(match.num_external_tokens, queries);
  if (!kv_cache_manager_
           .AllocateSlots(*request, external, computed.num_computed_tokens, computed.block_ids,
                          /*num_lookahead_tokens=*/0, /*delay_cache_blocks=*/true)
           .has_value()) {
    *no_room = true;
    return false;
  }
  ++connector_prefix_cache_stats_.requests;
  connector_prefix_cache_stats_.queries += queries;
  connector_prefix_cache_stats_.hits += external;
  waiting_.Pop();
  request->num_computed_tokens = computed.num_computed_tokens + external;
  request->status = RequestStatus::kWaitingForRemoteKvs;
  waiting_for_remote_kvs_.push_back(request);
  const auto num_local_blocks = static_cast<int32_t>(computed.block_ids.size());
  kv_connector_->UpdateStateAfterAlloc(*request, num_local_blocks, external);
  return true;
}

void Scheduler::Requeue(Request* request) {
  // A request preempted before its load has generated tokens the workers dropped with its
  // state: it goes to them as resumed (all its tokens, its whole block table), not as new.
  request->status =
      request->num_preemptions > 0 ? RequestStatus::kPreempted : RequestStatus::kWaiting;
  waiting_.Add(request);
}

void Scheduler::PromoteLoadedRequests() {
  for (const std::string& id : kv_connector_->TakeExpired(absl::Now())) ReleaseHeld(id);
  if (finished_recving_.empty() && failed_recving_.empty()) return;
  size_t kept = 0;
  for (Request* request : waiting_for_remote_kvs_) {
    const std::string& id = request->request_id;
    if (finished_recving_.erase(id) > 0) {
      // vLLM's _update_waiting_for_remote_kv: register the loaded blocks; a load of the whole
      // prompt leaves its last token to compute, to sample from.
      kv_cache_manager_.CacheBlocks(*request, request->num_computed_tokens);
      if (request->num_computed_tokens >= request->num_tokens()) {
        request->num_computed_tokens = request->num_tokens() - 1;
      }
      Requeue(request);
    } else if (failed_recving_.erase(id) > 0) {
      if (recompute_kv_load_failures_) {
        spdlog::warn(
            "request {}: loading its KV failed; computing it (kv_load_failure_policy "
            "recompute)",
            id);
        kv_cache_manager_.Free(*request);
        request->num_computed_tokens = 0;
        Requeue(request);
      } else {
        spdlog::warn("request {}: loading its KV failed (kv_load_failure_policy fail)", id);
        request->status = RequestStatus::kFinishedError;
        EngineCoreOutput& out = pending_outputs_.emplace_back();
        out.request_id = id;
        out.finish_reason = FinishReason::kError;
        ConnectorFinished(*request, false);
        FreeRequest(*request);
        EraseFinished(request);
      }
    } else {
      waiting_for_remote_kvs_[kept++] = request;
    }
  }
  waiting_for_remote_kvs_.resize(kept);
}

void Scheduler::AttachKvConnectorMetadata(SchedulerOutput* output) {
  auto tell = [this](const std::vector<Request*>& requests) {
    for (const Request* r : requests) kv_connector_->OnScheduled(*r);
  };
  tell(scheduled_new_);
  tell(scheduled_resumed_);
  tell(scheduled_running_);
  kv_transfer::KVConnectorMetadata meta = kv_connector_->BuildConnectorMeta();
  if (!meta.empty()) output->kv_connector_metadata = std::move(meta);
}

void Scheduler::ApplyKvConnectorOutput(const kv_transfer::KVConnectorOutput& output) {
  auto loaded = [this](const std::string& id, absl::flat_hash_set<std::string>& set) {
    if (held_.contains(id)) {  // finished (aborted) while loading: its blocks can go now
      ReleaseHeld(id);
      return;
    }
    auto it = requests_.find(id);
    if (it != requests_.end() && it->second->status == RequestStatus::kWaitingForRemoteKvs) {
      set.insert(id);
    }
  };
  for (const std::string& id : output.finished_recving) loaded(id, finished_recving_);
  for (const std::string& id : output.failed_recving) loaded(id, failed_recving_);
  kv_connector_->OnSendingFinished(output.finished_sending);
  for (const std::string& id : output.finished_sending) ReleaseHeld(id);
}

std::optional<kv_transfer::KVTransferParams> Scheduler::ConnectorFinished(Request& request,
                                                                          bool load_in_flight) {
  KVConnectorScheduler::Finished f = kv_connector_->RequestFinished(request);
  request.kv_blocks_held = f.delay_free_blocks || load_in_flight;
  return std::move(f.params);
}

void Scheduler::ReleaseHeld(const std::string& request_id) {
  auto it = held_.find(request_id);
  if (it == held_.end()) return;
  Request* request = it->second.get();
  request->kv_blocks_held = false;
  kv_cache_manager_.Free(*request);
  if (request->num_inflight_steps > 0) zombies_.push_back(std::move(it->second));
  held_.erase(it);
}

}  // namespace vllm::core
