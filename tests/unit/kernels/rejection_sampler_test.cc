// RejectionSample's rules, one at a time: greedy exact match (token-identical to greedy
// decoding on a toy model), the acceptance test u < p/q, the residual draw, the bonus token,
// out-of-vocabulary drafts. The distribution as a whole: rejection_sampler_distribution_test.cc.
#include "kernels/cpu/rejection_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/sampling.h"

namespace vllm::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SamplingRow Greedy() {
  SamplingRow row;
  row.temperature = 0.0f;
  return row;
}

std::vector<float> RandomLogits(int64_t n, uint32_t seed, float spread = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// k + 1 rows of `vocab` logits, concatenated.
std::vector<float> Rows(const std::vector<std::vector<float>>& rows) {
  std::vector<float> all;
  for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
  return all;
}

// A one-hot row: `hot` has logit `high`, the rest 0.
std::vector<float> Peaked(int64_t vocab, int32_t hot, float high = 5.0f) {
  std::vector<float> v(vocab, 0.0f);
  v[hot] = high;
  return v;
}

struct Result {
  int32_t accepted;
  std::vector<int32_t> out;
};

Result Verify(std::vector<float> logits, int64_t vocab, const std::vector<int32_t>& draft,
              const float* draft_probs, const SamplingRow& row, const std::vector<double>& u_accept,
              const std::vector<double>& u_sample) {
  Result r;
  r.accepted =
      RejectionSample(logits.data(), vocab, draft, draft_probs, row, u_accept, u_sample, &r.out);
  EXPECT_EQ(r.out.size(), static_cast<size_t>(r.accepted) + 1);
  return r;
}

Result RunGreedy(const std::vector<float>& logits, int64_t vocab,
                 const std::vector<int32_t>& draft) {
  return Verify(logits, vocab, draft, nullptr, Greedy(), {}, {});
}

TEST(GreedyRejectionTest, AllMatchingAcceptsEveryDraftAndAppendsTheBonusArgmax) {
  const auto logits = Rows({Peaked(8, 3), Peaked(8, 5), Peaked(8, 0), Peaked(8, 7)});
  const Result r = RunGreedy(logits, 8, {3, 5, 0});
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.out, (std::vector<int32_t>{3, 5, 0, 7}));
}

TEST(GreedyRejectionTest, FirstMismatchEmitsTheArgmaxAndStops) {
  const auto logits = Rows({Peaked(8, 3), Peaked(8, 5), Peaked(8, 0), Peaked(8, 7)});
  Result r = RunGreedy(logits, 8, {4, 5, 0});  // first position rejected
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.out, (std::vector<int32_t>{3}));
  r = RunGreedy(logits, 8, {3, 5, 1});  // last position rejected: no bonus
  EXPECT_EQ(r.accepted, 2);
  EXPECT_EQ(r.out, (std::vector<int32_t>{3, 5, 0}));
  r = RunGreedy(Peaked(8, 6), 8, {});  // no drafts: the plain greedy token
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.out, (std::vector<int32_t>{6}));
}

TEST(GreedyRejectionTest, TiesGoToTheLowestIdAsSampleRow) {
  const std::vector<float> tied = {0.0f, 2.0f, 1.0f, 2.0f};  // ids 1 and 3 tie
  Result r = RunGreedy(Rows({tied, tied}), 4, {3});
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.out, (std::vector<int32_t>{1}));
  r = RunGreedy(Rows({tied, tied}), 4, {1});
  EXPECT_EQ(r.out, (std::vector<int32_t>{1, 1}));
}

