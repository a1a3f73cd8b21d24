// Scheduler: decides, every step, which requests run and how many of their tokens, with
// vLLM V1's semantics (vllm/v1/core/sched/scheduler.py).
//
// Each step has a token budget (max_num_batched_tokens) shared by all requests: running
// requests are served first (one token for a decode, the next chunk for a partial prefill),
// then waiting ones in policy order while the budget, max_num_seqs and the KV cache allow.
// A prompt longer than the remaining budget (or long_prefill_token_threshold) is split
// across steps (chunked prefill). When a running request cannot get KV blocks, the
// lowest-priority running request (fcfs: the last one admitted; priority: the largest
// (priority, arrival_time)) is preempted by recompute: its blocks are freed and it returns
// to the front of the waiting queue.
//
// Thread-safety: none. One thread (the engine core's main loop) owns the scheduler and all
// request state; other threads post work to that thread.
#ifndef VLLM_CORE_SCHEDULER_H_
#define VLLM_CORE_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "core/engine_core_types.h"
#include "core/kv_cache_config.h"
#include "core/kv_cache_manager.h"
#include "core/kv_connector.h"
#include "core/request.h"
#include "core/request_queue.h"
#include "core/scheduler_output.h"
#include "spec_decode/proposer.h"
#include "spec_decode/stats.h"

namespace vllm::core {

class Scheduler {
 public:
  // Reads config.scheduler (budget, max_num_seqs, chunking, policy), config.model
  // (max_model_len), config.cache (block size, prefix caching) and config.kv_events (whether to
  // record events), as vLLM's Scheduler.__init__ does; both are copied. `config` was validated
  // in config/; InvalidArgument when it is not resolved (VllmConfig::CheckResolved) or the
  // cache cannot serve it (ValidateKVCacheConfig).
  // `structured_output_manager` (owned by the caller, outliving the scheduler; may be null,
  // then requests with structured_outputs are refused) compiles grammars and fills bitmasks.
  // `proposer` (owned by the caller, outliving the scheduler; null: no speculative decoding)
  // drafts tokens for the requests that decode next, after each step's output is applied; up to
  // config.speculative.num_speculative_tokens of them are scheduled with the request's last
  // sampled token and verified by the worker.
  // `kv_connector` (null: none; MakeKVConnectorScheduler) loads requests' KV from elsewhere and
  // keeps finished requests' blocks for others to read (disaggregated prefill/decode); its
  // failed loads are recomputed or fail the request as config.kv_transfer's
  // kv_load_failure_policy says.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const config::VllmConfig& config, const KVCacheConfig& kv_cache_config,
      structured_output::StructuredOutputManager* structured_output_manager = nullptr,
      spec_decode::Proposer* proposer = nullptr,
      std::unique_ptr<KVConnectorScheduler> kv_connector = nullptr);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates the request (ValidateEngineCoreRequest; InvalidArgument) and queues it.
  // AlreadyExists when a request with this id is unfinished. A request with
  // structured_outputs waits (kWaitingForFsm, outside the waiting queue) until its grammar
  // compiled; FailedPrecondition when this scheduler has no StructuredOutputManager.
  [[nodiscard]] absl::Status AddRequest(EngineCoreRequest request);

  // Finishes the given requests with `finished_status` (a finished status; kFinishedAborted
  // for client aborts) and frees their blocks. Unknown or finished ids are ignored (an
  // abort may race with a normal finish). Workers learn of them in the next step's
  // finished_req_ids.
  void FinishRequests(std::span<const std::string> request_ids, RequestStatus finished_status);

  // Plans one step. Never fails; an empty output (no tokens) is possible when nothing can
  // run (e.g. all running requests have steps in flight, or grammars are compiling). First
  // moves requests whose grammar compiled to the waiting queue (and fails those whose grammar
  // did not compile: their outputs come with the next UpdateFromOutput); last fills the token
  // bitmask rows of the constrained requests that sample in this step (a request still
  // reasoning gets a row only when some implicit reasoning end, e.g. qwen3's <tool_call>, must
  // stay masked because its grammar cannot start with it); a constrained request with d drafts
  // gets d + 1 consecutive rows, one per verified position.
  SchedulerOutput Schedule() {
    SchedulerOutput output;
    Schedule(&output);
    return output;
  }
  // The same into `output`, which is overwritten (every field, as if it were new) but keeps
  // its buffers and the capacity of the strings in them: a caller that reuses one
  // SchedulerOutput per step in flight makes a steady-state decode step allocate nothing.
  // `output` must not be a step still waiting for its UpdateFromOutput.
  void Schedule(SchedulerOutput* output);

