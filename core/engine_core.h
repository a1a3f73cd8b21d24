// EngineCore: the scheduling loop of one engine replica (vLLM's vllm/v1/engine/core.py,
// class EngineCore), and the Executor interface it drives.
//
// core/ owns the Executor interface; executor/ implements it (UniProcExecutor,
// MultiprocExecutor) and tests use scripted doubles. EngineCore sizes the KV cache through
// the executor, owns the Scheduler, and turns each step into EngineCoreOutputs. With
// --kv-events-config it also owns the KV-event publisher, beside the scheduler whose block
// pool records the events (vLLM's scheduler owns its publisher likewise).
//
// Thread-safety: none. EngineCore runs on the engine's main-loop thread; input and output
// threads (EngineCoreProc) talk to it through queues. The publisher encodes and sends on its
// own thread ("vllm-kv-events"); RunOneStep only hands it each step's batch.
#ifndef VLLM_CORE_ENGINE_CORE_H_
#define VLLM_CORE_ENGINE_CORE_H_

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "core/engine_core_types.h"
#include "core/scheduler.h"
#include "core/scheduler_output.h"
#include "kv_events/kv_events.h"
#include "structured_output/reasoning.h"

namespace vllm::core {

// Size of the KV cache per token on the most loaded worker:
// 2 (K and V) x num_kv_heads x head_dim x dtype_bytes x num_layers, plus the draft's (an EAGLE
// head's layer or a draft model's layers, which share the target's block table; vLLM puts
// them in the same KV-cache group).
struct KVCacheSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // per worker (after tensor-parallel sharding)
  int32_t head_dim = 0;
  int32_t dtype_bytes = 0;
  int64_t draft_bytes_per_token = 0;  // 0 without a draft that keeps a KV cache

  int64_t BytesPerToken() const {
    return int64_t{2} * num_kv_heads * head_dim * dtype_bytes * num_layers + draft_bytes_per_token;
  }
};

// Result of a non-blocking ExecuteModel; get() blocks until the step's output is ready.
using ModelOutputFuture = std::future<absl::StatusOr<ModelRunnerOutput>>;

// Runs the model for the scheduler on one or more workers. Implementations document their
// own thread-safety; EngineCore calls them from one thread only.
class Executor {
 public:
  virtual ~Executor() = default;

  // KV-cache sizing (vLLM's get_kv_cache_specs / determine_available_memory /
  // initialize_from_config). The engine calls GetKVCacheSpec and DetermineAvailableMemory
  // once at start-up, derives the number of blocks, then calls InitializeKVCache once.
  [[nodiscard]] virtual absl::StatusOr<KVCacheSpec> GetKVCacheSpec() = 0;
  // Bytes available for the KV cache on the most constrained worker.
  [[nodiscard]] virtual absl::StatusOr<int64_t> DetermineAvailableMemory() = 0;
  // Allocates `num_blocks` blocks of `block_size` tokens on every worker.
  [[nodiscard]] virtual absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) = 0;

  // Runs one step and returns the output rank's result. An error means the executor is
  // unusable (e.g. a worker died); the engine reports it and shuts down.
  [[nodiscard]] virtual absl::StatusOr<ModelRunnerOutput> ExecuteModel(
      const SchedulerOutput& scheduler_output) = 0;

  // Non-blocking form for batch queues (pipeline parallelism): starts the step and returns
  // a future. The default runs ExecuteModel synchronously and returns a ready future.
  // Futures complete in submission order.
  virtual ModelOutputFuture ExecuteModelAsync(const SchedulerOutput& scheduler_output);

  // How many steps may be in flight at once (pipeline-parallel size); 1 = no batch queue.
  virtual int32_t max_concurrent_batches() const { return 1; }

  // One forward pass of a dummy batch on every worker — one token, no KV cache read or
  // written, nothing sampled for anyone (vLLM's execute_dummy_batch). A lockstep engine
  // (data parallelism with --data-parallel-lockstep) runs it when it has no work while another
  // engine has, so the model's collectives run as often on every rank. An error means the
  // executor is unusable, as for ExecuteModel. Unimplemented unless overridden.
  [[nodiscard]] virtual absl::Status ExecuteDummyBatch() {
    return absl::UnimplementedError("this executor has no dummy batch");
  }

  // Sleep mode (vLLM's Executor.sleep / wake_up), only while no step is in flight: every
  // worker frees its KV cache (level 1), and its weights too (level 2); WakeUp re-creates the
  // weights and/or the KV cache as `weights` / `kv_cache` say. A worker's error is returned
  // as it is. Unimplemented unless overridden.
  [[nodiscard]] virtual absl::Status Sleep(int32_t /*level*/) {
    return absl::UnimplementedError("this executor has no sleep mode");
  }
  [[nodiscard]] virtual absl::Status WakeUp(bool /*weights*/, bool /*kv_cache*/) {
    return absl::UnimplementedError("this executor has no sleep mode");
  }

  // OK while the executor can run steps; its fatal error (e.g. a worker died) otherwise
  // (vLLM's check_health). Cheap; the engine-core process polls it while idle.
  [[nodiscard]] virtual absl::Status CheckHealth() const { return absl::OkStatus(); }

  // Stops the workers. Idempotent; no call but Shutdown may follow.
  virtual void Shutdown() = 0;
};