TEST(GreedyRejectionTest, OutOfVocabDraftsAreRejectedAndRowsUntouched) {
  const auto logits = Rows({Peaked(8, 3), Peaked(8, 5)});
  for (int32_t bad :
       {-1, 8, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    std::vector<float> rows = logits;
    std::vector<int32_t> out;
    const std::vector<int32_t> draft = {bad};
    EXPECT_EQ(RejectionSample(rows.data(), 8, draft, nullptr, Greedy(), {}, {}, &out), 0);
    EXPECT_EQ(out, (std::vector<int32_t>{3})) << bad;
    EXPECT_EQ(rows, logits);
  }
}

// A toy model: a Markov chain whose logits are small integers (many ties). Greedy decoding with
// SampleRow one token at a time against speculative decoding with an imperfect proposer (right
// about two times in three) and k = 1..5: the same tokens.
TEST(GreedyRejectionTest, SpeculativeGreedyDecodingEqualsPlainGreedyOnAToyModel) {
  constexpr int64_t kVocab = 50;
  constexpr size_t kLength = 60;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 3);
  std::vector<std::vector<float>> chain(kVocab, std::vector<float>(kVocab));
  for (auto& row : chain) {
    for (float& x : row) x = static_cast<float>(level(rng));
  }
  std::vector<int32_t> plain = {11};
  while (plain.size() < kLength + 1) {
    std::vector<float> row = chain[plain.back()];
    plain.push_back(SampleRow(row.data(), kVocab, Greedy(), 0.5));
  }
  for (int32_t k = 1; k <= 5; ++k) {
    std::vector<int32_t> tokens = {11};
    std::mt19937 proposer(100 + k);
    int32_t steps = 0;
    while (tokens.size() < kLength + 1) {
      // Drafts: the true continuation, each replaced by a random token one time in three.
      std::vector<int32_t> draft;
      std::vector<float> logits = chain[tokens.back()];
      for (int32_t j = 0; j < k; ++j) {
        const size_t pos = tokens.size() + j;
        const int32_t truth = pos < plain.size() ? plain[pos] : 0;
        draft.push_back(proposer() % 3 == 0 ? static_cast<int32_t>(proposer() % kVocab) : truth);
        logits.insert(logits.end(), chain[draft.back()].begin(), chain[draft.back()].end());
      }
      RejectionSample(logits.data(), kVocab, draft, nullptr, Greedy(), {}, {}, &tokens);
      ++steps;
    }
    tokens.resize(kLength + 1);
    EXPECT_EQ(tokens, plain) << "k = " << k;
    EXPECT_LT(steps, static_cast<int32_t>(kLength)) << "k = " << k << ": no draft accepted";
  }
}

// The unfiltered softmax of a row at temperature 1, as the sampler computes it.
std::vector<double> Softmax(const std::vector<float>& logits) {
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<float> e(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    e[i] = std::exp(logits[i] - max);
    total += e[i];
  }
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) p[i] = static_cast<double>(e[i]) / total;
  return p;
}

TEST(RandomRejectionTest, AcceptsExactlyWhenUIsBelowPOverQ) {
  constexpr int64_t kVocab = 64;
  const std::vector<float> row0 = RandomLogits(kVocab, 1);
  const std::vector<float> bonus = RandomLogits(kVocab, 2);
  const std::vector<double> p = Softmax(row0);
  const SamplingRow row;  // temperature 1, no filters
  const int32_t d = 17;
  // One-hot q: accept iff u < p(d).
  EXPECT_EQ(Verify(Rows({row0, bonus}), kVocab, {d}, nullptr, row, {p[d] * 0.999999}, {0.5, 0.5})
                .accepted,
            1);
  EXPECT_EQ(Verify(Rows({row0, bonus}), kVocab, {d}, nullptr, row, {p[d] * 1.000001}, {0.5, 0.5})
                .accepted,
            0);
  // q(d) = p(d) / 2: p/q = 2, every u accepts; q(d) = 4 p(d): u < 1/4.
  std::vector<float> q(kVocab, 0.0f);
  q[d] = static_cast<float>(p[d] / 2);
  EXPECT_EQ(Verify(Rows({row0, bonus}), kVocab, {d}, q.data(), row, {0.999}, {0.5, 0.5}).accepted,
            1);
  q[d] = static_cast<float>(p[d] * 4);
  EXPECT_EQ(Verify(Rows({row0, bonus}), kVocab, {d}, q.data(), row, {0.2499}, {0.5, 0.5}).accepted,
            1);
  EXPECT_EQ(Verify(Rows({row0, bonus}), kVocab, {d}, q.data(), row, {0.2501}, {0.5, 0.5}).accepted,
            0);
  // q(d) = 0 or NaN: rejected (vLLM: "we reject" rather than divide by zero).
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    q[d] = bad;
    EXPECT_EQ(Verify(Rows({row0, bonus}), kVocab, {d}, q.data(), row, {0.0}, {0.5, 0.5}).accepted,
              0)
        << bad;
  }
}

