// SampleRow, ApplyPenalties and CounterUniform against vLLM's semantics and naive references.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace vllm::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int64_t n, uint32_t seed, float spread = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int32_t Sample(std::vector<float> logits, const SamplingRow& row, double u) {
  return SampleRow(logits.data(), static_cast<int64_t>(logits.size()), row, u);
}

// The definition, with a full sort: the same float probabilities, filtered step by step.
// Returns the kept (p, id) in draw order.
std::vector<std::pair<float, int32_t>> ReferenceKept(std::vector<float> logits,
                                                     const SamplingRow& row) {
  const auto vocab = static_cast<int64_t>(logits.size());
  for (float& x : logits) x /= row.temperature;
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<float, int32_t>> c;
  for (int64_t i = 0; i < vocab; ++i) {
    const float p = std::exp(logits[i] - max);
    if (p > 0.0f && p >= row.min_p) c.emplace_back(p, static_cast<int32_t>(i));
  }
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (row.top_k > 0 && static_cast<size_t>(row.top_k) < c.size()) c.resize(row.top_k);
  if (row.top_p < 1.0f) {
    double total = 0.0;
    for (const auto& x : c) total += x.first;
    double cum = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].first;
      if (cum >= row.top_p * total) {
        c.resize(i + 1);
        break;
      }
    }
  }
  return c;
}

int32_t ReferenceDraw(const std::vector<std::pair<float, int32_t>>& kept, double u) {
  double total = 0.0;
  for (const auto& x : kept) total += x.first;
  double cum = 0.0;
  for (const auto& x : kept) {
    cum += x.first;
    if (cum > u * total) return x.second;
  }
  return kept.back().second;
}

TEST(GreedyTest, ArgmaxWithTiesToLowestIdAndRowUntouched) {
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 2.5f};
  const std::vector<float> before = logits;
  EXPECT_EQ(SampleRow(logits.data(), 5, greedy, 0.99), 1);
  EXPECT_EQ(logits, before);
  EXPECT_EQ(Sample({kNegInf, kNegInf, 0.5f}, greedy, 0.0), 2);
  greedy.temperature = 1e-7f;  // below vLLM's _SAMPLING_EPS: still greedy, no overflow
  EXPECT_EQ(Sample({1.0f, 3.0f, 3.0f}, greedy, 0.5), 1);
}

TEST(SampleRowTest, TopKOneEqualsGreedy) {
  SamplingRow top1;
  top1.temperature = 1.3f;
  top1.top_k = 1;
  SamplingRow greedy;
  greedy.temperature = 0.0f;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = RandomLogits(1000, seed, 1.0f);
    EXPECT_EQ(Sample(logits, top1, CounterUniform(seed, 7)), Sample(logits, greedy, 0.0))
        << "seed " << seed;
  }
}

TEST(SampleRowTest, TinyTopPKeepsOnlyTheMostLikelyAndFiltersTheRow) {
  SamplingRow row;
  row.top_p = 1e-6f;
  std::vector<float> logits = RandomLogits(500, 3, 0.1f);  // a flat distribution
  const auto best =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (double u : {0.0, 0.3, 0.999999}) EXPECT_EQ(Sample(logits, row, u), best);
  std::vector<float> filtered = logits;
  SampleRow(filtered.data(), 500, row, 0.5);
  for (int32_t i = 0; i < 500; ++i) {
    EXPECT_EQ(filtered[i], i == best ? logits[i] : kNegInf) << i;
  }
}

