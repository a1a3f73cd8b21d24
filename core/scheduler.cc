#include "core/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace vllm::core {
namespace {

// Records an event of `request` now, on the clock of EngineCoreOutputs::timestamp. A request
// keeps at most kMaxPendingEvents between two outputs (a request preempted again and again
// before its first token would otherwise grow them past what the output codec accepts): the
// first ones, which the frontend's queue and prefill times come from, are kept.
void RecordEvent(Request* request, EngineCoreEventType type) {
  constexpr size_t kMaxPendingEvents = 256;
  if (request->events.size() >= kMaxPendingEvents) return;
  request->events.push_back(
      EngineCoreEvent{type, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())});
  request->has_events = true;
}

// A step walks thousands of heap-allocated requests, and the hardware cannot prefetch
// through pointers: fetch the hot lines of a request (its first three) a few iterations
// ahead, and the tail of its token list (read and appended to) a little later, once its
// header is cached.
inline void PrefetchAhead(const std::vector<Request*>& requests, size_t i) {
  constexpr size_t kRequestDistance = 8;
  constexpr size_t kTokensDistance = 4;
  if (i + kRequestDistance < requests.size()) {
    const char* r = reinterpret_cast<const char*>(requests[i + kRequestDistance]);
    __builtin_prefetch(r);
    __builtin_prefetch(r + 64);
    __builtin_prefetch(r + 128);
  }
  if (i + kTokensDistance < requests.size()) {
    const std::vector<int32_t>& tokens = requests[i + kTokensDistance]->all_token_ids;
    __builtin_prefetch(tokens.data() + tokens.size() - 1);
  }
}

// Sets (*strings)[i] to `value`, reusing that string's capacity; appends when i is the end.
inline void AssignStringAt(std::vector<std::string>* strings, size_t i, const std::string& value) {
  if (i < strings->size()) {
    (*strings)[i].assign(value);
  } else {
    strings->push_back(value);
  }
}

// (*outputs)[i] as a fresh EngineCoreOutput that keeps its buffers (request_id's capacity);
// appended when i is the end. Resets every field of EngineCoreOutput.
EngineCoreOutput& ReuseOutputAt(std::vector<EngineCoreOutput>* outputs, size_t i) {
  if (i == outputs->size()) return outputs->emplace_back();
  EngineCoreOutput& out = (*outputs)[i];
  out.request_id.clear();
  out.new_token_ids.clear();
  out.finish_reason.reset();
  out.stop_reason.reset();
  out.num_cached_tokens = 0;
  out.num_cache_creation_tokens = 0;
  if (!out.logprobs.empty()) out.logprobs.clear();
  if (!out.prompt_logprobs.empty()) out.prompt_logprobs.clear();
  out.kv_transfer_params.reset();
  if (!out.events.empty()) out.events.clear();
  return out;
}

// Empties every field of `outputs` but its outputs (UpdateFromOutput overwrites them in
// place), keeping the buffers.
void ResetForReuse(EngineCoreOutputs* outputs) {
  outputs->engine_index = 0;
  outputs->scheduler_stats.reset();
  outputs->timestamp = 0.0;
  outputs->finished_requests.clear();
  outputs->wave_complete.reset();
  outputs->start_wave.reset();
}

// Empties every field of `output` but step_id, scheduled_cached_reqs.req_ids and
// preempted_req_ids (BuildOutput overwrites those in place), keeping the buffers.
void ResetForReuse(SchedulerOutput* output) {
  output->scheduled_new_reqs.clear();
  CachedRequestData& c = output->scheduled_cached_reqs;
  c.resumed_from_preemption.clear();
  c.new_token_ids.clear();
  c.new_token_ids_offsets.assign(1, 0);
  c.new_block_ids.clear();
  c.new_block_ids_offsets.assign(1, 0);
  c.num_computed_tokens.clear();
  output->num_scheduled_tokens.clear();
  output->total_num_scheduled_tokens = 0;
  output->finished_req_ids.clear();
  output->structured_output_indices.clear();
  output->grammar_bitmask.clear();
  output->num_scheduled_spec_tokens.clear();
  output->num_spec_tokens_to_schedule = 0;
  output->kv_connector_metadata.reset();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const config::VllmConfig& config, const KVCacheConfig& kv_cache_config,
    structured_output::StructuredOutputManager* structured_output_manager,
    spec_decode::Proposer* proposer, std::unique_ptr<KVConnectorScheduler> kv_connector) {
  VLLM_RETURN_IF_ERROR(config.CheckResolved());
  VLLM_RETURN_IF_ERROR(ValidateKVCacheConfig(config, kv_cache_config));
  return std::unique_ptr<Scheduler>(new Scheduler(
      config, kv_cache_config, structured_output_manager, proposer, std::move(kv_connector)));
}

