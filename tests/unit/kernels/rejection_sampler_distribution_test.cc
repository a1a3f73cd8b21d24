// Speculative sampling keeps the target distribution (issue 31's test): on a toy model, 20,000
// seeded samples of the next 3 tokens from speculative decoding against the exact joint
// distribution, by a chi-square test; a sampler that skips the residual must fail it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/rejection_sampler.h"
#include "kernels/cpu/sampling.h"
#include "tests/support/chi_square.h"

namespace vllm::kernels::cpu {
namespace {

using testing::ChiSquarePValue;

TEST(ChiSquareTest, PValuesMatchTabulatedQuantiles) {
  struct Known {
    double statistic;
    int dof;
    double p;
  };
  // Critical values of the chi-square distribution (any table; scipy.stats.chi2.isf).
  for (const Known& k : {Known{3.841458820694124, 1, 0.05}, Known{6.634896601021214, 1, 0.01},
                         Known{10.827566170662733, 1, 0.001}, Known{18.307038053275146, 10, 0.05},
                         Known{23.209251158954356, 10, 0.01}, Known{124.34211340400407, 100, 0.05},
                         Known{0.10258658877510107, 2, 0.95}}) {
    EXPECT_NEAR(ChiSquarePValue(k.statistic, k.dof), k.p, k.p * 1e-8) << k.statistic;
  }
  for (double x : {0.5, 7.0, 40.0}) {  // two degrees of freedom: exactly exp(-x / 2)
    EXPECT_NEAR(ChiSquarePValue(x, 2), std::exp(-x / 2), 1e-14) << x;
  }
  EXPECT_EQ(ChiSquarePValue(0.0, 5), 1.0);
}

// The toy target: a Markov chain over 16 tokens (logits depend on the previous token only),
// sampled at temperature 0.8 with top-k 8 and top-p 0.9.
constexpr int64_t kVocab = 16;
constexpr int32_t kPrompt = 5;
constexpr int32_t kTokens = 3;  // the joint distribution of the next 3 tokens
constexpr int32_t kSamples = 20000;
constexpr int32_t kDrafts = 3;  // k per speculative step

using Chain = std::vector<std::vector<float>>;

Chain RandomChain(uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  Chain chain(kVocab, std::vector<float>(kVocab));
  for (auto& row : chain) {
    for (float& x : row) x = dist(rng);
  }
  return chain;
}

SamplingRow TargetSettings() {
  SamplingRow row;
  row.temperature = 0.8f;
  row.top_k = 8;
  row.top_p = 0.9f;
  return row;
}

// The filtered distribution SampleRow draws from, read from the row it leaves behind (kept
// tokens' scaled logits, -inf elsewhere).
std::vector<double> FilteredProbs(std::vector<float> logits, const SamplingRow& row) {
  SampleRow(logits.data(), kVocab, row, 0.5);
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(kVocab);
  double total = 0.0;
  for (int64_t i = 0; i < kVocab; ++i) total += p[i] = std::exp(logits[i] - max);
  for (double& x : p) x /= total;
  return p;
}

int32_t Cell(const std::vector<int32_t>& tokens) {
  return (tokens[0] * kVocab + tokens[1]) * kVocab + tokens[2];
}

// The proposer: one-hot drafts (the target's second most likely next token, deterministic, so
// q is one-hot), or drafts drawn from a noisy copy of the target at temperature 1 with their
// probabilities.
struct Proposer {
  bool with_probs;
  Chain draft_chain;  // with_probs: the draft model's logits
};

struct Draft {
  std::vector<int32_t> tokens;
  std::vector<float> probs;  // with_probs: k rows of q
};

Draft Propose(const Proposer& proposer, const Chain& target, int32_t last, uint64_t seed,
              uint64_t counter) {
  Draft d;
  for (int32_t j = 0; j < kDrafts; ++j) {
    if (!proposer.with_probs) {
      const std::vector<double> p = FilteredProbs(target[last], TargetSettings());
      std::vector<int32_t> order(kVocab);
      for (int32_t i = 0; i < kVocab; ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      last = order[1];
    } else {
      std::vector<double> q = FilteredProbs(proposer.draft_chain[last], SamplingRow{});
      d.probs.insert(d.probs.end(), q.begin(), q.end());
      std::vector<float> row = proposer.draft_chain[last];
      last = SampleRow(row.data(), kVocab, SamplingRow{}, CounterUniform(seed, counter + j));
    }
    d.tokens.push_back(last);
  }
  return d;
}

// One sample of the next kTokens tokens by speculative decoding. `skip_residual`: the broken
// sampler of the negative control, which on a rejection replaces the correction with a plain
// draw from p_j.
std::vector<int32_t> SpeculativeSample(const Chain& target, const Proposer& proposer, uint64_t seed,
                                       bool skip_residual) {
  const SamplingRow settings = TargetSettings();
  std::vector<int32_t> out;
  uint64_t counter = 0;
  int32_t last = kPrompt;
  while (static_cast<int32_t>(out.size()) < kTokens) {
    const Draft draft = Propose(proposer, target, last, seed, counter);
    counter += kDrafts;
    std::vector<float> logits = target[last];
    for (int32_t t : draft.tokens) logits.insert(logits.end(), target[t].begin(), target[t].end());
    std::vector<double> u_accept, u_sample;
    for (int32_t j = 0; j < kDrafts; ++j) u_accept.push_back(CounterUniform(seed, counter++));
    for (int32_t j = 0; j <= kDrafts; ++j) u_sample.push_back(CounterUniform(seed, counter++));
    const std::vector<float> unfiltered = logits;
    const int32_t accepted = RejectionSample(logits.data(), kVocab, draft.tokens,
                                             proposer.with_probs ? draft.probs.data() : nullptr,
                                             settings, u_accept, u_sample, &out);
    if (skip_residual && accepted < kDrafts) {
      std::vector<float> row(unfiltered.begin() + accepted * kVocab,
                             unfiltered.begin() + (accepted + 1) * kVocab);
      out.back() = SampleRow(row.data(), kVocab, settings, u_sample[accepted]);
    }
    last = out.back();
  }
  out.resize(kTokens);
  return out;
}

std::vector<int32_t> PlainSample(const Chain& target, uint64_t seed) {
  std::vector<int32_t> out;
  int32_t last = kPrompt;
  for (int32_t i = 0; i < kTokens; ++i) {
    std::vector<float> row = target[last];
    last = SampleRow(row.data(), kVocab, TargetSettings(), CounterUniform(seed, i));
    out.push_back(last);
  }
  return out;
}

// The exact joint distribution of the next kTokens tokens, by enumeration.
std::vector<double> ExactJoint(const Chain& target) {
  std::vector<std::vector<double>> p(kVocab);
  for (int32_t t = 0; t < kVocab; ++t) p[t] = FilteredProbs(target[t], TargetSettings());
  std::vector<double> joint(kVocab * kVocab * kVocab);
  for (int32_t a = 0; a < kVocab; ++a) {
    for (int32_t b = 0; b < kVocab; ++b) {
      for (int32_t c = 0; c < kVocab; ++c)
        joint[Cell({a, b, c})] = p[kPrompt][a] * p[a][b] * p[b][c];
    }
  }
  return joint;
}

// Pearson's test of observed cell counts against `expected` probabilities; cells expecting
// fewer than 5 are pooled into one (an observation in a cell of probability 0 gives p = 0).
double GoodnessOfFitPValue(const std::vector<int64_t>& observed,
                           const std::vector<double>& expected, double* statistic) {
  double chi2 = 0.0;
  double pooled_expected = 0.0;
  int64_t pooled_observed = 0;
  int cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = expected[i] * kSamples;
    if (e < 5.0) {
      pooled_expected += e;
      pooled_observed += observed[i];
      continue;
    }
    chi2 += (observed[i] - e) * (observed[i] - e) / e;
    ++cells;
  }
  if (pooled_expected > 0.0) {
    chi2 +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  } else if (pooled_observed > 0) {
    chi2 = std::numeric_limits<double>::infinity();
  }
  *statistic = chi2;
  return std::isinf(chi2) ? 0.0 : ChiSquarePValue(chi2, cells - 1);
}

template <typename SampleFn>
double PValueOf(const std::vector<double>& exact, SampleFn sample, double* statistic) {
  std::vector<int64_t> counts(exact.size(), 0);
  for (uint64_t s = 0; s < kSamples; ++s) ++counts[Cell(sample(1000003 + s))];
  return GoodnessOfFitPValue(counts, exact, statistic);
}

class DistributionTest : public ::testing::Test {
 protected:
  const Chain target_ = RandomChain(42, 1.5f);
  const std::vector<double> exact_ = ExactJoint(target_);
  // The draft model: the target plus noise, unfiltered at temperature 1 (so q has mass on
  // tokens p filters out, and misses some p keeps).
  Proposer one_hot_{false, {}};
  Proposer with_probs_{true, NoisyCopy(target_)};

