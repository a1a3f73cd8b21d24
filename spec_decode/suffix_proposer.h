// SuffixProposer: suffix decoding (arXiv 2411.04975; vLLM's SuffixDecodingProposer, method
// "suffix", which calls arctic-inference's SuffixDecodingCache). Drafts come from two
// depth-limited suffix trees (spec_decode/suffix_tree.h):
//   - a local tree per running request over its prompt and outputs, and
//   - one global tree over the outputs of recent requests: as arctic-inference, a request's
//     output enters it as it is generated (running requests' outputs are drafted from too), and
//     when more than suffix_decoding_max_cached_requests requests are held the oldest started
//     is evicted (FIFO by first Propose; 0: no global tree). A request id seen again after
//     OnRequestFinished replaces its cached output.
// For each request, each tree drafts from the request's last max_tree_depth tokens
// (SuffixTree::Speculate with suffix_decoding_max_spec_factor and _min_token_prob, at most
// max_draft_tokens tokens); the local draft wins when its score is >= the global one's.
//
// Propose is called every step with each request's full token list; the proposer keeps, per
// request, how many tokens it has seen, and appends only the new ones (O(new tokens x depth)
// per call, plus O(depth^2) hash look-ups to draft). A list that is not an extension of the
// one seen (fewer tokens, another last seen token or prompt length) starts the request afresh.
// Tokens are taken in even when max_draft_tokens is 0. OnRequestFinished appends the final
// tokens to the global tree and drops the local one. Unlike vLLM, a request absent from one
// Propose call keeps its state: only OnRequestFinished drops it.
//
// Memory: the local trees of the running requests and the global tree of at most
// suffix_decoding_max_cached_requests outputs, each O(tokens + repeated substrings of at most
// max_tree_depth tokens).
//
// Thread-safety: none.
#ifndef VLLM_SPEC_DECODE_SUFFIX_PROPOSER_H_
#define VLLM_SPEC_DECODE_SUFFIX_PROPOSER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "config/speculative_config.h"
#include "spec_decode/proposer.h"
#include "spec_decode/suffix_tree.h"

namespace vllm::spec_decode {

class SuffixProposer final : public Proposer {
 public:
  explicit SuffixProposer(const config::SpeculativeConfig& config);

  void Propose(std::span<const ProposeRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override;
  void OnRequestFinished(std::string_view request_id, std::span<const int32_t> token_ids,
                         int32_t num_prompt_tokens) override;

  // For tests and stats: requests with a local tree, outputs in the global tree, the trees.
  size_t num_active_requests() const { return active_.size(); }
  size_t num_cached_requests() const { return cached_seq_of_.size(); }
  const SuffixTree& global_tree() const { return global_; }
  const SuffixTree* local_tree(std::string_view request_id) const;

 private:
  struct RequestState {
    std::unique_ptr<SuffixTree> local;
    int64_t seq_id = -1;  // in the global tree (-1: none)
    size_t num_seen = 0;
    int32_t num_prompt = 0;
    int32_t last_token = 0;
  };
  RequestState& StateFor(const ProposeRequest& request);
  void Start(std::string_view request_id, std::span<const int32_t> token_ids, int32_t num_prompt,
             RequestState* state);
  // Appends token_ids[num_seen, end) to the local tree (when `local`) and the global one.
  void TakeIn(std::string_view request_id, std::span<const int32_t> token_ids, bool local,
              RequestState* state);
  void EvictCached(const std::string& request_id);
  void EvictOverflow();
  void Draft(const ProposeRequest& request, RequestState* state, std::vector<int32_t>* out);

  int32_t max_depth_;
  int64_t max_cached_;
  double max_spec_factor_;
  double min_token_prob_;
  SuffixTree global_;
  absl::flat_hash_map<std::string, RequestState> active_;
  // Request id -> its output's sequence in global_, and the start order (entries whose id maps
  // to another sequence, or none, are stale and skipped).
  absl::flat_hash_map<std::string, int64_t> cached_seq_of_;
  std::deque<std::pair<int64_t, std::string>> fifo_;
  int64_t next_seq_id_ = 0;
  SuffixDraft local_draft_;
  SuffixDraft global_draft_;
};

}  // namespace vllm::spec_decode

#endif  // VLLM_SPEC_DECODE_SUFFIX_PROPOSER_H_
