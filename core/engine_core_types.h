// Requests into and results out of an engine core, field for field as in vLLM V1
// (vllm/v1/engine/__init__.py), so a vLLM reader recognises them. Plain value types;
// their msgpack wire format lives in core/codec.h.
#ifndef VLLM_CORE_ENGINE_CORE_TYPES_H_
#define VLLM_CORE_ENGINE_CORE_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "core/sampling_params.h"
#include "kv_transfer/types.h"
#include "spec_decode/stats.h"
#include "structured_output/stats.h"

namespace vllm::core {

// The kind of message a client sends to an engine core (vLLM's EngineCoreRequestType; the
// values are the wire values).
enum class EngineCoreRequestType : uint8_t {
  kAdd = 0,             // payload: EngineCoreRequest
  kAbort = 1,           // payload: list of request ids
  kStartDpWave = 2,     // payload: StartDpWave
  kUtility = 3,         // payload: a utility call (method name + msgpack arguments)
  kExecutorFailed = 4,  // sent by the engine itself when its executor died
  kHeartbeat = 5,       // payload: empty; the frontend is alive (over TCP, once a second)
};

// Why a request finished (vLLM's FinishReason). Wire values are the enum values.
enum class FinishReason : uint8_t {
  kStop = 0,    // EOS or a stop token (stop strings are detected by the frontend)
  kLength = 1,  // max_tokens or max_model_len reached
  kAbort = 2,   // aborted by the client (e.g. it disconnected)
  kError = 3,   // failed inside the engine
};

// "stop", "length", "abort", "error" (the OpenAI finish_reason strings).
std::string_view FinishReasonName(FinishReason reason);

struct EngineCoreRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  // EOS token of the model's tokenizer; unset means the model has none (vLLM passes it on
  // the request too).
  std::optional<int32_t> eos_token_id;
  // Seconds since the epoch when the frontend received the request.
  double arrival_time = 0.0;
  // Smaller value = scheduled earlier under the priority policy (vLLM's convention).
  int32_t priority = 0;
  // Isolates prefix-cache entries: blocks are shared only between requests with equal salt.
  std::optional<std::string> cache_salt;
  // Set by a DP-aware client to pin the request to one engine replica.
  std::optional<int32_t> data_parallel_rank;
  // Disaggregated prefill/decode: the OpenAI request's kv_transfer_params (vLLM carries them
  // in sampling_params.extra_args; the KV connector reads them).
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;

  friend bool operator==(const EngineCoreRequest&, const EngineCoreRequest&) = default;
};

// Limits on user-facing sizes.
inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kMaxCacheSaltBytes = 1024;

// Validates a request about to be added to an engine whose context is `max_model_len`
// tokens: non-empty id within kMaxRequestIdBytes, non-empty prompt shorter than
// max_model_len (one position must stay free for the first generated token), token ids
// non-negative, valid sampling params, max_tokens fitting in max_model_len together with
// the prompt, min_tokens <= max_tokens. Returns InvalidArgument naming the field.
[[nodiscard]] absl::Status ValidateEngineCoreRequest(const EngineCoreRequest& request,
                                                     int32_t max_model_len);

// Log-probabilities for one position: the sampled token (for a prompt position: the actual
// prompt token) first, then the top-k.
struct TokenLogprobs {
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;
  // Rank of the sampled token among all candidates (1 = most likely).
  int32_t sampled_token_rank = 0;

  friend bool operator==(const TokenLogprobs&, const TokenLogprobs&) = default;
};

// What happened to a request inside the engine (vLLM's EngineCoreEventType; wire values).
enum class EngineCoreEventType : uint8_t {
  kQueued = 1,     // the engine took the request
  kScheduled = 2,  // scheduled from the waiting queue (first time, or again after a preemption)
  kPreempted = 3,  // its blocks were freed; it waits to be recomputed
};

// One such event with the engine's clock (seconds since the epoch, the clock of
// EngineCoreOutputs::timestamp), as vLLM's EngineCoreEvent.
struct EngineCoreEvent {
  EngineCoreEventType type = EngineCoreEventType::kQueued;
  double timestamp = 0.0;

  friend bool operator==(const EngineCoreEvent&, const EngineCoreEvent&) = default;
};

