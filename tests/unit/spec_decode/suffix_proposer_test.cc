// spec_decode/suffix_tree.h and suffix_proposer.h: the tree's counts against a brute-force
// count (with sequences removed), path compression's node bound, arctic-inference's order of
// equally frequent children, drafts on hand-made lists (a repeated phrase, min_token_prob,
// max_spec_factor), the global cache across requests and its eviction bound, state dropped on
// finish, and incremental calls against fresh proposers.
#include "spec_decode/suffix_proposer.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "config/speculative_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec_decode/suffix_tree.h"

namespace vllm::spec_decode {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

config::SpeculativeConfig Config(int32_t depth = 24, int32_t cached = 100, double factor = 1.0,
                                 double min_prob = 0.1) {
  config::SpeculativeConfig c;
  c.method = "suffix";
  c.num_speculative_tokens = 8;
  c.suffix_decoding_max_tree_depth = depth;
  c.suffix_decoding_max_cached_requests = cached;
  c.suffix_decoding_max_spec_factor = factor;
  c.suffix_decoding_min_token_prob = min_prob;
  return c;
}

std::vector<int32_t> ProposeOne(SuffixProposer& p, const std::string& id,
                                const std::vector<int32_t>& tokens, int32_t num_prompt, int32_t k) {
  const ProposeRequest req[] = {{id, tokens, num_prompt, k}};
  std::vector<std::vector<int32_t>> drafts;
  p.Propose(req, &drafts);
  EXPECT_EQ(drafts.size(), 1u);
  return drafts.empty() ? std::vector<int32_t>{} : drafts[0];
}

// Occurrences of `path` in `seqs`, each at most `depth` long (the tree's count).
int64_t BruteCount(const std::map<int64_t, std::vector<int32_t>>& seqs,
                   const std::vector<int32_t>& path, int32_t depth) {
  if (path.size() > static_cast<size_t>(depth)) return 0;
  int64_t n = 0;
  for (const auto& [id, s] : seqs) {
    for (size_t p = 0; p + path.size() <= s.size(); ++p) {
      n += std::equal(path.begin(), path.end(), s.begin() + static_cast<ptrdiff_t>(p));
    }
  }
  return n;
}

TEST(SuffixTreeTest, CountsMatchBruteForceThroughAppendsAndRemoves) {
  std::mt19937 rng(3);
  for (int round = 0; round < 20; ++round) {
    const auto depth = static_cast<int32_t>(1 + rng() % 6);
    SuffixTree tree(depth);
    std::map<int64_t, std::vector<int32_t>> seqs;
    for (int op = 0; op < 60; ++op) {
      const int64_t id = static_cast<int64_t>(rng() % 5);
      if (rng() % 6 == 0) {
        tree.Remove(id);
        seqs.erase(id);
      } else {
        std::vector<int32_t> add(1 + rng() % 4);
        for (auto& t : add) t = static_cast<int32_t>(rng() % 3);
        tree.Extend(id, add);
        seqs[id].insert(seqs[id].end(), add.begin(), add.end());
      }
      // Every path of up to depth + 1 tokens over the alphabet.
      std::vector<int32_t> path;
      std::function<void()> check = [&] {
        ASSERT_EQ(tree.Count(path), path.empty() ? tree.Count({}) : BruteCount(seqs, path, depth))
            << "round " << round << " op " << op << " path length " << path.size();
        if (path.size() > static_cast<size_t>(depth)) return;
        for (int32_t t = 0; t < 3; ++t) {
          path.push_back(t);
          check();
          path.pop_back();
        }
      };
      check();
      // Drafts follow a most frequent continuation at every step (after removals too).
      for (const auto& [sid, s] : seqs) {
        SuffixDraft draft;
        tree.Speculate(s, 8, 8.0, 0.0, &draft);
        SuffixDraft hinted;  // the sequence's active suffixes instead of walks from the root
        tree.Speculate(s, 8, 8.0, 0.0, &hinted, sid);
        ASSERT_EQ(hinted.token_ids, draft.token_ids);
        ASSERT_EQ(hinted.match_len, draft.match_len);
        std::vector<int32_t> path(s.end() - draft.match_len, s.end());
        for (int32_t d : draft.token_ids) {
          int64_t most = 0;
          for (int32_t t = 0; t < 3; ++t) {
            path.push_back(t);
            most = std::max(most, BruteCount(seqs, path, depth));
            path.pop_back();
          }
          path.push_back(d);
          ASSERT_EQ(BruteCount(seqs, path, depth), most) << "round " << round << " op " << op;
        }
      }
      int64_t total = 0;
      for (const auto& [sid, s] : seqs) total += static_cast<int64_t>(s.size());
      ASSERT_EQ(tree.Count({}), total);
      ASSERT_EQ(tree.num_seqs(), seqs.size());
    }
    for (const auto& [id, s] : std::map<int64_t, std::vector<int32_t>>(seqs)) tree.Remove(id);
    EXPECT_EQ(tree.num_nodes(), 1u);  // the root alone: nothing leaks
  }
}

TEST(SuffixTreeTest, UniqueTextCostsAFewNodesPerToken) {
  std::mt19937 rng(5);
  std::vector<int32_t> text(4000);
  for (auto& t : text) t = static_cast<int32_t>(rng() % 50000);
  SuffixTree tree(24);
  tree.Extend(0, text);
  // Uncompressed, each token would add about 24 nodes.
  EXPECT_LT(tree.num_nodes(), 3 * text.size());
}

// Equally frequent continuations: arctic-inference's sorted sibling lists decide (values from
// its SuffixTree). The context [9 5] matches one token, so the draft is [5]'s leading child.
TEST(SuffixTreeTest, TiesFollowArcticInferencesSiblingOrder) {
  auto lead = [](const std::vector<int32_t>& seq) {
    SuffixTree tree(8);
    tree.Extend(0, seq);
    SuffixDraft draft;
    tree.Speculate(std::vector<int32_t>{9, 5}, 1, 1.0, 0.0, &draft);
    return draft.token_ids;
  };
  // After 5: 1 twice, then 2 once, then 3 twice. 3 climbs from behind 2 (not its group's
  // head), so it joins the count-2 group at its tail: 1 still leads.
  EXPECT_THAT(lead({5, 1, 5, 1, 5, 2, 5, 3, 5, 3, 5}), ElementsAre(1));
  EXPECT_THAT(lead({5, 1, 5, 1, 5, 2, 5, 3, 5, 3, 5, 3, 5}), ElementsAre(3));  // 3 of 7
  // 2 reaches count 2 first, then 1 climbs from the head of the count-1 group: 1 leads.
  EXPECT_THAT(lead({5, 1, 5, 2, 5, 2, 5, 1, 5}), ElementsAre(1));
}

TEST(SuffixProposerTest, ProposesARepeatedPhrase) {
  SuffixProposer p(Config());
  // [10 11 12] occurred before, followed by [13 14 20]: matching 3 tokens allows 3.
  const std::vector<int32_t> t = {10, 11, 12, 13, 14, 20, 10, 11, 12};
  EXPECT_THAT(ProposeOne(p, "r", t, 6, 8), ElementsAre(13, 14, 20));
  EXPECT_THAT(ProposeOne(p, "r", t, 6, 2), ElementsAre(13, 14));
  EXPECT_THAT(ProposeOne(p, "r", t, 6, 0), IsEmpty());
}

TEST(SuffixProposerTest, MinTokenProbCutsUnlikelyContinuations) {
  // After 5: 7 four times of six (one 5 is the last token); after [5 7 5]: 7 three of four.
  const std::vector<int32_t> t = {5, 7, 5, 7, 5, 7, 5, 7, 5, 6, 5};
  SuffixProposer all(Config(24, 100, /*factor=*/4.0, /*min_prob=*/0.1));
  EXPECT_THAT(ProposeOne(all, "r", t, 11, 8), ElementsAre(7, 5, 7, 5));  // p .67 .67 .5 .5
  SuffixProposer likely(Config(24, 100, 4.0, /*min_prob=*/0.6));
  EXPECT_THAT(ProposeOne(likely, "r", t, 11, 8), ElementsAre(7, 5));
  SuffixProposer none(Config(24, 100, 4.0, /*min_prob=*/0.7));
  EXPECT_THAT(ProposeOne(none, "r", t, 11, 8), IsEmpty());
  // max_spec_factor 1: one matched token drafts one.
  SuffixProposer short_match(Config(24, 100, 1.0, 0.1));
  EXPECT_THAT(ProposeOne(short_match, "r", t, 11, 8), ElementsAre(7));
}

TEST(SuffixProposerTest, GlobalCacheProposesAFinishedRequestsContinuation) {
  SuffixProposer p(Config());
  const std::vector<int32_t> a = {1, 2, 3, 40, 41, 42, 43, 44, 45};
  ProposeOne(p, "a", a, 3, 8);
  p.OnRequestFinished("a", a, 3);
  EXPECT_EQ(p.num_active_requests(), 0u);
  EXPECT_EQ(p.local_tree("a"), nullptr);
  EXPECT_EQ(p.num_cached_requests(), 1u);
  const std::vector<int32_t> b = {9, 9, 40, 41, 42};
  EXPECT_THAT(ProposeOne(p, "b", b, 5, 8), ElementsAre(43, 44, 45));
  // The prompt of a finished request is not cached: only its output.
  const std::vector<int32_t> c = {7, 1, 2};
  EXPECT_THAT(ProposeOne(p, "c", c, 3, 8), IsEmpty());
}

TEST(SuffixProposerTest, NoGlobalCacheWhenMaxCachedIsZero) {
  SuffixProposer p(Config(24, /*cached=*/0));
  const std::vector<int32_t> a = {1, 2, 3, 40, 41, 42, 43, 44, 45};
  ProposeOne(p, "a", a, 3, 8);
  p.OnRequestFinished("a", a, 3);
  EXPECT_EQ(p.num_cached_requests(), 0u);
  EXPECT_THAT(ProposeOne(p, "b", {9, 9, 40, 41, 42}, 5, 8), IsEmpty());
}

TEST(SuffixProposerTest, EvictsTheOldestBeyondMaxCachedRequests) {
  SuffixProposer p(Config(24, /*cached=*/2));
  for (int32_t r = 0; r < 6; ++r) {
    const std::vector<int32_t> t = {1, 100 * r, 100 * r + 1, 100 * r + 2, 100 * r + 3};
    const std::string id = "r" + std::to_string(r);
    ProposeOne(p, id, t, 1, 8);
    p.OnRequestFinished(id, t, 1);
    EXPECT_LE(p.num_cached_requests(), 2u);
    EXPECT_LE(p.global_tree().num_seqs(), 2u);
  }
  // r4 and r5 remain; r0..r3 were evicted with their nodes.
  EXPECT_THAT(ProposeOne(p, "x", {7, 500, 501}, 3, 8), ElementsAre(502, 503));
  EXPECT_THAT(ProposeOne(p, "y", {7, 300, 301}, 3, 8), IsEmpty());
  EXPECT_LT(p.global_tree().num_nodes(), 40u);
}

TEST(SuffixProposerTest, FinishDropsStateAndAReusedIdStartsAfresh) {
  SuffixProposer p(Config());
  const std::vector<int32_t> a = {1, 2, 3, 1, 2};
  EXPECT_THAT(ProposeOne(p, "a", a, 5, 8), ElementsAre(3, 1));
  EXPECT_EQ(p.num_active_requests(), 1u);
  ASSERT_NE(p.local_tree("a"), nullptr);
  p.OnRequestFinished("a", a, 5);
  EXPECT_EQ(p.num_active_requests(), 0u);
  EXPECT_EQ(p.local_tree("a"), nullptr);
  // Same id, other tokens: nothing of the old prompt is proposed.
  EXPECT_THAT(ProposeOne(p, "a", {8, 1, 2}, 3, 8), IsEmpty());
  // A list that does not extend the seen one (another prompt length) restarts the request.
  EXPECT_THAT(ProposeOne(p, "a", {6, 5, 6}, 2, 8), ElementsAre(5));
  EXPECT_EQ(p.local_tree("a")->Count({}), 3);
  // Finishing an unknown request is harmless.
  p.OnRequestFinished("nobody", a, 1);
}

TEST(SuffixProposerTest, IncrementalCallsEqualFreshProposers) {
  std::mt19937 rng(11);
  for (int round = 0; round < 30; ++round) {
    const auto cfg = Config(static_cast<int32_t>(2 + rng() % 10), 100, 0.5 + (rng() % 4) * 0.5,
                            0.1 * (rng() % 5));
    SuffixProposer incremental(cfg);
    std::vector<int32_t> tokens(8 + rng() % 8);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 4);
    const auto num_prompt = static_cast<int32_t>(tokens.size());
    for (int step = 0; step < 80; ++step) {
      const auto k = static_cast<int32_t>(rng() % 6);
      const std::vector<int32_t> a = ProposeOne(incremental, "r", tokens, num_prompt, k);
      SuffixProposer fresh(cfg);
      ASSERT_EQ(a, ProposeOne(fresh, "r", tokens, num_prompt, k))
          << "round " << round << " step " << step;
      // Accept some of the draft, then one sampled token.
      const size_t accepted = a.empty() ? 0 : rng() % (a.size() + 1);
      tokens.insert(tokens.end(), a.begin(), a.begin() + static_cast<ptrdiff_t>(accepted));
      tokens.push_back(static_cast<int32_t>(rng() % 4));
    }
  }
}

TEST(SuffixProposerTest, InterleavedRequestsKeepTheirOwnState) {
  // Two requests stepping in turn, no global cache: each draft equals a fresh proposer's.
  std::mt19937 rng(13);
  SuffixProposer p(Config(8, 0, 2.0, 0.1));
  std::vector<std::vector<int32_t>> tokens = {{1, 2, 3, 1, 2}, {3, 3, 2, 3, 3}};
  for (int step = 0; step < 100; ++step) {
    const ProposeRequest reqs[] = {{"x", tokens[0], 5, 4}, {"y", tokens[1], 5, 4}};
    std::vector<std::vector<int32_t>> drafts;
    p.Propose(reqs, &drafts);
    for (size_t i = 0; i < 2; ++i) {
      SuffixProposer fresh(Config(8, 0, 2.0, 0.1));
      ASSERT_EQ(drafts[i], ProposeOne(fresh, i == 0 ? "x" : "y", tokens[i], 5, 4))
          << "step " << step;
      tokens[i].push_back(static_cast<int32_t>(rng() % 4));
    }
  }
}

}  // namespace
}  // namespace vllm::spec_decode
