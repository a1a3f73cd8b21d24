// NgramProposer: prompt-lookup drafts (vLLM's vllm/v1/spec_decode/ngram_proposer.py, method
// "ngram"). The draft of a request continues the most recent n tokens the way an earlier
// occurrence of those n tokens in the same request (prompt and output) was continued.
//
// The rule, as vLLM 0.33's _find_longest_matched_ngram_and_propose_tokens:
//   - tokens: the request's whole token list (prompt, then outputs), length N. Nothing is
//     proposed when N < prompt_lookup_min or when max_draft_tokens <= 0.
//   - L: the largest n <= prompt_lookup_max such that the last n tokens also occur starting at
//     some earlier position p (p < N - n; the occurrence may overlap the suffix itself, but the
//     suffix does not match itself). Nothing is proposed when L < prompt_lookup_min.
//   - Of the occurrences of that length-L suffix, the FIRST (smallest p) wins.
//   - The draft: tokens[p + L, p + L + k) with k = min(max_draft_tokens, N - (p + L)), i.e.
//     fewer than max_draft_tokens when the occurrence is near the end (always at least one).
//
// The search is vLLM's: KMP's failure function over the reversed tokens, with the border
// lengths capped at prompt_lookup_max, so a call costs O(N) time and O(prompt_lookup_max)
// memory, independent of the n-gram bounds; no state is kept between calls.
//
// Thread-safety: none (a scratch buffer is reused across calls).
#ifndef VLLM_SPEC_DECODE_NGRAM_PROPOSER_H_
#define VLLM_SPEC_DECODE_NGRAM_PROPOSER_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "spec_decode/proposer.h"

namespace vllm::spec_decode {

// The draft of the rule above for `tokens` into `*draft` (cleared first). `lps` is scratch
// space (resized as needed; pass the same vector across calls to avoid allocations).
// min_n >= 1 and min_n <= max_n are the caller's (SpeculativeConfig::Validate's) business; a
// min_n below 1 is treated as 1.
void FindNgramDraft(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                    int32_t max_draft_tokens, std::vector<int32_t>* lps,
                    std::vector<int32_t>* draft);

class NgramProposer final : public Proposer {
 public:
  // min_n/max_n: --speculative-config prompt_lookup_min/max.
  NgramProposer(int32_t min_n, int32_t max_n);

  void Propose(std::span<const ProposeRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override;
  // Stateless: nothing to drop.
  void OnRequestFinished(std::string_view /*request_id*/, std::span<const int32_t> /*token_ids*/,
                         int32_t /*num_prompt_tokens*/) override {}

 private:
  int32_t min_n_;
  int32_t max_n_;
  std::vector<int32_t> lps_;
};

}  // namespace vllm::spec_decode

#endif  // VLLM_SPEC_DECODE_NGRAM_PROPOSER_H_
