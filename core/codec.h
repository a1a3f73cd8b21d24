// msgpack wire format of core/'s messages. Explicit, versioned, field by field — there is
// no generic "decode anything" path.
//
// Envelope. Every message is one msgpack array of 3 elements:
//   [tag: uint (WireTag), version: uint (kWireVersion), body: array]
// Bodies are arrays whose elements are, in this order (T? = T or nil, [T] = array of T):
//   SamplingParams    [n, temperature: float, top_p: float, top_k, min_p: float,
//                      presence_penalty: float, frequency_penalty: float,
//                      repetition_penalty: float, seed: int?, max_tokens: int?, min_tokens,
//                      stop_token_ids: [int], ignore_eos: bool, logprobs: int?,
//                      prompt_logprobs: int?, structured_outputs: StructuredOutputsParams?,
//                      allowed_token_ids: [int], bad_words_token_ids: [[int]],
//                      logit_bias_ids: [int], logit_bias_values: [float] (equal lengths)]
//   StructuredOutputsParams [json: str?, regex: str?, choice: [str]?, grammar: str?,
//                      json_object: bool, structural_tag: str?, disable_any_whitespace: bool,
//                      disable_additional_properties: bool, disable_fallback: bool,
//                      whitespace_pattern: str?]
//   EngineCoreRequest [request_id: str, prompt_token_ids: [int], sampling_params,
//                      eos_token_id: int?, arrival_time: float, priority: int,
//                      cache_salt: str?, data_parallel_rank: int?,
//                      kv_transfer_params: KVTransferParams?]
//   TokenLogprobs     [token_ids: [int], logprobs: [float], sampled_token_rank: int]
//                     (equal lengths, at most kMaxLogprobs + 1 entries: ResourceExhausted)
//   EngineCoreOutput  [request_id: str, new_token_ids: [int], finish_reason: uint?
//                      (FinishReason), stop_reason: int?, num_cached_tokens: int,
//                      num_cache_creation_tokens: int (>= 0),
//                      logprobs: [TokenLogprobs], prompt_logprobs: [TokenLogprobs],
//                      kv_transfer_params: KVTransferParams?, events: [[type: uint
//                      (EngineCoreEventType), timestamp: float]] (at most 1024)]
//   PrefixCacheStats  [reset: bool, requests, queries, hits]
//   StructuredOutputStats [cache_hits, cache_misses, compile_failures, compile_timeouts,
//                      compile_seconds_counts: [int] (exactly one per bucket of
//                      kCompileSecondsBuckets, plus +Inf), compile_seconds_sum: float]
//   SpecDecodingStats [num_spec_tokens (0 to config::kMaxSpeculativeTokens), num_drafts,
//                      num_draft_tokens, num_accepted_tokens, num_accepted_tokens_per_pos: [int]
//                      (at most kMaxSpeculativeTokens entries: ResourceExhausted)]
//   SchedulerStats    [num_running_reqs, num_waiting_reqs, kv_cache_usage: float,
//                      prefix_cache_stats, num_preemptions, structured_output_stats,
//                      spec_decoding_stats, connector_prefix_cache_stats: PrefixCacheStats]
//   EngineCoreOutputs [engine_index, outputs: [EngineCoreOutput], scheduler_stats?,
//                      timestamp: float, finished_requests: [str], wave_complete: int?,
//                      start_wave: int?]
//   NewRequestData    [req_id: str, prompt_token_ids: [int], sampling_params,
//                      block_ids: [int], num_computed_tokens]
//   CachedRequestData [req_ids: [str], resumed_from_preemption: [bool], new_token_ids: [int],
//                      new_token_ids_offsets: [uint], new_block_ids: [int],
//                      new_block_ids_offsets: [uint], num_computed_tokens: [int]]
//   SchedulerOutput   [step_id: uint, scheduled_new_reqs: [NewRequestData], scheduled_cached_reqs,
//                      num_scheduled_tokens: [int], total_num_scheduled_tokens,
//                      finished_req_ids: [str], preempted_req_ids: [str],
//                      structured_output_indices: [int], grammar_bitmask: [int],
//                      num_scheduled_spec_tokens: [int], num_spec_tokens_to_schedule (0 to
//                      config::kMaxSpeculativeTokens),
//                      kv_connector_metadata: KVConnectorMetadata?]
//   ModelRunnerOutput [req_ids: [str], sampled_token_ids: [[int]],
//                      logprobs: [[TokenLogprobs]], prompt_logprobs: [[TokenLogprobs]],
//                      draft_token_ids: [[int]], kv_connector_output: KVConnectorOutput?]
//                     (each of the last three empty or one list per request; a draft list
//                     at most config::kMaxSpeculativeTokens long)
//   KVTransferParams, KVConnectorMetadata, KVConnectorOutput: kv_transfer/codec.h's layouts
//                     (and bounds: block ids >= 0, at most kv_transfer::kMaxRemoteBlockIds
//                     per list, ResourceExhausted past it; ports, tp_size, token counts)
//   AbortRequests     [request_id: str, ...]
//   StartDpWave       [wave, exclude_engine_index]
// Integers are range-checked against the C++ field type. Floats are always written as msgpack
// float32/float64 (never as integers, whatever the value) and also accept integers.
//
// Decoding never throws and never aborts: malformed input (wrong type, wrong field count,
// inconsistent sizes, wrong tag or version) gives InvalidArgument; truncated or
// malformed msgpack, or trailing bytes, gives DataLoss; input over a limit gives
// ResourceExhausted (the codes of wire::UnpackBounded, which every decoder goes through).
// Decoders do not apply user-facing validation (ValidateEngineCoreRequest does that).
// All functions are thread-safe (no shared state).
#ifndef VLLM_CORE_CODEC_H_
#define VLLM_CORE_CODEC_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine_core_types.h"
#include "core/sampling_params.h"
#include "core/scheduler_output.h"