// One request's progress in one step.
struct EngineCoreOutput {
  std::string request_id;
  // Usually one token per step: stored inline, so a step's outputs cost no allocation each.
  absl::InlinedVector<int32_t, 2> new_token_ids;
  // Set when the request finished in this step.
  std::optional<FinishReason> finish_reason;
  // The stop token that ended the request (stop strings are the frontend's business).
  std::optional<int32_t> stop_reason;
  // Prompt tokens served from the prefix cache when the request was first scheduled.
  int32_t num_cached_tokens = 0;
  // Prompt tokens the request wrote to the prefix cache (vLLM's num_cache_creation_tokens):
  // its prompt tokens in full cached blocks once prefilled, less num_cached_tokens; 0 before
  // its first generated token and without prefix caching.
  int32_t num_cache_creation_tokens = 0;
  // One entry per new token when the request asked for logprobs, else empty.
  std::vector<TokenLogprobs> logprobs;
  // Prompt logprobs (the request asked for prompt_logprobs): set on the output carrying the
  // request's first generated token, one entry per prompt position 1 .. P-1 (the logprob of
  // prompt token p given tokens 0 .. p-1 first, as `sampled`, then the top-k); else empty.
  // Position 0 has none (the frontend shows it as null, as vLLM does).
  std::vector<TokenLogprobs> prompt_logprobs;
  // Set on a finishing output when the KV connector has something for the client (vLLM's
  // EngineCoreOutput.kv_transfer_params: a prefill instance's where-to-read-the-blocks).
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
  // The request's events since its previous output (vLLM's EngineCoreOutput.events): the
  // frontend's queue, prefill, decode and inference times come from them.
  std::vector<EngineCoreEvent> events;

  bool finished() const { return finish_reason.has_value(); }
  friend bool operator==(const EngineCoreOutput&, const EngineCoreOutput&) = default;
};

// Prefix-cache counters over an interval (vLLM's PrefixCacheStats).
struct PrefixCacheStats {
  // True when the cache was reset during the interval.
  bool reset = false;
  int64_t requests = 0;  // lookups
  int64_t queries = 0;   // tokens looked up
  int64_t hits = 0;      // tokens found

  friend bool operator==(const PrefixCacheStats&, const PrefixCacheStats&) = default;
};

// Scheduler gauges and counters (vLLM's SchedulerStats), reported with each step's outputs
// when stats are enabled. Counters cover the interval since the previous report.
struct SchedulerStats {
  int32_t num_running_reqs = 0;
  int32_t num_waiting_reqs = 0;
  // Fraction of KV-cache blocks in use, in [0, 1].
  double kv_cache_usage = 0.0;
  PrefixCacheStats prefix_cache_stats;
  int64_t num_preemptions = 0;
  // Grammar compiles and compile-cache lookups (ours: vLLM reports none).
  structured_output::StructuredOutputStats structured_output_stats;
  // Speculative decoding's drafts and accepted tokens (vLLM's spec_decoding_stats; all zero
  // when no draft was verified in the interval or speculative decoding is off).
  spec_decode::SpecDecodingStats spec_decoding_stats;
  // Prompt tokens looked up in, and found in, the KV connector's external cache (vLLM's
  // connector_prefix_cache_stats; all zero without a connector).
  PrefixCacheStats connector_prefix_cache_stats;

  friend bool operator==(const SchedulerStats&, const SchedulerStats&) = default;
};

// Everything one engine core reports after one step (vLLM's EngineCoreOutputs).
struct EngineCoreOutputs {
  int32_t engine_index = 0;
  std::vector<EngineCoreOutput> outputs;
  std::optional<SchedulerStats> scheduler_stats;
  double timestamp = 0.0;
  // Ids of requests that finished since the last report (for DP clients tracking lifetimes).
  std::vector<std::string> finished_requests;
  // DP wave state: the wave that just completed (engine went idle) / asks the coordinator
  // to start a wave because a request arrived for a paused wave.
  std::optional<int32_t> wave_complete;
  std::optional<int32_t> start_wave;

  friend bool operator==(const EngineCoreOutputs&, const EngineCoreOutputs&) = default;
};

// Payload of EngineCoreRequestType::kStartDpWave.
struct StartDpWave {
  int32_t wave = 0;
  // The engine that triggered the wave (it is already running), or -1.
  int32_t exclude_engine_index = -1;

  friend bool operator==(const StartDpWave&, const StartDpWave&) = default;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_ENGINE_CORE_TYPES_H_
