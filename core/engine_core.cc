#include "core/engine_core.h"

#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "core/kv_event_options.h"
#include "ipc/zmq_util.h"
#include "spdlog/spdlog.h"

namespace vllm::core {

ModelOutputFuture Executor::ExecuteModelAsync(const SchedulerOutput& scheduler_output) {
  std::promise<absl::StatusOr<ModelRunnerOutput>> promise;
  promise.set_value(ExecuteModel(scheduler_output));
  return promise.get_future();
}

absl::StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(const config::VllmConfig& config,
                                                               const EngineCoreOptions& options,
                                                               std::unique_ptr<Executor> executor) {
  VLLM_CHECK(executor != nullptr) << "EngineCore needs an executor";
  VLLM_ASSIGN_OR_RETURN(KVCacheSpec spec, executor->GetKVCacheSpec());
  const int64_t bytes_per_token = spec.BytesPerToken();
  if (spec.num_layers < 1 || spec.num_kv_heads < 1 || spec.head_dim < 1 || spec.dtype_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("executor reported an invalid KV-cache spec: num_layers=%d num_kv_heads=%d "
                        "head_dim=%d dtype_bytes=%d (all must be positive)",
                        spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.dtype_bytes));
  }
  const int32_t block_size = config.cache.block_size;
  int64_t num_blocks = 0;
  if (config.cache.num_gpu_blocks_override.has_value()) {
    num_blocks = *config.cache.num_gpu_blocks_override;
  } else {
    VLLM_ASSIGN_OR_RETURN(int64_t available, executor->DetermineAvailableMemory());
    const int64_t block_bytes = bytes_per_token * std::max(block_size, 1);
    num_blocks = available / block_bytes;
    if (num_blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "no room for the KV cache: %d bytes available, one block of %d tokens needs %d; "
          "lower the model size, raise the memory fraction, or use more tensor parallelism",
          available, block_size, block_bytes));
    }
  }
  KVCacheConfig kv_cache;
  kv_cache.num_blocks =
      static_cast<int32_t>(std::min<int64_t>(num_blocks, std::numeric_limits<int32_t>::max()));
  kv_cache.sliding_window = options.sliding_window;
  // vLLM's StructuredOutputManager(vllm_config): the tokenizer is read on the first
  // constrained request, on a compile thread.
  structured_output::StructuredOutputManager::Options so_options;
  so_options.model_dir = config.model.model;
  so_options.vocab_size = options.vocab_size;
  so_options.stop_token_ids = options.eos_token_ids;
  so_options.disable_any_whitespace = config.structured_outputs.disable_any_whitespace;
  so_options.max_compile_seconds = config.structured_outputs.max_compile_seconds;
  so_options.reasoning = options.reasoning_tokens;
  so_options.enable_in_reasoning = config.structured_outputs.enable_in_reasoning;
  if (!config.structured_outputs.reasoning_parser.empty() && !so_options.reasoning.has_value()) {
    VLLM_ASSIGN_OR_RETURN(so_options.reasoning,
                          structured_output::LoadReasoningTokens(
                              config.structured_outputs.reasoning_parser, config.model.model));
  }
  auto so_manager = std::make_unique<structured_output::StructuredOutputManager>(so_options);
  std::unique_ptr<spec_decode::Proposer> proposer;
  // The draft heads and draft models run in the workers; ngram and suffix draft here.
  if (config.speculative.enabled() && !config.speculative.DraftsInWorker()) {
    VLLM_ASSIGN_OR_RETURN(proposer, spec_decode::MakeProposer(config.speculative));
  }
  // The KV connector's stored entries and transfers must match the model and the cache layout.
  KVConnectorContext kv_context;
  kv_context.engine_id = config.kv_transfer.engine_id;
  kv_context.fingerprint = absl::StrFormat(
      "%s|layers=%d|kv_heads=%d|head_dim=%d|dtype=%d|block=%d|tp=%d|vocab=%d", config.model.model,
      spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.dtype_bytes, block_size,
      config.parallel.tensor_parallel_size, options.vocab_size);
  // spec is one rank's (the most loaded; every rank holds as many heads) and counts a draft's
  // KV, which the connectors do not move.
  kv_context.block_bytes = (bytes_per_token - spec.draft_bytes_per_token) *
                           std::max(block_size, 1) * config.parallel.tensor_parallel_size;
  if (!config.kv_transfer.kv_connector.empty() && options.sliding_window > 0) {
    // Blocks out of the window are freed while the prefill runs, and the decode side recomputes
    // the last prompt token, whose window reaches one position further back.
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-transfer-config: ", config.kv_transfer.kv_connector,
                     " with a model whose every layer has a sliding window (",
                     options.sliding_window, " tokens) is not built"));
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<KVConnectorScheduler> kv_connector,
                        MakeKVConnectorScheduler(config, kv_context));
  if (kv_connector != nullptr) {
    spdlog::info("engine {}: KV connector {} (role {}, engine_id {})",
                 config.parallel.data_parallel_rank, kv_connector->name(),
                 config.kv_transfer.kv_role, config.kv_transfer.engine_id);
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                        Scheduler::Create(config, kv_cache, so_manager.get(), proposer.get(),
                                          std::move(kv_connector)));
  VLLM_RETURN_IF_ERROR(executor->InitializeKVCache(kv_cache.num_blocks, block_size));
  std::unique_ptr<EngineCore> engine(new EngineCore(options, std::move(executor),
                                                    std::move(so_manager), std::move(proposer),
                                                    std::move(scheduler)));
  if (config.kv_events.enable) {
    // After the model loaded; an error shuts the executor down with the engine.
    const int32_t rank = config.parallel.data_parallel_rank;
    VLLM_ASSIGN_OR_RETURN(
        engine->kv_publisher_,
        kv_events::KvEventPublisher::Create(ipc::ZmqContext(),
                                            KvEventPublisherOptionsFrom(config.kv_events), rank));
    if (!engine->kv_publisher_->BoundEndpoint().empty()) {
      spdlog::info("engine {}: publishing KV-cache events on {}", rank,
                   engine->kv_publisher_->BoundEndpoint());
    }
  }
  return engine;
}