TEST(SampleRowTest, InverseCdfWalksDescendingProbabilityWithTiesByLowerId) {
  SamplingRow row;  // temperature 1, no filters
  // Probabilities 0.2, 0.5, 0.3 (ids 0, 1, 2): descending order is 1, 2, 0.
  const std::vector<float> logits = {std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  EXPECT_EQ(Sample(logits, row, 0.0), 1);
  EXPECT_EQ(Sample(logits, row, 0.499), 1);
  EXPECT_EQ(Sample(logits, row, 0.501), 2);
  EXPECT_EQ(Sample(logits, row, 0.799), 2);
  EXPECT_EQ(Sample(logits, row, 0.801), 0);
  EXPECT_EQ(Sample(logits, row, 0.9999999), 0);
  // Equal probabilities: the lower id comes first.
  const std::vector<float> flat(4, 0.25f);
  EXPECT_EQ(Sample(flat, row, 0.1), 0);
  EXPECT_EQ(Sample(flat, row, 0.3), 1);
  EXPECT_EQ(Sample(flat, row, 0.6), 2);
  EXPECT_EQ(Sample(flat, row, 0.9), 3);
}

TEST(SampleRowTest, TopPKeepsTheSmallestPrefixReachingTheMass) {
  const std::vector<float> logits = {std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  auto kept = [&](float top_p) {
    SamplingRow row;
    row.top_p = top_p;
    std::vector<float> l = logits;
    SampleRow(l.data(), 3, row, 0.0);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < 3; ++i) {
      if (l[i] != kNegInf) ids.push_back(i);
    }
    return ids;
  };
  EXPECT_EQ(kept(0.4f), (std::vector<int32_t>{1}));
  EXPECT_EQ(kept(0.75f), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(kept(0.85f), (std::vector<int32_t>{0, 1, 2}));
}

TEST(SampleRowTest, TopPIsTakenAfterTopKRenormalises) {
  // top_k = 2 leaves 0.5 and 0.3, i.e. 0.625 / 0.375 after renormalising: top_p 0.6 keeps
  // only the first, whereas over the full distribution (0.5 < 0.6) it would keep two.
  SamplingRow row;
  row.top_k = 2;
  row.top_p = 0.6f;
  const std::vector<float> logits = {std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  EXPECT_EQ(Sample(logits, row, 0.99), 1);
  row.top_p = 0.7f;
  EXPECT_EQ(Sample(logits, row, 0.99), 2);
}

TEST(SampleRowTest, MinPDropsTokensBelowTheScaledMaximum) {
  SamplingRow row;
  row.min_p = 0.5f;
  // Relative to the max (id 3): 1, 0.6, 0.4, 0.1 for ids 3, 0, 1, 2 — ids 1 and 2 go.
  const std::vector<float> logits = {std::log(0.6f), std::log(0.4f), std::log(0.1f), 0.0f};
  std::vector<int> hits(4, 0);
  for (uint64_t i = 0; i < 200; ++i) ++hits[Sample(logits, row, CounterUniform(5, i))];
  EXPECT_GT(hits[3], 0);
  EXPECT_GT(hits[0], 0);
  EXPECT_EQ(hits[1], 0);
  EXPECT_EQ(hits[2], 0);
}

TEST(SampleRowTest, TemperatureSetsTheDistribution) {
  SamplingRow row;
  row.temperature = 0.7f;
  const std::vector<float> logits = {0.5f, -1.0f, 1.2f, 0.0f, 2.0f, -0.3f};
  std::vector<double> expected(logits.size());
  double z = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) z += (expected[i] = std::exp(logits[i] / 0.7));
  for (double& p : expected) p /= z;
  constexpr int kDraws = 20000;
  std::vector<int> hits(logits.size(), 0);
  for (uint64_t i = 0; i < kDraws; ++i) ++hits[Sample(logits, row, CounterUniform(42, i))];
  // Chi-square with 5 degrees of freedom; 30 is beyond the 1e-5 tail. The seed is fixed, so
  // this cannot flake, and a wrong temperature (e.g. multiplying) lands in the thousands.
  double chi2 = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double want = expected[i] * kDraws;
    chi2 += (hits[i] - want) * (hits[i] - want) / want;
  }
  EXPECT_LT(chi2, 30.0);
}

TEST(SampleRowTest, MatchesFullSortReferenceOnLargeVocab) {
  constexpr int64_t kVocab = 1 << 17;  // 128K, the Llama 3 range
  const std::vector<float> logits = RandomLogits(kVocab, 9, 2.0f);
  std::vector<SamplingRow> rows(4);
  rows[0].top_k = 50;
  rows[1].top_p = 0.9f;
  rows[1].temperature = 0.8f;
  rows[2].min_p = 0.05f;
  rows[2].top_k = 200;
  rows[2].top_p = 0.95f;
  rows[3].temperature = 0.5f;  // unfiltered: the walk sorts as far as u needs
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto kept = ReferenceKept(logits, rows[r]);
    for (uint64_t i = 0; i < 4; ++i) {
      const double u = CounterUniform(r, i);
      EXPECT_EQ(Sample(logits, rows[r], u), ReferenceDraw(kept, u)) << "row " << r << " u " << u;
    }
  }
}