  // Applies the model's results for a step planned by Schedule(): appends sampled tokens,
  // checks stop conditions, frees finished requests, and returns one EngineCoreOutput per
  // request with new tokens or a finish. Outputs for requests finished or aborted since
  // that step are dropped. Every step must be applied exactly once, in the order it was
  // scheduled (FailedPrecondition otherwise), with the SchedulerOutput Schedule() returned.
  // InvalidArgument (and no state change) when `model_output` lacks a scheduled request or
  // holds a negative token id.
  [[nodiscard]] absl::StatusOr<EngineCoreOutputs> UpdateFromOutput(
      const SchedulerOutput& scheduler_output, const ModelRunnerOutput& model_output) {
    EngineCoreOutputs outputs;
    absl::Status status = UpdateFromOutput(scheduler_output, model_output, &outputs);
    if (!status.ok()) return status;
    return outputs;
  }
  // The same into `outputs`, which is overwritten (every field, as if it were new) but keeps
  // its buffers: its outputs' request ids and token lists are reused in place. On error
  // `outputs` is left unchanged.
  [[nodiscard]] absl::Status UpdateFromOutput(const SchedulerOutput& scheduler_output,
                                              const ModelRunnerOutput& model_output,
                                              EngineCoreOutputs* outputs);

  // Gauges now, and counters since the previous call (which it resets), the structured-output
  // manager's included.
  SchedulerStats MakeStats();

  // Requests whose grammar is still compiling.
  size_t num_waiting_for_fsm() const { return waiting_for_fsm_.size(); }
  int32_t GetNumUnfinishedRequests() const { return static_cast<int32_t>(requests_.size()); }
  bool HasUnfinishedRequests() const { return !requests_.empty(); }
  // Every unfinished request's id (a sleep with mode=abort aborts them all).
  std::vector<std::string> RequestIds() const {
    std::vector<std::string> ids;
    ids.reserve(requests_.size());
    for (const auto& [id, request] : requests_) ids.push_back(id);
    return ids;
  }
  // True when there is something to tell the workers even without unfinished requests.
  bool HasFinishedRequests() const { return !finished_req_ids_.empty(); }
  bool HasRequests() const {
    return HasUnfinishedRequests() || HasFinishedRequests() || !held_.empty();
  }
  // KV transfers the workers must be polled for even in a step with nothing to compute: loads
  // in flight, or finished requests whose blocks are held for a decode instance.
  bool HasPendingKvTransfers() const { return !waiting_for_remote_kvs_.empty() || !held_.empty(); }
  // Finished requests whose blocks the KV connector still holds.
  size_t num_held_requests() const { return held_.size(); }
  size_t num_waiting_for_remote_kvs() const { return waiting_for_remote_kvs_.size(); }
  const KVConnectorScheduler* kv_connector() const { return kv_connector_.get(); }
  // Forgets cached prefixes; false while any block is in use.
  bool ResetPrefixCache() { return kv_cache_manager_.ResetPrefixCache(); }
  // The KV-cache events since the last call, oldest first (vLLM's scheduler takes them after
  // each step's update); empty unless config.kv_events.enable.
  std::vector<kv_events::KvEvent> TakeKvCacheEvents() { return kv_cache_manager_.TakeEvents(); }

  // Introspection for tests, benchmarks and stats.
  const config::VllmConfig& config() const { return config_; }
  const KVCacheConfig& kv_cache_config() const { return kv_cache_config_; }
  const KVCacheManager& kv_cache_manager() const { return kv_cache_manager_; }
  const std::vector<Request*>& running() const { return running_; }
  size_t num_waiting() const { return waiting_.size(); }
  std::vector<Request*> waiting_snapshot() const { return waiting_.Snapshot(); }
  // The unfinished request with this id, or nullptr.
  const Request* GetRequest(std::string_view request_id) const;

 private:
  Scheduler(const config::VllmConfig& config, const KVCacheConfig& kv_cache_config,
            structured_output::StructuredOutputManager* structured_output_manager,
            spec_decode::Proposer* proposer, std::unique_ptr<KVConnectorScheduler> kv_connector);