Scheduler::Scheduler(const config::VllmConfig& config, const KVCacheConfig& kv_cache_config,
                     structured_output::StructuredOutputManager* structured_output_manager,
                     spec_decode::Proposer* proposer,
                     std::unique_ptr<KVConnectorScheduler> kv_connector)
    : config_(config),
      kv_cache_config_(kv_cache_config),
      structured_output_manager_(structured_output_manager),
      proposer_(config.speculative.num_speculative_tokens > 0 ? proposer : nullptr),
      worker_drafts_(config.speculative.num_speculative_tokens > 0 &&
                     config.speculative.DraftsInWorker()),
      num_lookahead_tokens_(worker_drafts_ ? config.speculative.NumLookaheadTokens() : 0),
      dynamic_k_(config.speculative.DynamicSchedule(config.scheduler.max_num_seqs)),
      kv_cache_manager_(kv_cache_config.num_blocks, config.cache.block_size,
                        config.model.max_model_len, config.cache.enable_prefix_caching,
                        config.kv_events.enable, kv_cache_config.sliding_window),
      kv_connector_(std::move(kv_connector)),
      recompute_kv_load_failures_(config.kv_transfer.kv_load_failure_policy == "recompute"),
      waiting_(config.scheduler.policy) {
  spec_stats_.num_spec_tokens = config.speculative.num_speculative_tokens;
}

absl::Status Scheduler::AddRequest(EngineCoreRequest request) {
  VLLM_RETURN_IF_ERROR(ValidateEngineCoreRequest(request, config_.model.max_model_len));
  if (requests_.contains(request.request_id)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "request_id %s is already in use by an unfinished request", request.request_id));
  }
  if (held_.contains(request.request_id)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "request_id %s is in use: the KV connector still holds its blocks", request.request_id));
  }
  if (request.sampling_params.structured_outputs.has_value() &&
      structured_output_manager_ == nullptr) {
    return absl::FailedPreconditionError(
        "structured_outputs: this engine has no structured-output backend");
  }
  auto owned = std::make_unique<Request>(std::move(request), config_.model.max_model_len);
  owned->arrival_seq = next_arrival_seq_++;
  Request* raw = owned.get();
  RecordEvent(raw, EngineCoreEventType::kQueued);
  requests_.emplace(raw->request_id, std::move(owned));
  if (raw->sampling_params.structured_outputs.has_value()) {
    raw->structured_output = structured_output_manager_->Submit(
        *raw->sampling_params.structured_outputs, raw->eos_token_id, raw->prompt_token_ids());
    raw->status = RequestStatus::kWaitingForFsm;
    waiting_for_fsm_.push_back(raw);
  } else {
    waiting_.Add(raw);
  }
  return absl::OkStatus();
}

