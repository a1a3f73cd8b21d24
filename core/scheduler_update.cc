// Scheduler::UpdateFromOutput's checks (core/scheduler.h): the worker's answer matched to the
// step and validated before anything changes, and a request's stop conditions.
#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/scheduler.h"

namespace vllm::core {

absl::Status Scheduler::MatchModelOutput(const SchedulerOutput& scheduler_output,
                                         const ModelRunnerOutput& model_output) {
  const size_t num_scheduled = scheduler_output.num_scheduled_reqs();
  const size_t num_model = model_output.req_ids.size();
  if (inflight_steps_.empty() || inflight_steps_.front().step_id != scheduler_output.step_id ||
      inflight_steps_.front().requests.size() != num_scheduled) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "UpdateFromOutput got step %d, but the oldest unapplied step is %d; apply each "
        "SchedulerOutput once, in the order Schedule() returned them",
        scheduler_output.step_id, inflight_steps_.empty() ? 0 : inflight_steps_.front().step_id));
  }
  if (model_output.sampled_token_ids.size() != num_model ||
      (!model_output.logprobs.empty() && model_output.logprobs.size() != num_model) ||
      (!model_output.prompt_logprobs.empty() && model_output.prompt_logprobs.size() != num_model) ||
      (!model_output.draft_token_ids.empty() && model_output.draft_token_ids.size() != num_model)) {
    return absl::InvalidArgumentError(
        "ModelRunnerOutput: sampled_token_ids, logprobs, prompt_logprobs and draft_token_ids "
        "must have one entry per req_id");
  }
  // Find every scheduled request's entry (workers usually keep our order) and
  // validate, so that a bad output changes nothing.
  output_index_.resize(num_scheduled);
  bool same_order = num_model >= num_scheduled;
  for (size_t i = 0; i < num_scheduled; ++i) {
    if (same_order && model_output.req_ids[i] == scheduler_output.scheduled_req_id(i)) {
      output_index_[i] = static_cast<int32_t>(i);
    } else {
      same_order = false;
      break;
    }
  }
  if (!same_order) {
    output_index_by_id_.clear();
    for (size_t j = 0; j < num_model; ++j) {
      output_index_by_id_.emplace(model_output.req_ids[j], static_cast<int32_t>(j));
    }
    for (size_t i = 0; i < num_scheduled; ++i) {
      auto it = output_index_by_id_.find(scheduler_output.scheduled_req_id(i));
      if (it == output_index_by_id_.end()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("ModelRunnerOutput has no entry for scheduled request %s",
                            scheduler_output.scheduled_req_id(i)));
      }
      output_index_[i] = it->second;
    }
  }
  const std::vector<int32_t>& num_spec = inflight_steps_.front().num_spec_tokens;
  if (num_spec.empty() && model_output.draft_token_ids.empty()) {
    // No drafts anywhere (the common step): each request sampled at most one token. When one
    // did not, the general pass below names it.
    bool plain = true;
    for (size_t i = 0; i < num_scheduled && plain; ++i) {
      const std::vector<int32_t>& sampled = model_output.sampled_token_ids[output_index_[i]];
      plain = sampled.empty() || (sampled.size() == 1 && sampled[0] >= 0);
    }
    if (plain) return absl::OkStatus();
  }
  for (size_t i = 0; i < num_scheduled; ++i) {
    const std::vector<int32_t>& sampled = model_output.sampled_token_ids[output_index_[i]];
    // A request samples at most one token plus its accepted drafts.
    const size_t most = 1 + static_cast<size_t>(num_spec.empty() ? 0 : num_spec[i]);
    if (sampled.size() > most) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ModelRunnerOutput: %d tokens for request %s, which could sample at most %d",
          sampled.size(), scheduler_output.scheduled_req_id(i), most));
    }
    const std::span<const int32_t> drafts =
        model_output.draft_token_ids.empty()
            ? std::span<const int32_t>()
            : std::span<const int32_t>(model_output.draft_token_ids[output_index_[i]]);
    for (std::span<const int32_t> tokens : {std::span<const int32_t>(sampled), drafts}) {
      for (int32_t token : tokens) {
        if (token < 0) {
          return absl::InvalidArgumentError(
              absl::StrFormat("ModelRunnerOutput: negative token id %d for request %s", token,
                              scheduler_output.scheduled_req_id(i)));
        }
      }
    }
  }
  return absl::OkStatus();
}

bool Scheduler::CheckStop(Request& request) const {
  const int32_t last_token = request.all_token_ids.back();
  if (request.num_output_tokens() >= request.min_tokens) {
    if (last_token == request.eos_token_id_or_none) {
      request.status = RequestStatus::kFinishedStopped;
      return true;
    }
    if (request.has_stop_token_ids) {
      const std::vector<int32_t>& stop = request.sampling_params.stop_token_ids;
      if (std::find(stop.begin(), stop.end(), last_token) != stop.end()) {
        request.status = RequestStatus::kFinishedStopped;
        request.stop_reason = last_token;
        return true;
      }
    }
  }
  if (request.num_tokens() >= config_.model.max_model_len ||
      request.num_output_tokens() >= request.max_tokens) {
    request.status = RequestStatus::kFinishedLengthCapped;
    return true;
  }
  return false;
}

}  // namespace vllm::core