namespace vllm::core {

// 2: SamplingParams.prompt_logprobs, EngineCoreOutput / ModelRunnerOutput prompt_logprobs.
// 3: structured outputs. 4: SchedulerStats.structured_output_stats.
// 5: SchedulerStats.spec_decoding_stats. 6: ModelRunnerOutput.draft_token_ids,
// SchedulerOutput.num_spec_tokens_to_schedule.
// 7: KV connectors: EngineCoreRequest / EngineCoreOutput kv_transfer_params,
// SchedulerStats.connector_prefix_cache_stats, SchedulerOutput.kv_connector_metadata,
// ModelRunnerOutput.kv_connector_output.
// 8: SamplingParams allowed_token_ids, bad_words_token_ids, logit_bias.
// 9: EngineCoreOutput.events (queued / scheduled / preempted timestamps).
// 10: EngineCoreOutput.num_cache_creation_tokens.
inline constexpr uint32_t kWireVersion = 10;

enum class WireTag : uint8_t {
  kSamplingParams = 1,
  kEngineCoreRequest = 2,
  kEngineCoreOutputs = 3,
  kSchedulerStats = 4,
  kSchedulerOutput = 5,
  kModelRunnerOutput = 6,
  kAbortRequests = 7,
  kStartDpWave = 8,
};

// Bounds applied while unpacking, before any field is looked at.
struct DecodeLimits {
  size_t max_message_bytes = size_t{256} << 20;
  // Elements in any one array (token lists, request lists). An array is also never allowed
  // more elements than the message has bytes, so a short frame cannot make the unpacker
  // allocate a huge array.
  size_t max_array_elements = size_t{1} << 24;
  size_t max_string_bytes = size_t{1} << 20;
  // Nesting depth; our deepest message (EngineCoreOutputs with logprobs) needs 7.
  size_t max_depth = 10;
};

// Encoders. They never fail.
std::string Encode(const SamplingParams& params);
std::string Encode(const EngineCoreRequest& request);
std::string Encode(const EngineCoreOutputs& outputs);
std::string Encode(const SchedulerStats& stats);
std::string Encode(const SchedulerOutput& output);
std::string Encode(const ModelRunnerOutput& output);
std::string Encode(const StartDpWave& wave);
std::string EncodeAbortRequests(std::span<const std::string> request_ids);
// The executor's per step: the same bytes as Encode, into `*out` (whose capacity is reused: no
// allocation once it has grown).
void EncodeTo(const SchedulerOutput& output, std::string* out);
void EncodeTo(const ModelRunnerOutput& output, std::string* out);

// Decoders (see the header comment for the failure modes).
[[nodiscard]] absl::StatusOr<SamplingParams> DecodeSamplingParams(std::string_view bytes,
                                                                  const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<EngineCoreRequest> DecodeEngineCoreRequest(
    std::string_view bytes, const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<EngineCoreOutputs> DecodeEngineCoreOutputs(
    std::string_view bytes, const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<SchedulerStats> DecodeSchedulerStats(std::string_view bytes,
                                                                  const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<SchedulerOutput> DecodeSchedulerOutput(
    std::string_view bytes, const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<ModelRunnerOutput> DecodeModelRunnerOutput(
    std::string_view bytes, const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<StartDpWave> DecodeStartDpWave(std::string_view bytes,
                                                            const DecodeLimits& limits = {});
[[nodiscard]] absl::StatusOr<std::vector<std::string>> DecodeAbortRequests(
    std::string_view bytes, const DecodeLimits& limits = {});

// The executor's per step (codec_fast.cc): the same outcome as DecodeSchedulerOutput /
// DecodeModelRunnerOutput — the same value, or the same error — decoded into `*out`, whose
// vectors and strings keep their capacity. The common frames (a step without new requests or
// KV-connector metadata; a reply without logprobs or KV-connector output) are read in one pass
// with no msgpack object tree; every other frame goes through the full decoder. On error
// `*out` is left in an unspecified (valid) state.
[[nodiscard]] absl::Status DecodeSchedulerOutputInto(std::string_view bytes, SchedulerOutput* out,
                                                     const DecodeLimits& limits = {});
[[nodiscard]] absl::Status DecodeModelRunnerOutputInto(std::string_view bytes,
                                                       ModelRunnerOutput* out,
                                                       const DecodeLimits& limits = {});

// For an EngineCoreOutputs frame that DecodeEngineCoreOutputs refused: the request ids that can
// still be read from it (each output's first field, where it is a string within the limits),
// so the requests whose outputs were lost can be failed instead of waiting forever. Empty when
// the frame is too damaged to tell (then every request in flight on that engine is affected).
std::vector<std::string> RecoverOutputRequestIds(std::string_view bytes,
                                                 const DecodeLimits& limits = {});
// The same for an EngineCoreRequest frame that DecodeEngineCoreRequest refused: its
// request_id when it can still be read, so the engine can answer it with an error.
std::optional<std::string> RecoverRequestId(std::string_view bytes,
                                            const DecodeLimits& limits = {});

}  // namespace vllm::core

#endif  // VLLM_CORE_CODEC_H_