EngineCore::EngineCore(
    const EngineCoreOptions& options, std::unique_ptr<Executor> executor,
    std::unique_ptr<structured_output::StructuredOutputManager> structured_output_manager,
    std::unique_ptr<spec_decode::Proposer> proposer, std::unique_ptr<Scheduler> scheduler)
    : options_(options),
      executor_(std::move(executor)),
      structured_output_manager_(std::move(structured_output_manager)),
      proposer_(std::move(proposer)),
      scheduler_(std::move(scheduler)),
      batch_queue_size_(std::max(executor_->max_concurrent_batches(), 1)) {}

EngineCore::~EngineCore() { Shutdown(); }

void EngineCore::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [future, output] : batch_queue_) {
    if (future.valid()) future.wait();
  }
  batch_queue_.clear();
  executor_->Shutdown();
}

absl::Status EngineCore::AddRequest(EngineCoreRequest request) {
  if (options_.vocab_size > 0) {
    for (int32_t id : request.prompt_token_ids) {
      if (id < 0 || id >= options_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "prompt token id %d is outside the vocabulary [0, %d)", id, options_.vocab_size));
      }
    }
  }
  return scheduler_->AddRequest(std::move(request));
}

void EngineCore::AbortRequests(std::span<const std::string> request_ids) {
  scheduler_->FinishRequests(request_ids, RequestStatus::kFinishedAborted);
}