  // KV connector (scheduler_kv_connector.cc). Frees the held requests whose lease ran out, then
  // moves the requests whose load finished to the waiting queue (a failed one is recomputed or
  // fails, by kv_load_failure_policy).
  void PromoteLoadedRequests();
  // Back to the waiting queue after a load (kPreempted when it was preempted before).
  void Requeue(Request* request);
  // For a waiting request first considered: asks the connector for external tokens beyond the
  // local hit `computed`. True when the request was parked to load them (blocks allocated; it
  // left the waiting queue); false when it schedules as usual. Sets *no_room when the blocks
  // did not fit (the caller stops admitting).
  bool MaybeStartKvLoad(Request* request, const KVCacheManager::ComputedBlocks& computed,
                        bool* no_room);
  // After BuildOutput: tells the connector what was scheduled and attaches its metadata.
  void AttachKvConnectorMetadata(SchedulerOutput* output);
  // Applies the workers' finished/failed transfers.
  void ApplyKvConnectorOutput(const kv_transfer::KVConnectorOutput& output);
  // A request is finishing: asks the connector whether its blocks stay held, and returns the
  // kv_transfer_params for its final output.
  std::optional<kv_transfer::KVTransferParams> ConnectorFinished(Request& request,
                                                                 bool load_in_flight);
  // Frees a held request's blocks and forgets it.
  void ReleaseHeld(const std::string& request_id);

  // Structured outputs (scheduler_structured_output.cc). Moves requests whose grammar compiled
  // from waiting_for_fsm_ to the waiting queue, and finishes those that failed.
  void PromoteCompiledRequests();
  // Fills output->structured_output_indices and grammar_bitmask (after BuildOutput).
  void FillGrammarBitmask(SchedulerOutput* output);
  // Advances the request's grammar over the token just appended; true when that finished the
  // request (the grammar refused the token: error; it accepted the stop token or allows
  // nothing else now: stopped). While the request reasons (a reasoning parser is configured)
  // the grammar is left alone, up to and including the think-end token; an implicit end
  // (qwen3's <tool_call>) is the grammar's first token.
  bool AdvanceGrammar(Request& request);
  // Speculative decoding under a grammar: whether `request` (constrained) may get drafts (its
  // grammar compiled, applies and has not terminated), and how many of `draft`'s leading
  // tokens its grammar accepts (the grammar is left as it was).
  bool CanDraftUnderGrammar(const Request& request) const;
  size_t ValidDraftPrefix(Request& request, std::span<const int32_t> draft);

  // Speculative decoding: drafts for the requests of propose_scratch_ (those that got tokens in
  // the step just applied and decode next), each at most k and what max_tokens and
  // max_model_len leave, under a grammar only the prefix it accepts: from proposer_, or, when
  // the draft runs in the worker (eagle, medusa, draft_model), from `model_output`'s
  // draft_token_ids (entry propose_output_index_[i] for propose_scratch_[i]).
  // `k`: the step's num_spec_tokens_to_schedule.
  void ProposeDrafts(const ModelRunnerOutput& model_output, int32_t k);

  // Frees `request`'s blocks and sends it back to the waiting queue.
  void PreemptRequest(Request* request);
  // Under the priority policy: removes the running request to preempt and, when it was
  // already scheduled in this step, gives its tokens back. Returns it.
  Request* PopPreemptionVictim(size_t* req_index, int32_t* token_budget);
  // Schedules running requests, then waiting ones (Schedule()'s two phases).
  void ScheduleRunning(int32_t* token_budget);
  void ScheduleWaiting(int32_t* token_budget);
  // Reserves a request admitted to run room for its decode steps' tokens, blocks and block
  // hashes (up to 1024 generated tokens), so that a steady-state step allocates nothing.
  void ReserveForDecode(Request& request) const;
  // Fills `output` from this step's scratch lists and advances num_computed_tokens.
  void BuildOutput(SchedulerOutput* output);
  // UpdateFromOutput's first pass (scheduler_update.cc): checks that `scheduler_output` is the
  // oldest step in flight (FailedPrecondition) and that `model_output`'s lists agree, fills
  // output_index_ (each scheduled request's entry in `model_output`) and checks every sampled
  // token, changing no request. InvalidArgument when a list's length disagrees, a scheduled
  // request has no entry or a token id is negative.
  [[nodiscard]] absl::Status MatchModelOutput(const SchedulerOutput& scheduler_output,
                                              const ModelRunnerOutput& model_output);
  // Applies the stop conditions after a token was appended; sets the finished status.
  bool CheckStop(Request& request) const;
  // Frees a finished request's blocks and records it for the workers; the caller removes
  // it from running_/waiting_ and then erases it from requests_.
  void FreeRequest(Request& request);

  // Removes a finished request from requests_; it lives on in zombies_ while steps that
  // include it are in flight (their records point to it).
  void EraseFinished(Request* request);

