#include "frontend/llm_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "executor/multiproc_executor.h"
#include "executor/uniproc_executor.h"

namespace vllm::frontend {

absl::StatusOr<BuiltEngine> BuildEngineCore(const EngineArgs& args) {
  worker::WorkerConfig wc;
  wc.model = args.model;
  wc.load_format = args.load_format;
  wc.seed = args.seed;
  wc.kv_cache_memory_bytes = args.kv_cache_memory_bytes;
  // Resolved once here so every rank runs on the same kind of device.
  VLLM_ASSIGN_OR_RETURN(wc.device, worker::ResolveDevice(args.device));
  wc.dtype = args.dtype;
  wc.gpu_memory_utilization = args.gpu_memory_utilization;
  wc.enforce_eager = args.enforce_eager;
  if (!(args.gpu_memory_utilization > 0.0 && args.gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--gpu-memory-utilization must be in (0, 1], got %g", args.gpu_memory_utilization));
  }
  std::string backend = args.distributed_executor_backend;
  if (backend.empty()) backend = args.tensor_parallel_size > 1 ? "mp" : "uni";
  if (backend != "uni" && backend != "mp") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--distributed-executor-backend: unknown backend '", backend, "' (choose uni or mp)"));
  }
  if (backend == "uni" && args.tensor_parallel_size != 1) {
    return absl::InvalidArgumentError(
        "--distributed-executor-backend uni runs one worker: use mp for tensor parallelism");
  }
  // The engine needs the model's shape before any worker exists, and bad flags should fail
  // before processes are started.
  BuiltEngine built;
  VLLM_ASSIGN_OR_RETURN(built.model_config, worker::LoadModelConfig(args.model));
  const int64_t model_len = built.model_config.max_position_embeddings;
  if (args.max_model_len < 0 || args.max_model_len > model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max-model-len %d is outside [1, %d] (the model's max_position_embeddings)",
        args.max_model_len, model_len));
  }
  core::EngineCoreConfig config;
  config.engine_index = args.engine_index;
  core::SchedulerConfig& s = config.scheduler;
  s.max_model_len = args.max_model_len > 0 ? args.max_model_len : static_cast<int32_t>(model_len);
  s.max_num_seqs = args.max_num_seqs;
  s.max_num_batched_tokens = args.max_num_batched_tokens > 0 ? args.max_num_batched_tokens
                             : args.enable_chunked_prefill   ? 2048
                                                             : std::max(s.max_model_len, 2048);
  s.block_size = args.block_size;
  s.enable_prefix_caching = args.enable_prefix_caching;
  s.enable_chunked_prefill = args.enable_chunked_prefill;
  s.long_prefill_token_threshold = args.long_prefill_token_threshold;
  s.policy = args.scheduling_policy;
  config.num_gpu_blocks_override = args.num_gpu_blocks_override;
  // The scheduler's limits size the CUDA worker's buffers, profile run and graphs.
  wc.max_model_len = s.max_model_len;
  wc.max_num_batched_tokens = s.max_num_batched_tokens;
  wc.max_num_seqs = s.max_num_seqs;
  config.vocab_size = built.model_config.vocab_size;
  built.max_model_len = s.max_model_len;

  std::unique_ptr<core::Executor> executor;
  if (backend == "uni") {
    VLLM_ASSIGN_OR_RETURN(std::unique_ptr<executor::UniProcExecutor> uni,
                          executor::UniProcExecutor::Create(wc));
    built.weight_bytes = uni->worker().runner().backend().weight_bytes();
    executor = std::move(uni);
  } else {
    executor::MultiprocExecutorOptions mp;
    mp.worker = wc;
    mp.tensor_parallel_size = args.tensor_parallel_size;
    mp.comm_backend = args.comm_backend;
    mp.worker_binary = args.worker_binary;
    mp.execute_timeout = args.execute_timeout;
    VLLM_ASSIGN_OR_RETURN(executor, executor::MultiprocExecutor::Create(mp));
  }
  VLLM_ASSIGN_OR_RETURN(built.core,
                        core::EngineCore::Create(std::move(config), std::move(executor)));
  return built;
}

absl::StatusOr<std::unique_ptr<LLMEngine>> LLMEngine::Create(const EngineArgs& args) {
  VLLM_ASSIGN_OR_RETURN(BuiltEngine built, BuildEngineCore(args));
  return std::unique_ptr<LLMEngine>(new LLMEngine(std::move(built.core),
                                                  std::move(built.model_config),
                                                  built.max_model_len, built.weight_bytes));
}

absl::Status LLMEngine::AddRequest(core::EngineCoreRequest request) {
  VLLM_RETURN_IF_ERROR(failed_);
  // As vLLM: the first EOS of generation_config is the request's EOS, the others stop it
  // like stop_token_ids (Llama 3's <|eot_id|>), unless EOS is ignored.
  if (!request.eos_token_id.has_value() && !model_config_.eos_token_ids.empty()) {
    request.eos_token_id = model_config_.eos_token_ids.front();
    std::vector<int32_t>& stop = request.sampling_params.stop_token_ids;
    if (!request.sampling_params.ignore_eos) {
      for (size_t i = 1; i < model_config_.eos_token_ids.size(); ++i) {
        const int32_t id = model_config_.eos_token_ids[i];
        if (std::find(stop.begin(), stop.end(), id) == stop.end()) stop.push_back(id);
      }
    }
  }
  for (int32_t id : request.prompt_token_ids) {
    if (id < 0 || id >= model_config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt token id %d is outside the vocabulary [0, %d)", id, model_config_.vocab_size));
    }
  }
  RequestOutput out;
  out.request_id = request.request_id;
  out.prompt_token_ids = request.prompt_token_ids;
  const std::string id = request.request_id;
  VLLM_RETURN_IF_ERROR(engine_core_->AddRequest(std::move(request)));
  outputs_[id] = std::move(out);
  return absl::OkStatus();
}

void LLMEngine::AbortRequests(const std::vector<std::string>& request_ids) {
  engine_core_->AbortRequests(request_ids);
  for (const std::string& id : request_ids) outputs_.erase(id);
}

bool LLMEngine::HasUnfinishedRequests() const {
  return engine_core_->scheduler().HasUnfinishedRequests();
}

absl::StatusOr<std::vector<RequestOutput>> LLMEngine::Step() {
  VLLM_RETURN_IF_ERROR(failed_);
  absl::StatusOr<core::EngineCore::StepResult> result = engine_core_->RunOneStep();
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
  }
  for (core::EngineCoreOutput& o : step.outputs->outputs) {
    auto it = outputs_.find(o.request_id);
    if (it == outputs_.end()) continue;  // aborted meanwhile
    RequestOutput& r = it->second;
    r.output_token_ids.insert(r.output_token_ids.end(), o.new_token_ids.begin(),
                              o.new_token_ids.end());
    for (core::TokenLogprobs& lp : o.logprobs) r.logprobs.push_back(std::move(lp));
    r.num_cached_tokens = o.num_cached_tokens;
    r.finish_reason = o.finish_reason;
    r.stop_reason = o.stop_reason;
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