  static Chain NoisyCopy(const Chain& target) {
    Chain noise = RandomChain(43, 1.0f);
    for (int64_t i = 0; i < kVocab; ++i) {
      for (int64_t j = 0; j < kVocab; ++j) noise[i][j] += target[i][j];
    }
    return noise;
  }
};

// The yardstick: plain SampleRow, one token at a time, passes against the enumeration.
TEST_F(DistributionTest, PlainSamplingMatchesTheExactJoint) {
  double chi2 = 0.0;
  const double p = PValueOf(
      exact_, [&](uint64_t s) { return PlainSample(target_, s); }, &chi2);
  EXPECT_GT(p, 0.001) << "chi2 " << chi2;
}

TEST_F(DistributionTest, SpeculativeSamplingKeepsTheDistribution) {
  for (const Proposer* proposer : {&one_hot_, &with_probs_}) {
    double chi2 = 0.0;
    const double p = PValueOf(
        exact_, [&](uint64_t s) { return SpeculativeSample(target_, *proposer, s, false); }, &chi2);
    EXPECT_GT(p, 0.001) << "with_probs " << proposer->with_probs << ": chi2 " << chi2;
  }
}

// The negative control, and the test's power. The joint has 116 cells after pooling (115
// degrees of freedom; p = 0.001 at chi2 ≈ 168). At these seeds the correct samplers give
// chi2 = 115.6 (plain), 149.2 (one-hot drafts) and 129.0 (drafts with probabilities), and
// p-values spread over (0, 1) across other seed ranges; skipping the residual gives chi2 =
// 10,276 (one-hot) and 6,080 (with probabilities), p < 1e-300. The test so detects with power
// > 0.9 any sampler whose joint P' has noncentrality N·Σ(P' - P)²/P >= 80, i.e.
// Σ(P' - P)²/P >= 0.004: the broken sampler is about 100 times past that.
TEST_F(DistributionTest, ASamplerThatSkipsTheResidualFails) {
  for (const Proposer* proposer : {&one_hot_, &with_probs_}) {
    double chi2 = 0.0;
    const double p = PValueOf(
        exact_, [&](uint64_t s) { return SpeculativeSample(target_, *proposer, s, true); }, &chi2);
    EXPECT_LT(p, 0.001) << "with_probs " << proposer->with_probs << ": chi2 " << chi2;
  }
}

}  // namespace
}  // namespace vllm::kernels::cpu
