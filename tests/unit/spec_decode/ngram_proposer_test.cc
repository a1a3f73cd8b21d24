// spec_decode/ngram_proposer.h: vLLM's n-gram rule on hand-made token lists (the longest n in
// [min, max] whose suffix occurs earlier, its first occurrence, k truncated at the end), a
// naive reference on random lists, and MakeProposer's choice and refusal.
#include "spec_decode/ngram_proposer.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/speculative_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec_decode/proposer.h"

namespace vllm::spec_decode {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<int32_t> Draft(const std::vector<int32_t>& tokens, int32_t min_n, int32_t max_n,
                           int32_t k) {
  std::vector<int32_t> lps;
  std::vector<int32_t> draft = {-1};  // cleared by the call
  FindNgramDraft(tokens, min_n, max_n, k, &lps, &draft);
  return draft;
}

// The rule spelled out: n from max down to min, the first earlier occurrence of the last n.
std::vector<int32_t> NaiveDraft(const std::vector<int32_t>& t, int32_t min_n, int32_t max_n,
                                int32_t k) {
  const auto n_total = static_cast<int32_t>(t.size());
  if (k <= 0) return {};
  for (int32_t n = max_n; n >= min_n; --n) {
    if (n > n_total - 1) continue;
    for (int32_t p = 0; p + n <= n_total - 1; ++p) {
      bool same = true;
      for (int32_t j = 0; j < n && same; ++j) same = t[p + j] == t[n_total - n + j];
      if (!same) continue;
      const int32_t end = std::min(p + n + k, n_total);
      return std::vector<int32_t>(t.begin() + p + n, t.begin() + end);
    }
  }
  return {};
}

TEST(NgramDraftTest, ContinuesTheEarlierOccurrence) {
  EXPECT_THAT(Draft({1, 2, 3, 4, 1, 2, 3}, 1, 3, 3), ElementsAre(4, 1, 2));
}

TEST(NgramDraftTest, NoMatchNoDraft) {
  EXPECT_THAT(Draft({1, 2, 3, 4}, 1, 3, 3), IsEmpty());
  // The suffix itself is not an earlier occurrence.
  EXPECT_THAT(Draft({7, 8, 9}, 1, 5, 3), IsEmpty());
  EXPECT_THAT(Draft({}, 1, 5, 3), IsEmpty());
}

TEST(NgramDraftTest, LongestNWinsWithinTheBounds) {
  // [3 1 2] occurs at 3 (then 8); [1 2] first occurs at 0 (then 9).
  const std::vector<int32_t> t = {1, 2, 9, 3, 1, 2, 8, 5, 3, 1, 2};
  EXPECT_THAT(Draft(t, 1, 3, 3), ElementsAre(8, 5, 3));
  EXPECT_THAT(Draft(t, 1, 2, 3), ElementsAre(9, 3, 1));
  EXPECT_THAT(Draft(t, 3, 3, 3), ElementsAre(8, 5, 3));
  EXPECT_THAT(Draft(t, 4, 5, 3), IsEmpty());  // [5 3 1 2] never occurred before
}

TEST(NgramDraftTest, FirstOccurrenceWins) {
  EXPECT_THAT(Draft({1, 7, 1, 8, 1}, 1, 1, 3), ElementsAre(7, 1, 8));
}

TEST(NgramDraftTest, DraftTruncatedAtTheEnd) {
  EXPECT_THAT(Draft({1, 2, 1}, 1, 2, 5), ElementsAre(2, 1));
  // Overlapping occurrences: [4 4 4] at 0 leaves one token after it.
  EXPECT_THAT(Draft({4, 4, 4, 4}, 1, 3, 5), ElementsAre(4));
}

TEST(NgramDraftTest, NothingBelowMinOrWithoutBudget) {
  EXPECT_THAT(Draft({1, 1}, 3, 4, 3), IsEmpty());
  EXPECT_THAT(Draft({1, 2, 3, 1, 2, 3}, 1, 3, 0), IsEmpty());
  EXPECT_THAT(Draft({1, 2, 3, 1, 2, 3}, 1, 3, -1), IsEmpty());
}

TEST(NgramDraftTest, HugeMaxIsCappedByTheLength) {
  EXPECT_THAT(Draft({1, 2, 3, 4, 1, 2, 3}, 1, 1 << 20, 2), ElementsAre(4, 1));
}

TEST(NgramDraftTest, MatchesTheNaiveRuleOnRandomLists) {
  std::mt19937 rng(7);
  std::vector<int32_t> lps;
  std::vector<int32_t> draft;
  for (int iter = 0; iter < 3000; ++iter) {
    const int len = static_cast<int>(rng() % 60);
    const int alphabet = 2 + static_cast<int>(rng() % 4);
    std::vector<int32_t> t(static_cast<size_t>(len));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<unsigned>(alphabet));
    const auto min_n = static_cast<int32_t>(1 + rng() % 4);
    const auto max_n = static_cast<int32_t>(min_n + rng() % 6);
    const auto k = static_cast<int32_t>(rng() % 6);
    FindNgramDraft(t, min_n, max_n, k, &lps, &draft);
    ASSERT_EQ(draft, NaiveDraft(t, min_n, max_n, k))
        << "iteration " << iter << " min " << min_n << " max " << max_n << " k " << k;
  }
}

TEST(MakeProposerTest, NgramProposesPerRequest) {
  config::SpeculativeConfig c;
  c.method = "ngram";
  c.num_speculative_tokens = 3;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  auto p = MakeProposer(c);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<int32_t> a = {1, 2, 3, 4, 1, 2, 3};
  const std::vector<int32_t> b = {5, 6, 7};
  const ProposeRequest reqs[] = {{"a", a, 4, 3}, {"b", b, 3, 3}, {"c", a, 4, 0}};
  std::vector<std::vector<int32_t>> drafts;
  (*p)->Propose(reqs, &drafts);
  ASSERT_EQ(drafts.size(), 3u);
  EXPECT_THAT(drafts[0], ElementsAre(4, 1, 2));
  EXPECT_THAT(drafts[1], IsEmpty());
  EXPECT_THAT(drafts[2], IsEmpty());
}

TEST(MakeProposerTest, RefusesOtherMethodsByName) {
  config::SpeculativeConfig c;
  c.method = "eagle";
  c.num_speculative_tokens = 3;
  auto p = MakeProposer(c);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("'eagle'"), std::string::npos);
  c.method = "ngram";
  c.prompt_lookup_min = 0;
  EXPECT_EQ(MakeProposer(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.method = "suffix";
  EXPECT_TRUE(MakeProposer(c).ok());
}

}  // namespace
}  // namespace vllm::spec_decode