// What the engine core needs that is neither configuration nor sized here: facts of the model
// (engine_factory reads them from its config.json) and how this process reports.
struct EngineCoreOptions {
  // > 0 when every attention layer has this sliding window (KVCacheConfig::sliding_window).
  int32_t sliding_window = 0;
  // The model's vocabulary: prompt token ids must lie in [0, vocab_size) (0: not checked).
  // Checked here so a bad id is the request's error, not a failed step for everyone.
  int32_t vocab_size = 0;
  // Attach SchedulerStats to every step's outputs.
  bool log_stats = true;
  // The model's stop tokens, which end a structured output whose request names no EOS.
  std::vector<int32_t> eos_token_ids;
  // The think tokens of config.structured_outputs.reasoning_parser in the model's tokenizer
  // (structured_output::LoadReasoningTokens; engine_factory reads them before any worker
  // starts). Unset with a parser configured: EngineCore::Create reads them itself.
  std::optional<structured_output::ReasoningTokens> reasoning_tokens;
};

class EngineCore {
 public:
  // Sizes the KV cache (available memory / (block_size x KVCacheSpec::BytesPerToken()), or
  // config.cache.num_gpu_blocks_override), initializes it on the executor and builds the
  // scheduler from `config` (resolved: VllmConfig::CheckResolved) and the KVCacheConfig
  // derived here. Outputs carry config.parallel.data_parallel_rank as their engine index.
  // Fails with ResourceExhausted when not one block fits, InvalidArgument when the cache
  // cannot hold one max_model_len request or the config is invalid, or the executor's error;
  // with config.kv_events enabled, it starts a KvEventPublisher (endpoints offset by the
  // data-parallel rank, as vLLM's) after the model loaded, and fails with its error (e.g.
  // Unavailable: address in use). With config.structured_outputs.reasoning_parser set, fails
  // with InvalidArgument naming --reasoning-parser when the tokenizer lacks the parser's think
  // tokens.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EngineCore>> Create(
      const config::VllmConfig& config, const EngineCoreOptions& options,
      std::unique_ptr<Executor> executor);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Validates and queues a request (see Scheduler::AddRequest for the errors; also
  // InvalidArgument for a prompt token id outside the vocabulary).
  [[nodiscard]] absl::Status AddRequest(EngineCoreRequest request);
  // Aborts requests (client gone); unknown ids are ignored. Their blocks are freed now.
  void AbortRequests(std::span<const std::string> request_ids);

  struct StepResult {
    // Empty when no step output was consumed (batch queue still filling, or idle).
    std::optional<EngineCoreOutputs> outputs;
    // Whether a step with scheduled tokens was submitted to the executor.
    bool model_executed = false;
  };
  // Schedule, execute, update (vLLM's step). Idle (no requests) returns an empty result at
  // once. An executor or protocol error is returned as is; the engine should then stop.
  [[nodiscard]] absl::StatusOr<StepResult> Step();
  // vLLM's step_with_batch_queue: keeps up to max_concurrent_batches() steps in flight,
  // blocking on the oldest only when the queue is full or nothing new can be scheduled.
  [[nodiscard]] absl::StatusOr<StepResult> StepWithBatchQueue();
  // Step() or StepWithBatchQueue(), whichever the executor calls for; then, with a
  // KV-event publisher, the KV-cache events the step recorded as one batch (none when the step
  // failed).
  [[nodiscard]] absl::StatusOr<StepResult> RunOneStep();

  // Waits for in-flight steps and shuts the executor down. Idempotent.
  void Shutdown();

  // Sleep mode, level 1 or 2, once paused with no request left (vLLM's EngineCore.sleep after
  // its pause; core/engine_sleep.h): resets the prefix cache, then the executor frees the
  // workers' KV cache (level 1) or KV cache and weights (level 2) — with
  // config.model.enable_sleep_mode (--enable-sleep-mode). Without it the memory stays (as in
  // vLLM, whose allocator then holds nothing to free) and only the state changes. Asleep
  // already: nothing is done (vLLM: "already sleeping"). Internal when the prefix cache cannot
  // be reset; the executor's error otherwise.
  [[nodiscard]] absl::Status SleepExecutor(int32_t level);
  // vLLM's Executor.wake_up: `tags` nullopt wakes everything; otherwise every tag must be
  // asleep ("weights", "kv_cache") or nothing is done (a warning, as vLLM).
  [[nodiscard]] absl::Status WakeUpExecutor(const std::optional<std::vector<std::string>>& tags);
  // Some of the workers' memory is asleep: no step may run.
  bool executor_sleeping() const { return weights_asleep_ || kv_cache_asleep_; }

  int32_t num_gpu_blocks() const { return scheduler_->kv_cache_config().num_blocks; }
  int32_t batch_queue_size() const { return batch_queue_size_; }
  size_t num_inflight_batches() const { return batch_queue_.size(); }
  Scheduler& scheduler() { return *scheduler_; }
  Executor& executor() { return *executor_; }

 private:
  EngineCore(const EngineCoreOptions& options, std::unique_ptr<Executor> executor,
             std::unique_ptr<structured_output::StructuredOutputManager> structured_output_manager,
             std::unique_ptr<spec_decode::Proposer> proposer, std::unique_ptr<Scheduler> scheduler);
  // Stamps engine index, time and (optionally) stats.
  void Finalize(EngineCoreOutputs& outputs);
  // The events recorded since the last call, as one batch, to kv_publisher_ (if any).
  void PublishKvEvents();

  const EngineCoreOptions options_;
  std::unique_ptr<Executor> executor_;
  // Before scheduler_, which points to it (and whose requests hold its grammars).
  std::unique_ptr<structured_output::StructuredOutputManager> structured_output_manager_;
  // Speculative decoding's drafter (--speculative-config ngram / suffix); null without it.
  // Before scheduler_, which points to it.
  std::unique_ptr<spec_decode::Proposer> proposer_;
  std::unique_ptr<Scheduler> scheduler_;
  const int32_t batch_queue_size_;
  // Oldest at the front.
  std::deque<std::pair<ModelOutputFuture, SchedulerOutput>> batch_queue_;
  // SchedulerOutputs whose steps are done, kept for their buffers: Schedule() overwrites one in
  // place (its vectors and request-id strings keep their capacity), so a steady step allocates
  // nothing for its plan. Step() uses the first; StepWithBatchQueue() takes and returns them.
  std::vector<SchedulerOutput> spare_outputs_;
  bool shut_down_ = false;
  bool weights_asleep_ = false;  // vLLM's executor sleeping_tags
  bool kv_cache_asleep_ = false;
  std::unique_ptr<kv_events::KvEventPublisher> kv_publisher_;  // null: no KV events published
};

}  // namespace vllm::core

#endif  // VLLM_CORE_ENGINE_CORE_H_
