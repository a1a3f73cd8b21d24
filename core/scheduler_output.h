// What the scheduler sends to the workers each step (SchedulerOutput) and what comes back
// (ModelRunnerOutput); vLLM V1's vllm/v1/core/sched/output.py and vllm/v1/outputs.py.
//
// Workers keep persistent per-request state: a request is sent in full once
// (NewRequestData) and afterwards only as deltas (CachedRequestData). Per-request lists of
// the cached requests are flattened (one vector of values plus offsets) so that a step with
// thousands of decode requests allocates a handful of vectors, not thousands.
#ifndef VLLM_CORE_SCHEDULER_OUTPUT_H_
#define VLLM_CORE_SCHEDULER_OUTPUT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/engine_core_types.h"
#include "core/sampling_params.h"
#include "kv_transfer/types.h"

namespace vllm::core {

// A request scheduled for the first time: everything the worker needs.
struct NewRequestData {
  std::string req_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  // The request's whole block table.
  std::vector<int32_t> block_ids;
  // Tokens already in the KV cache (prefix-cache hit) before this step.
  int32_t num_computed_tokens = 0;

  friend bool operator==(const NewRequestData&, const NewRequestData&) = default;
};

// Requests the worker already knows, as deltas. Entry i of every per-request field belongs
// to req_ids[i].
struct CachedRequestData {
  std::vector<std::string> req_ids;
  // 1 when the request resumes after a preemption: the worker dropped its state, so
  // new_token_ids holds all its tokens (prompt and generated) and new_block_ids its whole
  // block table.
  std::vector<uint8_t> resumed_from_preemption;
  // Token ids fed to the model this step (positions [num_computed_tokens,
  // num_computed_tokens + num_scheduled_tokens)), or all tokens when resumed. A request
  // samples a token in this step iff num_computed_tokens + num_scheduled_tokens reaches
  // the number of tokens the worker knows. Flattened: request i's tokens are
  // new_token_ids[new_token_ids_offsets[i] .. new_token_ids_offsets[i + 1]).
  std::vector<int32_t> new_token_ids;
  std::vector<uint32_t> new_token_ids_offsets{0};
  // Blocks appended to the request's block table this step (all blocks when resumed).
  // Flattened the same way.
  std::vector<int32_t> new_block_ids;
  std::vector<uint32_t> new_block_ids_offsets{0};
  // Tokens in the KV cache before this step.
  std::vector<int32_t> num_computed_tokens;

  size_t size() const { return req_ids.size(); }
  std::span<const int32_t> new_token_ids_of(size_t i) const {
    return {new_token_ids.data() + new_token_ids_offsets[i],
            new_token_ids.data() + new_token_ids_offsets[i + 1]};
  }
  std::span<const int32_t> new_block_ids_of(size_t i) const {
    return {new_block_ids.data() + new_block_ids_offsets[i],
            new_block_ids.data() + new_block_ids_offsets[i + 1]};
  }
  void Clear();
  friend bool operator==(const CachedRequestData&, const CachedRequestData&) = default;
};

struct SchedulerOutput {
  // Sequence number of the step (1, 2, ...) from the scheduler that planned it.
  uint64_t step_id = 0;
  std::vector<NewRequestData> scheduled_new_reqs;
  CachedRequestData scheduled_cached_reqs;
  // Tokens scheduled per request, in the order scheduled_new_reqs, then
  // scheduled_cached_reqs.req_ids (vLLM keeps a dict; the order here is the key).
  std::vector<int32_t> num_scheduled_tokens;
  int32_t total_num_scheduled_tokens = 0;
  // Requests that finished (or were aborted) since the previous step: workers free their
  // state.
  std::vector<std::string> finished_req_ids;
  // Requests preempted in this step (their blocks were freed; they are waiting again).
  std::vector<std::string> preempted_req_ids;
  // Structured outputs (vLLM's GrammarOutput): the scheduled requests (indices in
  // num_scheduled_tokens order) that sample under a grammar this step, and one token bitmask
  // row per index, BitmaskWords(vocab) int32 words each (bit j of word w: token 32w + j is
  // allowed). Workers set the logits of the disallowed tokens to -inf before sampling.
  std::vector<int32_t> structured_output_indices;
  std::vector<int32_t> grammar_bitmask;
  // Speculative decoding (vLLM's scheduled_spec_decode_tokens): per scheduled request, in
  // num_scheduled_tokens order, how many of its scheduled tokens are draft tokens — the last
  // ones of its new_token_ids, after the token it sampled last. The worker verifies them and
  // returns the accepted drafts and one more token. Empty when no request has drafts.
  std::vector<int32_t> num_scheduled_spec_tokens;
  // Speculative decoding: how many tokens to draft per request after this step (vLLM's
  // num_spec_tokens_to_schedule): num_speculative_tokens, or what the dynamic schedule
  // (num_speculative_tokens_per_batch_size) gives this step's batch size; 0 without drafts.
  int32_t num_spec_tokens_to_schedule = 0;
  // The KV connector's work for the workers this step (vLLM's kv_connector_metadata); unset
  // without a connector.
  std::optional<kv_transfer::KVConnectorMetadata> kv_connector_metadata;

  size_t num_scheduled_reqs() const {
    return scheduled_new_reqs.size() + scheduled_cached_reqs.size();
  }
  // The id of the i-th scheduled request in num_scheduled_tokens order.
  const std::string& scheduled_req_id(size_t i) const {
    return i < scheduled_new_reqs.size()
               ? scheduled_new_reqs[i].req_id
               : scheduled_cached_reqs.req_ids[i - scheduled_new_reqs.size()];
  }
  friend bool operator==(const SchedulerOutput&, const SchedulerOutput&) = default;
};

// The model's answer to one SchedulerOutput. Entry i of each list belongs to req_ids[i];
// the order is the worker's choice. A request in the middle of a chunked prefill has no
// sampled tokens (its entry is empty); one with d draft tokens scheduled has 1 to d + 1 (the
// accepted drafts, then the token sampled after them).
struct ModelRunnerOutput {
  std::vector<std::string> req_ids;
  std::vector<std::vector<int32_t>> sampled_token_ids;
  // Empty, or one list per request (one TokenLogprobs per sampled token).
  std::vector<std::vector<TokenLogprobs>> logprobs;
  // Empty, or one list per request: a request asking for prompt_logprobs gets its whole
  // prompt's (one TokenLogprobs per prompt position 1 .. P-1, in order) in the step that
  // samples its first token after the prompt was computed; every other entry is empty. The
  // worker assembles the chunks of a chunked prefill (vLLM's in-progress prompt logprobs).
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs;
  // Speculative decoding with a draft that runs in the worker (eagle, medusa, draft_model;
  // vLLM's draft_token_ids): empty, or one list per request of up to
  // config::kMaxSpeculativeTokens tokens drafted after its last sampled token (empty: none).
  std::vector<std::vector<int32_t>> draft_token_ids;
  // The workers' KV-connector results (vLLM's kv_connector_output); unset without a
  // connector.
  std::optional<kv_transfer::KVConnectorOutput> kv_connector_output;

  friend bool operator==(const ModelRunnerOutput&, const ModelRunnerOutput&) = default;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_SCHEDULER_OUTPUT_H_