absl::Status EngineCore::SleepExecutor(int32_t level) {
  if (executor_sleeping()) {
    spdlog::warn("Executor is already sleeping.");
    return absl::OkStatus();
  }
  if (!scheduler_->ResetPrefixCache()) {
    return absl::InternalError("sleep: the prefix cache could not be reset (blocks in use)");
  }
  const absl::Time start = absl::Now();
  if (scheduler_->config().model.enable_sleep_mode) {
    VLLM_RETURN_IF_ERROR(executor_->Sleep(level));
  } else {
    spdlog::warn(
        "sleep level {}: --enable-sleep-mode is off, so the KV cache and weights stay allocated",
        level);
  }
  weights_asleep_ = kv_cache_asleep_ = true;
  spdlog::info("It took {:.6f} seconds to fall asleep.",
               absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status EngineCore::WakeUpExecutor(const std::optional<std::vector<std::string>>& tags) {
  if (!executor_sleeping()) {
    spdlog::warn("Executor is not sleeping.");
    return absl::OkStatus();
  }
  bool weights = !tags.has_value(), kv_cache = !tags.has_value();
  for (const std::string& tag : tags.value_or(std::vector<std::string>{})) {
    const bool asleep =
        (tag == "weights" && weights_asleep_) || (tag == "kv_cache" && kv_cache_asleep_);
    if (!asleep) {
      spdlog::warn("Tag {} is not in sleeping tags", tag);
      return absl::OkStatus();
    }
    weights = weights || tag == "weights";
    kv_cache = kv_cache || tag == "kv_cache";
  }
  const absl::Time start = absl::Now();
  if (scheduler_->config().model.enable_sleep_mode) {
    VLLM_RETURN_IF_ERROR(executor_->WakeUp(weights, kv_cache));
  }
  if (weights) weights_asleep_ = false;
  if (kv_cache) kv_cache_asleep_ = false;
  spdlog::info("It took {:.6f} seconds to wake up{}{}.", absl::ToDoubleSeconds(absl::Now() - start),
               weights ? " weights" : "", kv_cache ? " kv_cache" : "");
  return absl::OkStatus();
}

void EngineCore::Finalize(EngineCoreOutputs& outputs) {
  outputs.engine_index = scheduler_->config().parallel.data_parallel_rank;
  outputs.timestamp = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  if (options_.log_stats) outputs.scheduler_stats = scheduler_->MakeStats();
}

absl::StatusOr<EngineCore::StepResult> EngineCore::RunOneStep() {
  absl::StatusOr<StepResult> result = batch_queue_size_ > 1 ? StepWithBatchQueue() : Step();
  if (result.ok()) PublishKvEvents();
  return result;
}

void EngineCore::PublishKvEvents() {
  if (kv_publisher_ == nullptr) return;
  std::vector<kv_events::KvEvent> events = scheduler_->TakeKvCacheEvents();
  if (events.empty()) return;
  kv_events::KvEventBatch batch;
  batch.ts = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  batch.events = std::move(events);
  batch.data_parallel_rank = scheduler_->config().parallel.data_parallel_rank;
  kv_publisher_->Publish(std::move(batch));
}

absl::StatusOr<EngineCore::StepResult> EngineCore::Step() {
  VLLM_CHECK(!shut_down_) << "Step after Shutdown";
  if (!scheduler_->HasRequests()) return StepResult{};
  if (spare_outputs_.empty()) spare_outputs_.emplace_back();
  SchedulerOutput& scheduler_output = spare_outputs_.front();
  scheduler_->Schedule(&scheduler_output);
  ModelRunnerOutput model_output;
  const bool kv_transfers = scheduler_->HasPendingKvTransfers();
  if (scheduler_output.num_scheduled_reqs() > 0 || !scheduler_output.finished_req_ids.empty() ||
      !scheduler_output.preempted_req_ids.empty() ||
      scheduler_output.kv_connector_metadata.has_value() || kv_transfers) {
    VLLM_ASSIGN_OR_RETURN(model_output, executor_->ExecuteModel(scheduler_output));
    if (scheduler_output.total_num_scheduled_tokens == 0 &&
        !scheduler_output.kv_connector_metadata.has_value() &&
        (!model_output.kv_connector_output.has_value() ||
         model_output.kv_connector_output->empty())) {
      // Only transfers to poll, and none moved: wait a little instead of spinning empty steps
      // (new requests are still taken in within a millisecond).
      absl::SleepFor(absl::Milliseconds(1));
    }
  } else if (scheduler_->num_waiting_for_fsm() > 0) {
    // Nothing for the workers while grammars compile: wait for one (briefly, so that new
    // requests are still taken in promptly) instead of spinning empty steps.
    structured_output_manager_->WaitForCompiles(absl::Milliseconds(1));
  }
  VLLM_ASSIGN_OR_RETURN(EngineCoreOutputs outputs,
                        scheduler_->UpdateFromOutput(scheduler_output, model_output));
  Finalize(outputs);
  return StepResult{std::move(outputs), scheduler_output.total_num_scheduled_tokens > 0};
}

absl::StatusOr<EngineCore::StepResult> EngineCore::StepWithBatchQueue() {
  VLLM_CHECK(!shut_down_) << "StepWithBatchQueue after Shutdown";
  bool model_executed = false;
  if (scheduler_->HasRequests()) {
    SchedulerOutput scheduler_output;
    if (!spare_outputs_.empty()) {
      scheduler_output = std::move(spare_outputs_.back());
      spare_outputs_.pop_back();
    }
    scheduler_->Schedule(&scheduler_output);
    model_executed = scheduler_output.total_num_scheduled_tokens > 0;
    ModelOutputFuture future = executor_->ExecuteModelAsync(scheduler_output);
    batch_queue_.emplace_back(std::move(future), std::move(scheduler_output));
    // Keep filling the pipeline unless it is full or the oldest step is already done.
    if (model_executed && static_cast<int32_t>(batch_queue_.size()) < batch_queue_size_ &&
        batch_queue_.front().first.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      return StepResult{std::nullopt, true};
    }
  } else if (batch_queue_.empty()) {
    return StepResult{};
  }
  auto [future, scheduler_output] = std::move(batch_queue_.front());
  batch_queue_.pop_front();
  VLLM_ASSIGN_OR_RETURN(ModelRunnerOutput model_output, future.get());
  VLLM_ASSIGN_OR_RETURN(EngineCoreOutputs outputs,
                        scheduler_->UpdateFromOutput(scheduler_output, model_output));
  Finalize(outputs);
  spare_outputs_.push_back(std::move(scheduler_output));
  return StepResult{std::move(outputs), model_executed};
}

}  // namespace vllm::core