TEST(RandomRejectionTest, ATokenTheFilterDroppedIsNeverAccepted) {
  SamplingRow row;
  row.top_k = 2;
  const std::vector<float> row0 = {3.0f, 2.0f, 1.9f, 0.0f};  // top-2 keeps ids 0 and 1
  const Result r = Verify(Rows({row0, row0}), 4, {2}, nullptr, row, {0.0}, {0.3, 0.3});
  EXPECT_EQ(r.accepted, 0);  // even with u = 0 (vLLM's p/q >= u would accept it)
  EXPECT_TRUE(r.out[0] == 0 || r.out[0] == 1) << r.out[0];
}

// The residual max(p - q, 0), normalised, drawn by SampleRow's convention (descending
// residual, ties by lower id; cumulative sum first above u × mass).
int32_t ReferenceResidualDraw(const std::vector<double>& p, const std::vector<double>& q,
                              double u) {
  std::vector<std::pair<float, int32_t>> r;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] - q[i] > 0.0) r.emplace_back(static_cast<float>(p[i] - q[i]), i);
  }
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  double mass = 0.0;
  for (const auto& x : r) mass += x.first;
  double cum = 0.0;
  for (const auto& x : r) {
    cum += x.first;
    if (cum > u * mass) return x.second;
  }
  return r.back().second;
}

TEST(RandomRejectionTest, TheCorrectionIsDrawnFromTheResidual) {
  constexpr int64_t kVocab = 40;
  const std::vector<float> row0 = RandomLogits(kVocab, 5);
  const std::vector<double> p = Softmax(row0);
  const SamplingRow row;
  const int32_t d = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  // One-hot q: the residual is p without the draft.
  std::vector<double> one_hot(kVocab, 0.0);
  one_hot[d] = 1.0;
  // A proposer distribution with mass where p has little.
  const std::vector<double> q_dense = Softmax(RandomLogits(kVocab, 6));
  std::vector<float> q(q_dense.begin(), q_dense.end());
  // For it, a draft the proposer overrates: p(d2) / q(d2) < 1.
  int32_t d2 = 0;
  for (int32_t i = 1; i < kVocab; ++i) {
    if (q_dense[i] - p[i] > q_dense[d2] - p[d2]) d2 = i;
  }
  for (int i = 0; i < 1000; ++i) {
    const double u = (i + 0.5) / 1000.0;
    // u_accept = 0.999999 > p(d) / q(d) for both proposers: rejected.
    Result r = Verify(Rows({row0, row0}), kVocab, {d}, nullptr, row, {0.999999}, {u, 0.5});
    ASSERT_EQ(r.accepted, 0);
    EXPECT_NE(r.out[0], d);
    EXPECT_EQ(r.out[0], ReferenceResidualDraw(p, one_hot, u)) << u;
    ASSERT_LT(p[d2] / q[d2], 0.999999);
    r = Verify(Rows({row0, row0}), kVocab, {d2}, q.data(), row, {0.999999}, {u, 0.5});
    ASSERT_EQ(r.accepted, 0);
    EXPECT_GT(p[r.out[0]], q_dense[r.out[0]]) << u;
    std::vector<double> q_float(q.begin(), q.end());
    EXPECT_EQ(r.out[0], ReferenceResidualDraw(p, q_float, u)) << u;
  }
}

