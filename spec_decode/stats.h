// SpecDecodingStats: the speculative-decoding counters of one engine over an interval (vLLM's
// vllm/v1/spec_decode/metrics.py SpecDecodingStats): the scheduler counts drafts and accepted
// tokens as it applies each step's output, the engine core sends them with its scheduler stats,
// and the API server exports vllm:spec_decode_* on /metrics and logs the acceptance rate.
//
// Thread-safety: a plain value.
#ifndef VLLM_SPEC_DECODE_STATS_H_
#define VLLM_SPEC_DECODE_STATS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vllm::spec_decode {

struct SpecDecodingStats {
  // k (--speculative-config num_speculative_tokens): the length of num_accepted_tokens_per_pos.
  int32_t num_spec_tokens = 0;
  // Requests that had at least one draft token verified (one per request per step).
  int64_t num_drafts = 0;
  // Draft tokens verified, and those accepted.
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  // Entry i: drafts whose token at position i (0-based) was accepted.
  std::vector<int64_t> num_accepted_tokens_per_pos;

  // Counts one request's verified draft: `num_draft` tokens proposed, the first `num_accepted`
  // of them accepted.
  void Observe(int32_t num_draft, int32_t num_accepted) {
    if (num_draft <= 0) return;
    if (num_accepted_tokens_per_pos.size() < static_cast<size_t>(num_spec_tokens)) {
      num_accepted_tokens_per_pos.resize(static_cast<size_t>(num_spec_tokens));
    }
    ++num_drafts;
    num_draft_tokens += num_draft;
    num_accepted_tokens += num_accepted;
    for (int32_t i = 0;
         i < num_accepted && static_cast<size_t>(i) < num_accepted_tokens_per_pos.size(); ++i) {
      ++num_accepted_tokens_per_pos[static_cast<size_t>(i)];
    }
  }
  bool empty() const { return num_drafts == 0; }
  SpecDecodingStats& operator+=(const SpecDecodingStats& o) {
    if (o.num_spec_tokens > num_spec_tokens) num_spec_tokens = o.num_spec_tokens;
    if (num_accepted_tokens_per_pos.size() < o.num_accepted_tokens_per_pos.size()) {
      num_accepted_tokens_per_pos.resize(o.num_accepted_tokens_per_pos.size());
    }
    num_drafts += o.num_drafts;
    num_draft_tokens += o.num_draft_tokens;
    num_accepted_tokens += o.num_accepted_tokens;
    for (size_t i = 0; i < o.num_accepted_tokens_per_pos.size(); ++i) {
      num_accepted_tokens_per_pos[i] += o.num_accepted_tokens_per_pos[i];
    }
    return *this;
  }
  friend bool operator==(const SpecDecodingStats&, const SpecDecodingStats&) = default;
};

}  // namespace vllm::spec_decode

#endif  // VLLM_SPEC_DECODE_STATS_H_