TEST(SampleRowTest, SameSeedAndCounterGiveTheSameToken) {
  SamplingRow row;
  row.temperature = 1.0f;
  const std::vector<float> logits = RandomLogits(5000, 4, 1.0f);
  std::vector<int32_t> first, second;
  for (uint64_t c = 0; c < 30; ++c) {
    first.push_back(Sample(logits, row, CounterUniform(77, c)));
    second.push_back(Sample(logits, row, CounterUniform(77, c)));
  }
  EXPECT_EQ(first, second);
  // And the draws do vary with the counter (a constant u would give one token).
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 10u);
}

TEST(CounterUniformTest, DeterministicInRangeAndUniform) {
  EXPECT_EQ(CounterUniform(1, 2), CounterUniform(1, 2));
  EXPECT_NE(CounterUniform(1, 2), CounterUniform(1, 3));
  EXPECT_NE(CounterUniform(1, 2), CounterUniform(2, 2));
  EXPECT_NE(CounterUniform(0, 1), CounterUniform(1, 0));
  constexpr int kDraws = 100000, kBins = 10;
  std::vector<int> bins(kBins, 0);
  for (uint64_t i = 0; i < kDraws; ++i) {
    const double u = CounterUniform(123, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[static_cast<int>(u * kBins)];
  }
  for (int b = 0; b < kBins; ++b) {
    EXPECT_NEAR(bins[b], kDraws / kBins, 500) << "bin " << b;  // ~5 standard deviations
  }
}

TEST(PenaltiesTest, RepetitionDividesPositiveAndMultipliesNonPositiveOncePerId) {
  SamplingRow row;
  row.repetition_penalty = 2.0f;
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  const std::vector<int32_t> prompt = {0, 0, 4, -1, 99};  // -1 and 99: out of range, ignored
  const std::vector<int32_t> output = {1, 1, 1};
  ApplyPenalties(logits.data(), 5, prompt, output, row);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f, 0.0f}));
}

TEST(PenaltiesTest, FrequencyScalesWithOutputCountAndIgnoresThePrompt) {
  SamplingRow row;
  row.frequency_penalty = 0.5f;
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 0, 0};
  const std::vector<int32_t> output = {2, 3, 2, 2, 7};
  ApplyPenalties(logits.data(), 4, prompt, output, row);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.0f, -0.5f, 0.5f}));
}

TEST(PenaltiesTest, PresenceSubtractsOncePerOutputId) {
  SamplingRow row;
  row.presence_penalty = -0.25f;  // negative: encourages repeats
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> prompt = {1};
  const std::vector<int32_t> output = {2, 2, 2, 0};
  ApplyPenalties(logits.data(), 3, prompt, output, row);
  EXPECT_EQ(logits, (std::vector<float>{1.25f, 1.0f, 1.25f}));
}

TEST(PenaltiesTest, AllThreeCombineInVllmOrderAndOffIsANoOp) {
  SamplingRow row;
  std::vector<float> logits = {3.0f, -1.0f};
  const std::vector<int32_t> output = {0, 0, 1};
  ApplyPenalties(logits.data(), 2, {}, output, row);
  EXPECT_EQ(logits, (std::vector<float>{3.0f, -1.0f}));
  row.repetition_penalty = 1.5f;
  row.frequency_penalty = 0.5f;
  row.presence_penalty = 1.0f;
  ApplyPenalties(logits.data(), 2, {}, output, row);
  // Id 0: 3 / 1.5 - 0.5·2 - 1 = 0; id 1: -1 · 1.5 - 0.5 - 1 = -3.
  EXPECT_EQ(logits, (std::vector<float>{0.0f, -3.0f}));
}

