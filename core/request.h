// Request: the scheduler's record of one request (vLLM's vllm/v1/request.py).
//
// Owned by the Scheduler and touched only by the scheduler thread. Fields are grouped by
// the component that writes them; everything else only reads them.
#ifndef VLLM_CORE_REQUEST_H_
#define VLLM_CORE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/engine_core_types.h"
#include "core/kv_cache_utils.h"
#include "core/sampling_params.h"
#include "kv_transfer/types.h"
#include "structured_output/manager.h"

namespace vllm::core {

enum class RequestStatus : uint8_t {
  kWaiting,
  kRunning,
  kPreempted,  // waiting again after its blocks were freed (recompute)
  // Waiting for its structured-output grammar to compile (vLLM's WAITING_FOR_FSM): kept out of
  // the waiting queue until it is ready.
  kWaitingForFsm,
  // Its KV is being loaded by the KV connector (vLLM's WAITING_FOR_REMOTE_KVS): it holds its
  // blocks, is kept out of the waiting queue and is not scheduled until the load finished or
  // failed; the steps go on without it.
  kWaitingForRemoteKvs,
  // Finished (IsFinished): keep these last.
  kFinishedStopped,
  kFinishedLengthCapped,
  kFinishedAborted,
  kFinishedError,
};

// The finished statuses are the last ones of the enum.
inline bool IsFinished(RequestStatus status) { return status >= RequestStatus::kFinishedStopped; }
// The FinishReason of a finished status (kError for a status that is not finished).
FinishReason GetFinishReason(RequestStatus status);

struct alignas(64) Request {
  // Builds a waiting request from a validated EngineCoreRequest. An unset max_tokens
  // becomes "until max_model_len".
  Request(EngineCoreRequest&& request, int32_t max_model_len);

  int32_t num_tokens() const { return static_cast<int32_t>(all_token_ids.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt_token_ids() const {
    return std::span<const int32_t>(all_token_ids).first(num_prompt_tokens);
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span<const int32_t>(all_token_ids).subspan(num_prompt_tokens);
  }
  bool is_finished() const { return IsFinished(status); }

  // Fields are ordered hot first: everything Schedule() and UpdateFromOutput() touch for a
  // decode step sits in the first three cache lines (a step visits thousands of requests):
  // line 0 the counters and flags, line 1 the token list and block table, line 2 the id and
  // the drafts.

  // --- Written by the Scheduler.
  RequestStatus status = RequestStatus::kWaiting;
  // --- Immutable after construction (a hot copy of sampling_params).
  bool has_stop_token_ids = false;
  // --- Written by the Scheduler.
  // `events` (a cold line) is not empty: the step reads this flag, not the vector.
  bool has_events = false;
  // Tokens whose KV is (or, for scheduled in-flight steps, will be) in the cache.
  int32_t num_computed_tokens = 0;
  // Steps including this request that were scheduled but whose output has not arrived.
  int32_t num_inflight_steps = 0;
  // Of those, how many were scheduled before the request's last preemption: their sampled
  // tokens are dropped (the request recomputes and samples again).
  int32_t num_stale_steps = 0;
  // Scratch of Scheduler::Schedule(), 0 outside it: tokens scheduled in the current step,
  // and the length of the block table before this step's allocation.
  int32_t num_scheduled_tokens = 0;
  int32_t num_blocks_before_step = 0;
  // Of num_scheduled_tokens, the draft tokens (speculative decoding).
  int32_t num_scheduled_spec_tokens = 0;
  // Prompt tokens found in the prefix cache when first scheduled; -1 until then.
  int32_t num_cached_tokens = -1;
  // Prompt tokens this request wrote to the prefix cache: set once, with its first generated
  // token (vLLM's PrefillStats.num_cache_creation_tokens); 0 until then.
  int32_t num_cache_creation_tokens = 0;

  // --- Immutable after construction (hot copies of sampling_params).
  int32_t num_prompt_tokens = 0;
  // sampling_params.max_tokens resolved against max_model_len.
  int32_t max_tokens = 0;
  int32_t min_tokens = 0;
  // -1 when the request has no EOS or ignores it.
  int32_t eos_token_id_or_none = -1;

  // --- Written by the KVCacheManager.
  // Leading blocks of block_ids registered in the prefix cache.
  int32_t num_cached_blocks = 0;

  // --- Written by the Scheduler: the grammar of a request with structured_outputs (vLLM's
  // request.structured_output_request); null otherwise.
  std::unique_ptr<structured_output::RequestState> structured_output;

  // --- Written by the Scheduler.
  // Prompt followed by the generated tokens.
  std::vector<int32_t> all_token_ids;
  // --- Written by the KVCacheManager.
  // The block table: block i holds tokens [i * block_size, (i + 1) * block_size).
  std::vector<int32_t> block_ids;

  // --- Immutable after construction.
  std::string request_id;
  // --- Written by the Scheduler.
  // Speculative decoding: the draft tokens proposed after the last sampled token (vLLM's
  // request.spec_token_ids), scheduled with it in the next step and then cleared.
  std::vector<int32_t> spec_token_ids;

  // --- Immutable after construction (cold).
  SamplingParams sampling_params;
  std::optional<int32_t> eos_token_id;
  double arrival_time = 0.0;
  int32_t priority = 0;
  // Empty when the request has no salt.
  std::string cache_salt;
  // Tie-breaker for equal (priority, arrival_time): order of AddRequest.
  uint64_t arrival_seq = 0;

  // --- Written by the Scheduler (cold).
  std::optional<int32_t> stop_reason;
  int32_t num_preemptions = 0;
  // Events not yet sent with an output (EngineCoreOutput::events).
  std::vector<EngineCoreEvent> events;

  // --- Written by the KVCacheManager (cold).
  // Hashes of the full blocks of all_token_ids, extended lazily.
  std::vector<BlockHash> block_hashes;

  // --- Immutable after construction: disaggregated prefill/decode (the OpenAI request's
  // kv_transfer_params), read by the KV connector.
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
  // --- Written by the Scheduler: the KV connector keeps this request's blocks after it
  // finished (a decode instance reads them, or a load into them is still running).
  bool kv_blocks_held = false;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_REQUEST_H_