TEST(RandomRejectionTest, TheBonusTokenIsSampleRowOfTheLastRowAndRowsAreFilteredInPlace) {
  constexpr int64_t kVocab = 300;
  SamplingRow row;
  row.temperature = 0.7f;
  row.top_p = 0.8f;
  row.min_p = 0.01f;
  // Drafts the target is sure of (p(d) = 1 after filtering), then a spread bonus row.
  const std::vector<float> bonus = RandomLogits(kVocab, 9);
  const auto logits = Rows({Peaked(kVocab, 4, 60.0f), Peaked(kVocab, 9, 60.0f), bonus});
  for (double u : {0.0, 0.25, 0.5, 0.75, 0.999}) {
    std::vector<float> rows = logits;
    std::vector<int32_t> out;
    const std::vector<int32_t> draft = {4, 9};
    const std::vector<double> u_accept = {0.999, 0.999};
    const std::vector<double> u_sample = {0.1, 0.2, u};
    ASSERT_EQ(RejectionSample(rows.data(), kVocab, draft, nullptr, row, u_accept, u_sample, &out),
              2);
    std::vector<float> plain = bonus;
    const int32_t expected = SampleRow(plain.data(), kVocab, row, u);
    EXPECT_EQ(out, (std::vector<int32_t>{4, 9, expected}));
    // Every row decided on is filtered as SampleRow filters it.
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), rows.begin() + 2 * kVocab));
    for (int64_t i = 0; i < kVocab; ++i) EXPECT_EQ(rows[i] == kNegInf, i != 4) << i;
  }
}

TEST(RandomRejectionTest, OutOfVocabDraftsAreRejectedAndCorrectedFromPAlone) {
  constexpr int64_t kVocab = 32;
  SamplingRow row;
  row.top_k = 10;
  const std::vector<float> row0 = RandomLogits(kVocab, 11);
  const std::vector<float> row1 = RandomLogits(kVocab, 12);
  const std::vector<float> q(2 * kVocab, 1.0f / kVocab);
  for (int32_t bad : {-1, 32, std::numeric_limits<int32_t>::min()}) {
    for (double u : {0.05, 0.5, 0.95}) {
      std::vector<float> plain = row0;
      const int32_t expected = SampleRow(plain.data(), kVocab, row, u);
      for (const float* probs : {static_cast<const float*>(nullptr), q.data()}) {
        std::vector<float> rows = Rows({row0, row1, row1});
        std::vector<int32_t> out;
        const std::vector<int32_t> draft = {bad, 3};
        const std::vector<double> u_accept = {0.0, 0.0};
        const std::vector<double> u_sample = {u, 0.5, 0.5};
        EXPECT_EQ(RejectionSample(rows.data(), kVocab, draft, probs, row, u_accept, u_sample, &out),
                  0);
        EXPECT_EQ(out, (std::vector<int32_t>{expected})) << bad << " " << u;
        // Rows after the deciding one are left as they were.
        EXPECT_TRUE(std::equal(row1.begin(), row1.end(), rows.begin() + kVocab));
      }
    }
  }
}

TEST(RandomRejectionDeathTest, DrawSpansOfTheWrongSizeAbort) {
  std::vector<float> rows = Rows({Peaked(4, 1), Peaked(4, 2)});
  std::vector<int32_t> out;
  const std::vector<int32_t> draft = {1};
  const std::vector<double> one = {0.5};
  EXPECT_DEATH(RejectionSample(rows.data(), 4, draft, nullptr, SamplingRow{}, one, one, &out),
               "1 drafts need as many acceptance draws");
}

}  // namespace
}  // namespace vllm::kernels::cpu
