#include "spec_decode/ngram_proposer.h"

#include <algorithm>

namespace vllm::spec_decode {

void FindNgramDraft(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                    int32_t max_draft_tokens, std::vector<int32_t>* lps,
                    std::vector<int32_t>* draft) {
  draft->clear();
  min_n = std::max(min_n, 1);
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < min_n || max_draft_tokens <= 0 || max_n < min_n) return;
  // rev(i): the i-th token from the end. Matching prefixes of the reversed list against its
  // later positions finds earlier occurrences of the list's suffixes.
  const int32_t* last = tokens.data() + (n - 1);
  auto rev = [last](int64_t i) { return *(last - i); };
  // lps[i]: the longest proper border of rev[0, i] (only i < max_n is ever needed; no border
  // can be longer than n - 1).
  const int64_t lps_size = std::min<int64_t>(max_n, n);
  lps->assign(static_cast<size_t>(lps_size), 0);
  int32_t* border = lps->data();
  int64_t longest = 0;
  int64_t position = 0;
  int64_t matched = 0;  // rev[0, matched) == rev(i - matched, i]
  for (int64_t i = 1; i < n;) {
    if (rev(matched) == rev(i)) {
      ++matched;
      // >=: among equally long matches the last in reversed order, the first in the request.
      if (matched >= longest) {
        longest = matched;
        position = i;
      }
      if (i < lps_size) border[i] = static_cast<int32_t>(matched);
      if (matched == max_n) matched = border[max_n - 1];
      ++i;
    } else if (matched != 0) {
      matched = border[matched - 1];
    } else {
      ++i;
    }
  }
  if (longest < min_n) return;
  // The occurrence is tokens[n - 1 - position, n - 1 - position + longest).
  const int64_t start = n - 1 - position + longest;
  const int64_t k = std::min<int64_t>(max_draft_tokens, n - start);
  draft->assign(tokens.begin() + start, tokens.begin() + start + k);
}

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}

void NgramProposer::Propose(std::span<const ProposeRequest> requests,
                            std::vector<std::vector<int32_t>>* drafts) {
  drafts->resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    FindNgramDraft(requests[i].token_ids, min_n_, max_n_, requests[i].max_draft_tokens, &lps_,
                   &(*drafts)[i]);
  }
}

}  // namespace vllm::spec_decode
