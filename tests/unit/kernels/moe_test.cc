// TopKSoftmax and FusedMoe (kernels/cpu/moe.h) against double references: the router's
// choice and weights, ties, and the per-expert grouped MLP against a per-token loop.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/kernels/random_vector.h"

namespace vllm::kernels::cpu {
namespace {

TEST(TopKSoftmaxTest, PicksTheLargestAndNormalisesAsAsked) {
  constexpr int64_t kTokens = 5;
  constexpr int32_t kExperts = 8, kK = 3;
  const std::vector<float> logits = RandomVector(kTokens * kExperts, 7);
  for (bool renormalize : {false, true}) {
    std::vector<int32_t> ids(kTokens * kK);
    std::vector<float> weights(kTokens * kK);
    TopKSoftmax(logits.data(), kTokens, kExperts, kK, renormalize, ids.data(), weights.data());
    for (int64_t t = 0; t < kTokens; ++t) {
      const float* row = logits.data() + t * kExperts;
      std::vector<double> p(kExperts);
      double sum = 0.0;
      for (int32_t e = 0; e < kExperts; ++e) sum += p[e] = std::exp(double{row[e]});
      for (double& x : p) x /= sum;
      std::vector<int32_t> order(kExperts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      double chosen = 0.0;
      for (int32_t j = 0; j < kK; ++j) chosen += p[order[j]];
      for (int32_t j = 0; j < kK; ++j) {
        EXPECT_EQ(ids[t * kK + j], order[j]) << "token " << t << " rank " << j;
        const double want = renormalize ? p[order[j]] / chosen : p[order[j]];
        EXPECT_NEAR(weights[t * kK + j], want, 1e-6) << "token " << t << " rank " << j;
      }
    }
  }
}

TEST(TopKSoftmaxTest, TiesGoToTheLowerExpert) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 3.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> weights(2);
  TopKSoftmax(logits.data(), 1, 4, 2, /*renormalize=*/true, ids.data(), weights.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(weights[0], 0.5f);
  EXPECT_FLOAT_EQ(weights[1], 0.5f);
}

// out[t] = Σ_j w · down_e(silu(gate_e x) ⊙ up_e x), one token at a time in double.
std::vector<double> ReferenceMoe(const std::vector<float>& x, const std::vector<int32_t>& ids,
                                 const std::vector<float>& w, const std::vector<float>& gate_up,
                                 const std::vector<float>& down, int64_t tokens, int64_t hidden,
                                 int64_t inter, int32_t k) {
  std::vector<double> out(tokens * hidden, 0.0);
  std::vector<double> act(inter);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * hidden;
    for (int32_t j = 0; j < k; ++j) {
      const int64_t e = ids[t * k + j];
      const float* gu = gate_up.data() + e * 2 * inter * hidden;
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0.0, u = 0.0;
        for (int64_t c = 0; c < hidden; ++c) {
          g += double{gu[i * hidden + c]} * xt[c];
          u += double{gu[(inter + i) * hidden + c]} * xt[c];
        }
        act[i] = g / (1.0 + std::exp(-g)) * u;
      }
      const float* dn = down.data() + e * hidden * inter;
      for (int64_t r = 0; r < hidden; ++r) {
        double y = 0.0;
        for (int64_t i = 0; i < inter; ++i) y += double{dn[r * inter + i]} * act[i];
        out[t * hidden + r] += w[t * k + j] * y;
      }
    }
  }
  return out;
}

TEST(FusedMoeTest, MatchesAPerTokenLoopAndSkipsUnchosenExperts) {
  // 3 tokens × top-2 of 8 experts: at least two experts go unchosen.
  constexpr int64_t kTokens = 3, kHidden = 16, kInter = 12;
  constexpr int32_t kExperts = 8, kK = 2;
  const std::vector<float> x = RandomVector(kTokens * kHidden, 1);
  const std::vector<float> logits = RandomVector(kTokens * kExperts, 2);
  std::vector<float> gate_up = RandomVector(kExperts * 2 * kInter * kHidden, 3, -0.5f, 0.5f);
  std::vector<float> down = RandomVector(kExperts * kHidden * kInter, 4, -0.5f, 0.5f);
  std::vector<int32_t> ids(kTokens * kK);
  std::vector<float> weights(kTokens * kK);
  TopKSoftmax(logits.data(), kTokens, kExperts, kK, /*renormalize=*/true, ids.data(),
              weights.data());
  // An expert no token chose: its weights are never read (NaN would reach the output).
  for (int32_t e = 0; e < kExperts; ++e) {
    if (std::find(ids.begin(), ids.end(), e) != ids.end()) continue;
    std::fill_n(gate_up.begin() + e * 2 * kInter * kHidden, 2 * kInter * kHidden,
                std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<float> out(kTokens * kHidden, -1.0f);
  MoeScratch scratch;
  FusedMoe(x.data(), ids.data(), weights.data(), gate_up.data(), down.data(), out.data(), kTokens,
           kHidden, kInter, kExperts, kK, &scratch);
  for (float& g : gate_up) {
    if (std::isnan(g)) g = 0.0f;  // the reference reads only chosen experts too
  }
  const std::vector<double> want =
      ReferenceMoe(x, ids, weights, gate_up, down, kTokens, kHidden, kInter, kK);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-4) << "element " << i;
}

}  // namespace
}  // namespace vllm::kernels::cpu