const Request* Scheduler::GetRequest(std::string_view request_id) const {
  // absl 20220623 has its own string_view, which std::string_view does not convert to.
  auto it = requests_.find(absl::string_view(request_id.data(), request_id.size()));
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::FinishRequests(std::span<const std::string> request_ids,
                               RequestStatus finished_status) {
  VLLM_CHECK(IsFinished(finished_status)) << "FinishRequests needs a finished status";
  absl::flat_hash_set<const Request*> running_doomed;
  absl::flat_hash_set<const Request*> waiting_doomed;
  std::vector<Request*> doomed;
  for (const std::string& id : request_ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request* request = it->second.get();
    if (request->is_finished()) continue;  // listed twice
    bool load_in_flight = false;
    if (request->status == RequestStatus::kRunning) {
      running_doomed.insert(request);
    } else if (request->status == RequestStatus::kWaitingForFsm) {
      std::erase(waiting_for_fsm_, request);
    } else if (request->status == RequestStatus::kWaitingForRemoteKvs) {
      std::erase(waiting_for_remote_kvs_, request);
      // The workers still write into its blocks until they report the load done.
      load_in_flight = finished_recving_.erase(request->request_id) == 0 &&
                       failed_recving_.erase(request->request_id) == 0;
    } else {
      waiting_doomed.insert(request);
    }
    request->status = finished_status;
    if (kv_connector_ != nullptr) ConnectorFinished(*request, load_in_flight);
    doomed.push_back(request);
  }
  if (!running_doomed.empty()) {
    std::erase_if(running_, [&](const Request* r) { return running_doomed.contains(r); });
  }
  if (!waiting_doomed.empty()) waiting_.Remove(waiting_doomed);
  for (Request* request : doomed) {
    FreeRequest(*request);
    EraseFinished(request);
  }
}

void Scheduler::EraseFinished(Request* request) {
  auto it = requests_.find(request->request_id);
  if (request->kv_blocks_held) {
    held_[request->request_id] = std::move(it->second);
  } else if (request->num_inflight_steps > 0) {
    zombies_.push_back(std::move(it->second));
  }
  requests_.erase(it);
}

void Scheduler::FreeRequest(Request& request) {
  if (!request.kv_blocks_held) kv_cache_manager_.Free(request);
  if (proposer_ != nullptr) {
    proposer_->OnRequestFinished(request.request_id, request.all_token_ids,
                                 request.num_prompt_tokens);
  }
  finished_req_ids_.push_back(request.request_id);
}

void Scheduler::PreemptRequest(Request* request) {
  kv_cache_manager_.Free(*request);
  request->status = RequestStatus::kPreempted;
  request->num_computed_tokens = 0;
  request->spec_token_ids.clear();
  ++request->num_preemptions;
  RecordEvent(request, EngineCoreEventType::kPreempted);
  // Outputs of steps already in flight describe a computation we are discarding.
  request->num_stale_steps = request->num_inflight_steps;
  waiting_.Prepend(request);
  preempted_.push_back(request);
  ++num_preemptions_since_stats_;
}

Request* Scheduler::PopPreemptionVictim(size_t* req_index, int32_t* token_budget) {
  // Lowest priority = largest (priority, arrival_time).
  auto it =
      std::max_element(running_.begin(), running_.end(),
                       [](const Request* a, const Request* b) { return PriorityBefore(*a, *b); });
  Request* victim = *it;
  const size_t victim_index = static_cast<size_t>(it - running_.begin());
  running_.erase(it);
  if (victim_index < *req_index) --*req_index;
  if (victim->num_scheduled_tokens > 0) {
    *token_budget += victim->num_scheduled_tokens;
    victim->num_scheduled_tokens = 0;
    victim->num_scheduled_spec_tokens = 0;
    std::erase(scheduled_running_, victim);
  }
  return victim;
}

void Scheduler::ScheduleRunning(int32_t* token_budget) {
  size_t req_index = 0;
  // Pipeline parallelism: a request in flight waits for its output, so a step that took every
  // running request would leave the other stages idle until it returns. Each step takes at
  // most 1/PP of them, so PP micro-batches follow each other through the stages
  // (docs/DECISIONS.md).
  const int32_t pp = config_.parallel.pipeline_parallel_size;
  const size_t max_scheduled =
      pp > 1 ? (running_.size() + static_cast<size_t>(pp) - 1) / static_cast<size_t>(pp)
             : running_.size();
  // Locals: the compiler cannot keep config_ in registers across the stores to requests.
  const int32_t long_prefill_threshold = config_.scheduler.long_prefill_token_threshold;
  const int32_t max_model_len = config_.model.max_model_len;
  scheduled_running_.reserve(max_scheduled);
  while (req_index < running_.size() && *token_budget > 0 &&
         scheduled_running_.size() < max_scheduled) {
    PrefetchAhead(running_, req_index);
    Request* request = running_[req_index];
    // A decode with drafts schedules them after its last sampled token (vLLM's
    // num_tokens_with_spec); the budget or max_model_len may cut them short.
    int32_t num_new_tokens = request->num_tokens() +
                             static_cast<int32_t>(request->spec_token_ids.size()) -
                             request->num_computed_tokens;
    if (long_prefill_threshold > 0) {
      num_new_tokens = std::min(num_new_tokens, long_prefill_threshold);
    }
    num_new_tokens = std::min(num_new_tokens, *token_budget);
    // The input positions must stay within max_model_len.
    num_new_tokens = std::min(num_new_tokens, max_model_len - 1 - request->num_computed_tokens);
    if (num_new_tokens <= 0) {
      // Nothing to do until an in-flight step's output arrives.
      ++req_index;
      continue;
    }
    const int32_t num_blocks_before = static_cast<int32_t>(request->block_ids.size());
    bool allocated =
        kv_cache_manager_.AllocateSlotsIsNoop(*request, num_new_tokens, num_lookahead_tokens_);
    while (!allocated) {
      if (kv_cache_manager_.AllocateSlots(*request, num_new_tokens, 0, {}, num_lookahead_tokens_)
              .has_value()) {
        allocated = true;
        break;
      }
      Request* victim;
      if (config_.scheduler.policy == SchedulingPolicy::kPriority) {
        victim = PopPreemptionVictim(&req_index, token_budget);
      } else {
        victim = running_.back();
        running_.pop_back();
      }
      PreemptRequest(victim);
      if (victim == request) break;  // nothing left to preempt
    }
    if (!allocated) break;
    request->num_scheduled_tokens = num_new_tokens;
    request->num_scheduled_spec_tokens =
        std::max(0, request->num_computed_tokens + num_new_tokens - request->num_tokens());
    request->num_blocks_before_step = num_blocks_before;
    scheduled_running_.push_back(request);
    *token_budget -= num_new_tokens;
    ++req_index;
  }
}

void Scheduler::ReserveForDecode(Request& request) const {
  // Room for the tokens the request may still generate (capped: an unset max_tokens means
  // max_model_len), so that its decode steps append without reallocating.
  constexpr int32_t kMaxReservedOutputTokens = 1024;
  const int32_t max_len =
      std::min(config_.model.max_model_len,
               request.num_prompt_tokens + std::min(request.max_tokens, kMaxReservedOutputTokens));
  const int32_t block_size = config_.cache.block_size;
  const auto num_blocks =
      static_cast<size_t>((max_len + num_lookahead_tokens_ + block_size - 1) / block_size);
  request.all_token_ids.reserve(static_cast<size_t>(max_len));
  request.block_ids.reserve(num_blocks);
  if (config_.cache.enable_prefix_caching) request.block_hashes.reserve(num_blocks);
}

void Scheduler::ScheduleWaiting(int32_t* token_budget) {
  // vLLM does not admit waiting requests in a step that had to preempt.
  if (!preempted_.empty()) return;
  while (!waiting_.empty() && *token_budget > 0) {
    if (static_cast<int32_t>(running_.size()) >= config_.scheduler.max_num_seqs) break;
    Request* request = waiting_.Peek();
    KVCacheManager::ComputedBlocks computed;
    // A request whose KV was loaded holds its blocks already (a one-token prompt then has
    // nothing computed): no lookup.
    if (request->num_computed_tokens == 0 && request->block_ids.empty()) {
      computed = kv_cache_manager_.GetComputedBlocks(*request);
      if (kv_connector_ != nullptr) {
        bool no_room = false;
        if (MaybeStartKvLoad(request, computed, &no_room)) continue;
        if (no_room) break;
      }
    }
    const int32_t num_computed_tokens = request->num_computed_tokens + computed.num_computed_tokens;
    int32_t num_new_tokens = request->num_tokens() - num_computed_tokens;
    if (config_.scheduler.long_prefill_token_threshold > 0) {
      num_new_tokens = std::min(num_new_tokens, config_.scheduler.long_prefill_token_threshold);
    }
    if (!config_.scheduler.enable_chunked_prefill && num_new_tokens > *token_budget) break;
    num_new_tokens = std::min(num_new_tokens, *token_budget);
    VLLM_CHECK(num_new_tokens > 0)
        << "waiting request " << request->request_id << " has nothing to compute";
    if (!kv_cache_manager_
             .AllocateSlots(*request, num_new_tokens, computed.num_computed_tokens,
                            computed.block_ids, num_lookahead_tokens_)
             .has_value()) {
      break;  // the cache is full: later requests would not fit either
    }
    waiting_.Pop();
    running_.push_back(request);
    ReserveForDecode(*request);
    if (request->status == RequestStatus::kWaiting) {
      scheduled_new_.push_back(request);
    } else {
      scheduled_resumed_.push_back(request);
    }
    request->status = RequestStatus::kRunning;
    RecordEvent(request, EngineCoreEventType::kScheduled);
    request->num_computed_tokens = num_computed_tokens;
    if (request->num_cached_tokens < 0) request->num_cached_tokens = num_computed_tokens;
    request->num_scheduled_tokens = num_new_tokens;
    request->num_blocks_before_step = 0;
    *token_budget -= num_new_tokens;
  }
}

void Scheduler::Schedule(SchedulerOutput* output) {
  scheduled_running_.clear();
  scheduled_new_.clear();
  scheduled_resumed_.clear();
  preempted_.clear();
  if (!waiting_for_fsm_.empty()) PromoteCompiledRequests();
  if (kv_connector_ != nullptr) PromoteLoadedRequests();
  int32_t token_budget = config_.scheduler.max_num_batched_tokens;
  ScheduleRunning(&token_budget);
  ScheduleWaiting(&token_budget);
  VLLM_CHECK(token_budget >= 0) << "token budget overdrawn";
  VLLM_CHECK(static_cast<int32_t>(running_.size()) <= config_.scheduler.max_num_seqs)
      << "more running requests than max_num_seqs";
  output->step_id = next_step_id_++;
  BuildOutput(output);
  if (structured_output_manager_ != nullptr) FillGrammarBitmask(output);
  if (kv_connector_ != nullptr) AttachKvConnectorMetadata(output);
  VLLM_CHECK(output->total_num_scheduled_tokens ==
             config_.scheduler.max_num_batched_tokens - token_budget)
      << "scheduled tokens do not match the budget used";
}

Scheduler::StepRecord& Scheduler::StartStepRecord(uint64_t step_id, size_t num_requests) {
  StepRecord& record = inflight_steps_.emplace_back();
  if (!spare_records_.empty()) {
    record = std::move(spare_records_.back());
    spare_records_.pop_back();
  }
  record.step_id = step_id;
  record.requests.clear();
  record.requests.reserve(num_requests);
  record.num_spec_tokens.clear();
  record.num_spec_tokens_to_schedule = 0;
  return record;
}

void Scheduler::AdvanceAfterSchedule(StepRecord& record, size_t num_requests, Request* r) {
  if (r->num_scheduled_spec_tokens > 0) {
    if (record.num_spec_tokens.empty()) record.num_spec_tokens.resize(num_requests, 0);
    record.num_spec_tokens[record.requests.size()] = r->num_scheduled_spec_tokens;
  }
  // Drafts are used once: new ones come with the output of this step.
  if (!r->spec_token_ids.empty()) r->spec_token_ids.clear();
  r->num_computed_tokens += r->num_scheduled_tokens;
  r->num_scheduled_tokens = 0;
  r->num_scheduled_spec_tokens = 0;
  ++r->num_inflight_steps;
  record.requests.push_back(r);
}

void Scheduler::BuildOutput(SchedulerOutput* output) {
  ResetForReuse(output);
  const size_t num_cached = scheduled_running_.size() + scheduled_resumed_.size();
  const size_t num_requests = scheduled_new_.size() + num_cached;
  // The scheduled tokens count as computed from now on (vLLM's _update_after_schedule), so
  // the next Schedule() moves on even before this step's output arrives; each request is
  // advanced (AdvanceAfterSchedule) right after its entry is written, in one pass.
  StepRecord& record = StartStepRecord(output->step_id, num_requests);
  output->scheduled_new_reqs.reserve(scheduled_new_.size());
  output->num_scheduled_tokens.reserve(num_requests);
  int32_t total = 0;
  for (Request* r : scheduled_new_) {
    NewRequestData& d = output->scheduled_new_reqs.emplace_back();
    d.req_id = r->request_id;
    d.prompt_token_ids.assign(r->prompt_token_ids().begin(), r->prompt_token_ids().end());
    d.sampling_params = r->sampling_params;
    d.sampling_params.structured_outputs.reset();  // workers get the step's bitmask instead
    d.block_ids = r->block_ids;
    d.num_computed_tokens = r->num_computed_tokens;
    output->num_scheduled_tokens.push_back(r->num_scheduled_tokens);
    total += r->num_scheduled_tokens;
    AdvanceAfterSchedule(record, num_requests, r);
  }
  // The cached requests: the arrays are sized once and written by index (a decode step
  // writes some ten values per request; push_back's bookkeeping was most of this loop,
  // measured with callgrind). new_token_ids starts at one token per request (a decode) and
  // grows when a request feeds more.
  CachedRequestData& c = output->scheduled_cached_reqs;
  c.resumed_from_preemption.resize(num_cached);
  c.num_computed_tokens.resize(num_cached);
  c.new_token_ids_offsets.resize(num_cached + 1);
  c.new_block_ids_offsets.resize(num_cached + 1);
  c.new_token_ids.resize(num_cached);
  output->num_scheduled_tokens.resize(num_requests);
  const size_t num_new = scheduled_new_.size();
  size_t num_tokens_out = 0;
  size_t num_ids = 0;
  auto add_cached = [&](Request* r, bool resumed) {
    const size_t k = num_ids++;
    AssignStringAt(&c.req_ids, k, r->request_id);
    c.resumed_from_preemption[k] = resumed ? 1 : 0;
    // A resumed request's worker state is gone: send all its tokens.
    const int32_t begin = resumed ? 0 : r->num_computed_tokens;
    const int32_t end =
        resumed ? r->num_tokens()
                : r->num_computed_tokens + r->num_scheduled_tokens - r->num_scheduled_spec_tokens;
    // Then its draft tokens, which the worker verifies.
    const auto num_fed = static_cast<size_t>(end - begin + r->num_scheduled_spec_tokens);
    if (num_tokens_out + num_fed > c.new_token_ids.size()) [[unlikely]] {
      c.new_token_ids.resize(std::max(2 * c.new_token_ids.size(), num_tokens_out + num_fed));
    }
    int32_t* out = c.new_token_ids.data() + num_tokens_out;
    if (end - begin == 1) {
      *out++ = r->all_token_ids[begin];  // the common decode case
    } else {
      out = std::copy(r->all_token_ids.begin() + begin, r->all_token_ids.begin() + end, out);
    }
    if (r->num_scheduled_spec_tokens > 0) {
      std::copy(r->spec_token_ids.begin(), r->spec_token_ids.begin() + r->num_scheduled_spec_tokens,
                out);
    }
    num_tokens_out += num_fed;
    c.new_token_ids_offsets[k + 1] = static_cast<uint32_t>(num_tokens_out);
    const size_t first_new_block = resumed ? 0 : r->num_blocks_before_step;
    if (first_new_block < r->block_ids.size()) {
      c.new_block_ids.insert(c.new_block_ids.end(), r->block_ids.begin() + first_new_block,
                             r->block_ids.end());
    }
    c.new_block_ids_offsets[k + 1] = static_cast<uint32_t>(c.new_block_ids.size());
    c.num_computed_tokens[k] = r->num_computed_tokens;
    output->num_scheduled_tokens[num_new + k] = r->num_scheduled_tokens;
    total += r->num_scheduled_tokens;
    AdvanceAfterSchedule(record, num_requests, r);
  };
  for (size_t i = 0; i < scheduled_running_.size(); ++i) {
    PrefetchAhead(scheduled_running_, i);
    add_cached(scheduled_running_[i], false);
  }
  for (Request* r : scheduled_resumed_) add_cached(r, true);
  c.req_ids.resize(num_ids);
  c.new_token_ids.resize(num_tokens_out);

  output->total_num_scheduled_tokens = total;
  output->finished_req_ids.swap(finished_req_ids_);
  for (size_t i = 0; i < preempted_.size(); ++i) {
    AssignStringAt(&output->preempted_req_ids, i, preempted_[i]->request_id);
  }
  output->preempted_req_ids.resize(preempted_.size());
  output->num_scheduled_spec_tokens = record.num_spec_tokens;
  // vLLM's dynamic speculative decoding: the k of this step's batch size.
  const size_t batch = num_requests;
  if (proposer_ == nullptr && !worker_drafts_) {
    output->num_spec_tokens_to_schedule = 0;
  } else if (dynamic_k_.empty() || batch == 0) {
    output->num_spec_tokens_to_schedule = config_.speculative.num_speculative_tokens;
  } else {
    output->num_spec_tokens_to_schedule = dynamic_k_[std::min(batch, dynamic_k_.size() - 1)];
  }
  record.num_spec_tokens_to_schedule = output->num_spec_tokens_to_schedule;
}

absl::Status Scheduler::UpdateFromOutput(const SchedulerOutput& scheduler_output,
                                         const ModelRunnerOutput& model_output,
                                         EngineCoreOutputs* outputs) {
  const size_t num_scheduled = scheduler_output.num_scheduled_reqs();
  // Pass 1: find every scheduled request's entry and validate, so that a bad output changes
  // nothing.
  VLLM_RETURN_IF_ERROR(MatchModelOutput(scheduler_output, model_output));

  // Pass 2: apply.
  if (model_output.kv_connector_output.has_value()) {
    ApplyKvConnectorOutput(*model_output.kv_connector_output);
  }
  StepRecord record = std::move(inflight_steps_.front());
  inflight_steps_.erase(inflight_steps_.begin());
  EngineCoreOutputs& result = *outputs;
  ResetForReuse(&result);
  result.outputs.reserve(num_scheduled + pending_outputs_.size());
  size_t num_outputs = 0;
  for (EngineCoreOutput& out : pending_outputs_) {
    result.finished_requests.push_back(out.request_id);
    ReuseOutputAt(&result.outputs, num_outputs++) = std::move(out);
  }
  pending_outputs_.clear();
  stopped_.clear();
  const bool propose = proposer_ != nullptr || worker_drafts_;
  bool release_zombies = false;
  for (size_t i = 0; i < num_scheduled; ++i) {
    PrefetchAhead(record.requests, i);
    Request& request = *record.requests[i];
    --request.num_inflight_steps;
    if (request.is_finished()) {  // finished or aborted since
      release_zombies |= request.num_inflight_steps == 0;
      continue;
    }
    if (request.num_stale_steps > 0) {
      --request.num_stale_steps;
      continue;
    }
    const std::vector<int32_t>& sampled = model_output.sampled_token_ids[output_index_[i]];
    if (sampled.empty() || request.status != RequestStatus::kRunning) continue;
    if (!record.num_spec_tokens.empty() && record.num_spec_tokens[i] > 0) {
      // The rejected drafts' KV is stale: those positions are computed again (vLLM's
      // num_computed_tokens -= num_rejected).
      const auto num_draft = record.num_spec_tokens[i];
      const auto num_accepted = static_cast<int32_t>(sampled.size()) - 1;
      request.num_computed_tokens -= num_draft - num_accepted;
      spec_stats_.Observe(num_draft, num_accepted);
    }
    // Prompt logprobs go with the request's first generated token only (a request recomputed
    // after a preemption gets them from the worker again).
    const bool first_output = request.num_output_tokens() == 0;
    size_t num_appended = 0;
    bool stopped = false;
    for (int32_t token : sampled) {
      request.all_token_ids.push_back(token);
      ++num_appended;
      if ((request.structured_output != nullptr && AdvanceGrammar(request)) || CheckStop(request)) {
        stopped = true;
        break;
      }
    }
    EngineCoreOutput& out = ReuseOutputAt(&result.outputs, num_outputs++);
    out.request_id.assign(request.request_id);
    if (num_appended == 1) {
      out.new_token_ids.push_back(sampled[0]);  // ReuseOutputAt emptied it
    } else {
      out.new_token_ids.assign(sampled.begin(), sampled.begin() + num_appended);
    }
    out.num_cached_tokens = std::max(request.num_cached_tokens, 0);
    if (first_output) {
      // vLLM's PrefillStats.finalize: the prompt tokens now in cached full blocks, less the
      // hits; computed once, then every later output repeats it.
      request.num_cache_creation_tokens = std::max(
          0, std::min(kv_cache_manager_.EstimateCachedTokens(request), request.num_prompt_tokens) -
                 out.num_cached_tokens);
    }
    out.num_cache_creation_tokens = request.num_cache_creation_tokens;
    if (request.has_events) {
      out.events.swap(request.events);
      request.has_events = false;
    }
    if (!model_output.logprobs.empty() && request.sampling_params.logprobs.has_value()) {
      const auto& logprobs = model_output.logprobs[output_index_[i]];
      out.logprobs.assign(logprobs.begin(),
                          logprobs.begin() + std::min(num_appended, logprobs.size()));
    }
    if (first_output && !model_output.prompt_logprobs.empty() &&
        request.sampling_params.prompt_logprobs.has_value()) {
      out.prompt_logprobs = model_output.prompt_logprobs[output_index_[i]];
    }
    if (stopped) {
      out.finish_reason = GetFinishReason(request.status);
      out.stop_reason = request.stop_reason;
      if (kv_connector_ != nullptr) out.kv_transfer_params = ConnectorFinished(request, false);
      stopped_.push_back(&request);
    } else if (propose) {
      propose_scratch_.push_back(&request);
      propose_output_index_.push_back(output_index_[i]);
    }
  }
  result.outputs.resize(num_outputs);
  if (!stopped_.empty()) {
    std::erase_if(running_, [](const Request* r) { return r->is_finished(); });
    for (Request* request : stopped_) {
      FreeRequest(*request);
      result.finished_requests.push_back(request->request_id);
      EraseFinished(request);
    }
  }
  if (release_zombies) {
    std::erase_if(zombies_, [](const auto& r) { return r->num_inflight_steps == 0; });
  }
  const int32_t k = record.num_spec_tokens_to_schedule;
  record.requests.clear();
  spare_records_.push_back(std::move(record));
  if (!propose_scratch_.empty()) ProposeDrafts(model_output, k);
  return absl::OkStatus();
}

void Scheduler::ProposeDrafts(const ModelRunnerOutput& model_output, int32_t k) {
  if (k <= 0) {  // the dynamic schedule drafts nothing at this batch size
    propose_scratch_.clear();
    propose_output_index_.clear();
    return;
  }
  propose_requests_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < propose_scratch_.size(); ++i) {
    Request* r = propose_scratch_[i];
    // Only a request whose next step is a plain decode (everything but its last token
    // computed); a constrained one once its grammar applies (not while it reasons).
    if (r->is_finished() || r->num_computed_tokens != r->num_tokens() - 1 ||
        (r->structured_output != nullptr && !CanDraftUnderGrammar(*r))) {
      continue;
    }
    // The drafts and the token after them must fit max_tokens and max_model_len.
    const int32_t room = std::min(r->max_tokens - r->num_output_tokens(),
                                  config_.model.max_model_len - r->num_tokens()) -
                         1;
    if (room <= 0) continue;
    spec_decode::ProposeRequest& p = propose_requests_.emplace_back();
    p.request_id = r->request_id;
    p.token_ids = r->all_token_ids;
    p.num_prompt_tokens = r->num_prompt_tokens;
    p.max_draft_tokens = std::min(k, room);
    propose_output_index_[kept] = propose_output_index_[i];
    propose_scratch_[kept++] = r;
  }
  propose_scratch_.resize(kept);
  propose_output_index_.resize(kept);
  if (!propose_requests_.empty()) {
    if (proposer_ != nullptr) {
      proposer_->Propose(propose_requests_, &drafts_);
    } else {
      drafts_.resize(kept);
      for (size_t i = 0; i < kept; ++i) {
        const auto j = static_cast<size_t>(propose_output_index_[i]);
        if (j < model_output.draft_token_ids.size()) {
          drafts_[i] = model_output.draft_token_ids[j];
        } else {
          drafts_[i].clear();
        }
      }
    }
    for (size_t i = 0; i < propose_scratch_.size() && i < drafts_.size(); ++i) {
      std::vector<int32_t>& draft = drafts_[i];
      if (static_cast<int32_t>(draft.size()) > propose_requests_[i].max_draft_tokens) {
        draft.resize(static_cast<size_t>(propose_requests_[i].max_draft_tokens));
      }
      // Under a grammar only the prefix it accepts is worth verifying (vLLM's
      // validate_tokens).
      if (propose_scratch_[i]->structured_output != nullptr) {
        draft.resize(ValidDraftPrefix(*propose_scratch_[i], draft));
      }
      propose_scratch_[i]->spec_token_ids.assign(draft.begin(), draft.end());
    }
  }
  propose_scratch_.clear();
  propose_output_index_.clear();
}

SchedulerStats Scheduler::MakeStats() {
  SchedulerStats stats;
  stats.num_running_reqs = static_cast<int32_t>(running_.size());
  stats.num_waiting_reqs = static_cast<int32_t>(waiting_.size());
  stats.kv_cache_usage = kv_cache_manager_.GetUsage();
  stats.prefix_cache_stats = kv_cache_manager_.MakePrefixCacheStats();
  stats.connector_prefix_cache_stats = std::exchange(connector_prefix_cache_stats_, {});
  stats.num_preemptions = num_preemptions_since_stats_;
  num_preemptions_since_stats_ = 0;
  if (structured_output_manager_ != nullptr) {
    stats.structured_output_stats = structured_output_manager_->TakeStats();
  }
  if (proposer_ != nullptr || worker_drafts_) {
    stats.spec_decoding_stats = std::exchange(spec_stats_, {});
    spec_stats_.num_spec_tokens = config_.speculative.num_speculative_tokens;
  }
  return stats;
}

}  // namespace vllm::core
