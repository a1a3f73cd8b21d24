// Proposer: drafts the next tokens of running requests for speculative decoding (vLLM's
// vllm/v1/spec_decode/: NgramProposer, SuffixDecodingProposer). The proposers of this module
// run on the CPU in the engine-core process: after the scheduler applied a step's output, the
// engine core asks for drafts of the requests that will decode in the next step, and the
// scheduler schedules each request's draft tokens with its last sampled token; the worker
// verifies them in one forward pass (kernels/cpu/rejection_sampler.h).
//
//   absl::StatusOr<std::unique_ptr<Proposer>> p = MakeProposer(config.speculative);
//   (*p)->Propose(requests, &drafts);          // drafts[i]: 0..requests[i].max_draft_tokens ids
//   (*p)->OnRequestFinished(id, tokens, n);    // forget it (suffix: keep its output cached)
//
// Thread-safety: none; the engine core's main thread owns a proposer.
#ifndef VLLM_SPEC_DECODE_PROPOSER_H_
#define VLLM_SPEC_DECODE_PROPOSER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/speculative_config.h"

namespace vllm::spec_decode {

// One request to draft for.
struct ProposeRequest {
  std::string_view request_id;
  // The prompt, then every token sampled so far (the last one is the token the next step
  // feeds; drafts continue after it).
  std::span<const int32_t> token_ids;
  int32_t num_prompt_tokens = 0;
  // The most tokens to draft (k, less near max_tokens or max_model_len); 0: none.
  int32_t max_draft_tokens = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Resizes `drafts` to requests.size() and fills drafts->at(i) with 0 to
  // requests[i].max_draft_tokens proposed ids (empty: no proposal). Never fails.
  virtual void Propose(std::span<const ProposeRequest> requests,
                       std::vector<std::vector<int32_t>>* drafts) = 0;
  // The request finished or was aborted (its final tokens); a proposer that keeps per-request
  // state drops it. A request id may be reused after this.
  virtual void OnRequestFinished(std::string_view request_id, std::span<const int32_t> token_ids,
                                 int32_t num_prompt_tokens) = 0;
};

// The proposer of `config.method` ("ngram" or "suffix"). InvalidArgument naming the method for
// any other (the draft-head methods run in the worker).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Proposer>> MakeProposer(
    const config::SpeculativeConfig& config);

}  // namespace vllm::spec_decode

#endif  // VLLM_SPEC_DECODE_PROPOSER_H_
