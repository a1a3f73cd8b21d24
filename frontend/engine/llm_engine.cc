#include "frontend/engine/llm_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "frontend/engine/engine_client.h"

namespace vllm::frontend {

absl::StatusOr<std::unique_ptr<LLMEngine>> LLMEngine::Create(const config::EngineArgs& args) {
  VLLM_ASSIGN_OR_RETURN(const config::VllmConfig config, args.CreateEngineConfig());
  executor::EngineRuntimeOptions runtime;
  runtime.worker_binary = args.worker_binary;
  runtime.execute_timeout = args.execute_timeout;
  VLLM_ASSIGN_OR_RETURN(executor::BuiltEngine built, executor::BuildEngineCore(config, runtime));
  return std::unique_ptr<LLMEngine>(new LLMEngine(std::move(built)));
}

absl::Status LLMEngine::AddRequest(core::EngineCoreRequest request) {
  VLLM_RETURN_IF_ERROR(failed_);
  VLLM_RETURN_IF_ERROR(CheckMaxLogprobs(request.sampling_params, built_.config.model.max_logprobs));
  // As vLLM: the first EOS of generation_config is the request's EOS, the others stop it
  // like stop_token_ids (Llama 3's <|eot_id|>), unless EOS is ignored.
  if (!request.eos_token_id.has_value() && !built_.model_config.eos_token_ids.empty()) {
    request.eos_token_id = built_.model_config.eos_token_ids.front();
    std::vector<int32_t>& stop = request.sampling_params.stop_token_ids;
    if (!request.sampling_params.ignore_eos) {
      for (size_t i = 1; i < built_.model_config.eos_token_ids.size(); ++i) {
        const int32_t id = built_.model_config.eos_token_ids[i];
        if (std::find(stop.begin(), stop.end(), id) == stop.end()) stop.push_back(id);
      }
    }
  }
  for (int32_t id : request.prompt_token_ids) {
    if (id < 0 || id >= built_.model_config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("prompt token id %d is outside the vocabulary [0, %d)", id,
                          built_.model_config.vocab_size));
    }
  }
  RequestOutput out;
  out.request_id = request.request_id;
  out.prompt_token_ids = request.prompt_token_ids;
  const std::string id = request.request_id;
  VLLM_RETURN_IF_ERROR(built_.core->AddRequest(std::move(request)));
  outputs_[id] = std::move(out);
  return absl::OkStatus();
}

void LLMEngine::AbortRequests(const std::vector<std::string>& request_ids) {
  built_.core->AbortRequests(request_ids);
  for (const std::string& id : request_ids) outputs_.erase(id);
}

bool LLMEngine::HasUnfinishedRequests() const {
  return built_.core->scheduler().HasUnfinishedRequests();
}

absl::StatusOr<std::vector<RequestOutput>> LLMEngine::Step() {
  VLLM_RETURN_IF_ERROR(failed_);
  absl::StatusOr<core::EngineCore::StepResult> result = built_.core->RunOneStep();
  if (!result.ok()) {
    failed_ = result.status();
    outputs_.clear();
    return failed_;
  }
  core::EngineCore::StepResult& step = *result;
  std::vector<RequestOutput> progressed;
  if (!step.outputs.has_value()) return progressed;
  ++totals_.num_steps;
  if (const auto& stats = step.outputs->scheduler_stats; stats.has_value()) {
    totals_.num_preemptions += stats->num_preemptions;
    totals_.prefix_cache_queries += stats->prefix_cache_stats.queries;
    totals_.prefix_cache_hits += stats->prefix_cache_stats.hits;
    totals_.connector_prefix_cache_queries += stats->connector_prefix_cache_stats.queries;
    totals_.connector_prefix_cache_hits += stats->connector_prefix_cache_stats.hits;
    totals_.structured_output += stats->structured_output_stats;
    totals_.spec_decoding += stats->spec_decoding_stats;
  }
  for (core::EngineCoreOutput& o : step.outputs->outputs) {
    auto it = outputs_.find(o.request_id);
    if (it == outputs_.end()) continue;  // aborted meanwhile
    RequestOutput& r = it->second;
    r.output_token_ids.insert(r.output_token_ids.end(), o.new_token_ids.begin(),
                              o.new_token_ids.end());
    for (core::TokenLogprobs& lp : o.logprobs) r.logprobs.push_back(std::move(lp));
    if (!o.prompt_logprobs.empty()) r.prompt_logprobs = std::move(o.prompt_logprobs);
    r.num_cached_tokens = o.num_cached_tokens;
    r.num_cache_creation_tokens = o.num_cache_creation_tokens;
    r.finish_reason = o.finish_reason;
    r.stop_reason = o.stop_reason;
    if (o.kv_transfer_params.has_value()) r.kv_transfer_params = std::move(o.kv_transfer_params);
    progressed.push_back(r);
    if (r.finished()) outputs_.erase(it);
  }
  return progressed;
}

absl::StatusOr<std::vector<RequestOutput>> LLMEngine::Generate(
    std::vector<core::EngineCoreRequest> requests) {
  absl::flat_hash_map<std::string, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) index[requests[i].request_id] = i;
  std::vector<RequestOutput> results(requests.size());
  for (core::EngineCoreRequest& r : requests) VLLM_RETURN_IF_ERROR(AddRequest(std::move(r)));
  size_t remaining = requests.size();
  while (remaining > 0) {
    VLLM_ASSIGN_OR_RETURN(std::vector<RequestOutput> progressed, Step());
    for (RequestOutput& r : progressed) {
      if (!r.finished()) continue;
      auto it = index.find(r.request_id);
      if (it == index.end()) continue;
      results[it->second] = std::move(r);
      --remaining;
    }
    if (remaining > 0 && !HasUnfinishedRequests()) {
      return absl::InternalError("engine went idle with requests unfinished");
    }
  }
  return results;
}

}  // namespace vllm::frontend