TEST(LogprobsTest, MatchesLogSoftmaxAndSumsToOne) {
  constexpr int64_t kVocab = 300;
  const std::vector<float> logits = RandomLogits(kVocab, 21, 5.0f);
  const RowLogprobs all = ComputeLogprobs(logits.data(), kVocab, 17, kVocab);
  ASSERT_EQ(all.token_ids.size(), kVocab + 1);
  ASSERT_EQ(all.logprobs.size(), kVocab + 1);
  EXPECT_EQ(all.token_ids[0], 17);
  double max = *std::max_element(logits.begin(), logits.end()), z = 0.0;
  for (float x : logits) z += std::exp(x - max);
  double total = 0.0;
  for (size_t i = 1; i < all.token_ids.size(); ++i) {
    const double want = logits[all.token_ids[i]] - max - std::log(z);
    ASSERT_NEAR(all.logprobs[i], want, 1e-5) << "token " << all.token_ids[i];
    if (i > 1) {
      ASSERT_GE(all.logprobs[i - 1], all.logprobs[i]);
    }
    total += std::exp(double{all.logprobs[i]});
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  // Every id exactly once in the top-n part.
  std::vector<int32_t> ids(all.token_ids.begin() + 1, all.token_ids.end());
  std::sort(ids.begin(), ids.end());
  std::vector<int32_t> iota(kVocab);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(ids, iota);
}

TEST(LogprobsTest, TopNOrderTiesAndRank) {
  const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 3.0f, -2.0f};
  const RowLogprobs r = ComputeLogprobs(logits.data(), 6, 4, 3);
  EXPECT_EQ(r.token_ids, (std::vector<int32_t>{4, 1, 3, 2}));
  EXPECT_EQ(r.sampled_token_rank, 3);       // two tokens (1 and 3) are strictly greater
  EXPECT_EQ(r.logprobs[0], r.logprobs[3]);  // ids 4 and 2 share a logit
  EXPECT_EQ(ComputeLogprobs(logits.data(), 6, 1, 0).sampled_token_rank, 1);
  EXPECT_EQ(ComputeLogprobs(logits.data(), 6, 3, 0).sampled_token_rank, 1);
  EXPECT_EQ(ComputeLogprobs(logits.data(), 6, 5, 0).sampled_token_rank, 6);
  const RowLogprobs none = ComputeLogprobs(logits.data(), 6, 0, 0);
  EXPECT_EQ(none.token_ids, (std::vector<int32_t>{0}));
  EXPECT_EQ(none.logprobs.size(), 1u);
}

TEST(LogprobsTest, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  const RowLogprobs r = ComputeLogprobs(logits.data(), 3, 2, 2);
  const double lse = 1000.0 + std::log(1.0 + std::exp(-1.0));
  EXPECT_NEAR(r.logprobs[0], -1000.0 - lse, 1e-3);
  EXPECT_NEAR(r.logprobs[1], 1000.0 - lse, 1e-6);
  EXPECT_NEAR(r.logprobs[2], 999.0 - lse, 1e-6);
}

// vLLM's allowed_token_ids, bad_words and logit_bias (vllm/v1/sample/sampler.py order).
TEST(TokenConstraintsTest, AllowedBadWordsAndBias) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> logits = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> allowed = {1, 3, 4, 99};  // 99: outside the vocabulary, ignored
  // {4}: always banned; {2, 3}: banned after a 2; {5, 1}: not (the output ends in 2).
  const std::vector<std::vector<int32_t>> bad = {{4}, {2, 3}, {5, 1}};
  const std::vector<std::pair<int32_t, float>> bias = {{1, 10.0f}, {0, -1.0f}};
  const std::vector<int32_t> output = {0, 2};
  ApplyTokenConstraints(logits.data(), 6, allowed, bad, bias, output);
  EXPECT_EQ(logits, (std::vector<float>{kNegInf, 12.0f, kNegInf, kNegInf, kNegInf, kNegInf}));
  // A bad word longer than the output so far + 1 never matches; none at all is a no-op.
  std::vector<float> row = {1, 2, 3};
  const std::vector<std::vector<int32_t>> long_word = {{0, 1, 2}};
  ApplyTokenConstraints(row.data(), 3, {}, long_word, {}, std::vector<int32_t>{1});
  EXPECT_EQ(row, (std::vector<float>{1, 2, 3}));
  // Everything masked: id 0 is left to sample (vLLM's argmax of a row of -inf), never a row
  // with nothing in it.
  std::vector<float> masked = {1, 2, 3};
  const std::vector<int32_t> only = {2};
  const std::vector<std::vector<int32_t>> ban2 = {{2}};
  ApplyTokenConstraints(masked.data(), 3, only, ban2, {}, {});
  EXPECT_EQ(SampleRow(masked.data(), 3, SamplingRow{}, 0.5), 0);
}

}  // namespace
}  // namespace vllm::kernels::cpu