  const config::VllmConfig config_;
  const KVCacheConfig kv_cache_config_;
  structured_output::StructuredOutputManager* const structured_output_manager_;
  spec_decode::Proposer* const proposer_;
  // The draft runs in the worker and its tokens come back with the step's output.
  const bool worker_drafts_;
  // KV slots allocated past a request's scheduled tokens for the worker's draft to write
  // (vLLM's num_lookahead_tokens): k for eagle and draft_model, 0 otherwise.
  const int32_t num_lookahead_tokens_;
  // Dynamic speculative decoding: k by the step's batch size (index: scheduled requests, up to
  // max_num_seqs); empty: always num_speculative_tokens.
  const std::vector<int32_t> dynamic_k_;
  spec_decode::SpecDecodingStats spec_stats_;
  // Per-step scratch of ProposeDrafts.
  std::vector<Request*> propose_scratch_;
  std::vector<int32_t> propose_output_index_;
  std::vector<spec_decode::ProposeRequest> propose_requests_;
  std::vector<std::vector<int32_t>> drafts_;
  // Requests whose grammar is compiling, in arrival order.
  std::vector<Request*> waiting_for_fsm_;
  // Outputs of requests finished outside a step (their grammar failed), for the next
  // UpdateFromOutput.
  std::vector<EngineCoreOutput> pending_outputs_;
  // Per-step scratch of FillGrammarBitmask / AdvanceGrammar.
  std::vector<structured_output::Grammar*> grammar_scratch_;
  std::vector<int32_t> grammar_row_scratch_;
  KVCacheManager kv_cache_manager_;
  std::unique_ptr<KVConnectorScheduler> kv_connector_;
  const bool recompute_kv_load_failures_;
  // Requests in kWaitingForRemoteKvs, in the order their loads started.
  std::vector<Request*> waiting_for_remote_kvs_;
  // Of those, the ones whose load the workers reported finished / failed.
  absl::flat_hash_set<std::string> finished_recving_;
  absl::flat_hash_set<std::string> failed_recving_;
  // Finished requests whose blocks stay allocated (read by a decode instance, or a load into
  // them still running), by id.
  absl::flat_hash_map<std::string, std::unique_ptr<Request>> held_;
  PrefixCacheStats connector_prefix_cache_stats_;
  absl::flat_hash_map<std::string, std::unique_ptr<Request>> requests_;
  std::vector<std::unique_ptr<Request>> zombies_;
  // Scheduled steps whose output has not been applied, oldest first: the step id and its
  // requests in num_scheduled_tokens order (so UpdateFromOutput needs no id lookups).
  struct StepRecord {
    uint64_t step_id = 0;
    std::vector<Request*> requests;
    // Draft tokens scheduled per request (empty: none in this step).
    std::vector<int32_t> num_spec_tokens;
    // Tokens to draft per request after this step (SchedulerOutput's).
    int32_t num_spec_tokens_to_schedule = 0;
  };
  // A queue (front: oldest); it holds one entry per step in flight (a batch queue's depth),
  // so popping the front moves a handful of records. Records are recycled through
  // spare_records_ with their buffers, so scheduling a step allocates none.
  std::vector<StepRecord> inflight_steps_;
  std::vector<StepRecord> spare_records_;
  // Appends this step's record to inflight_steps_ (a spare one, buffers kept, when there is).
  StepRecord& StartStepRecord(uint64_t step_id, size_t num_requests);
  // Records a request scheduled in this step (`num_requests` in all) and advances it: its
  // scheduled tokens count as computed, its drafts are used.
  static void AdvanceAfterSchedule(StepRecord& record, size_t num_requests, Request* r);
  uint64_t next_step_id_ = 1;
  RequestQueue waiting_;
  // In admission order; fcfs preempts from the back.
  std::vector<Request*> running_;
  // Finished since the previous Schedule().
  std::vector<std::string> finished_req_ids_;
  uint64_t next_arrival_seq_ = 0;
  int64_t num_preemptions_since_stats_ = 0;

  // Per-step scratch, reused to keep Schedule() allocation-light.
  std::vector<Request*> scheduled_running_;
  std::vector<Request*> scheduled_new_;
  std::vector<Request*> scheduled_resumed_;
  std::vector<Request*> preempted_;
  std::vector<int32_t> output_index_;
  std::vector<Request*> stopped_;
  absl::flat_hash_map<std::string_view, int32_t> output_index_by_id_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_SCHEDULER_H_
