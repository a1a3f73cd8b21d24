// Embedding, RmsNorm, FusedAddRmsNorm, SiluAndMul, GeluTanhAndMul, SoftCap and Scale against
// double references.
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/unit/kernels/random_vector.h"

namespace vllm::kernels::cpu {
namespace {

std::vector<double> ReferenceRmsNorm(const std::vector<float>& x, const std::vector<float>& w,
                                     int64_t tokens, int64_t hidden, double eps) {
  std::vector<double> out(tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < hidden; ++i) sum_sq += double{x[t * hidden + i]} * x[t * hidden + i];
    const double inv = 1.0 / std::sqrt(sum_sq / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) out[t * hidden + i] = x[t * hidden + i] * inv * w[i];
  }
  return out;
}

TEST(EmbeddingTest, CopiesRowsAndZeroesIdsOutsideTheShard) {
  constexpr int64_t kVocab = 7, kHidden = 5, kStart = 100;
  const std::vector<float> table = RandomVector(kVocab * kHidden, 1);
  // 100..106 are this shard's; 99 and 107 belong to neighbours, -1 is padding.
  const std::vector<int32_t> ids = {100, 106, 99, 107, -1, 103, 103};
  std::vector<float> out(ids.size() * kHidden, 42.0f);
  Embedding(ids.data(), static_cast<int64_t>(ids.size()), table.data(), kStart, kVocab, kHidden,
            out.data());
  for (size_t t = 0; t < ids.size(); ++t) {
    const int64_t local = ids[t] - kStart;
    for (int64_t i = 0; i < kHidden; ++i) {
      const float expected = (local >= 0 && local < kVocab) ? table[local * kHidden + i] : 0.0f;
      EXPECT_EQ(out[t * kHidden + i], expected) << "token " << t << " dim " << i;
    }
  }
}

class RmsNormTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(RmsNormTest, MatchesReference) {
  const int64_t hidden = GetParam();
  constexpr int64_t kTokens = 3;
  constexpr float kEps = 1e-6f;
  const std::vector<float> x = RandomVector(kTokens * hidden, 2);
  const std::vector<float> w = RandomVector(hidden, 3, 0.5f, 1.5f);
  std::vector<float> out(x.size());
  RmsNorm(x.data(), w.data(), out.data(), kTokens, hidden, kEps);
  const std::vector<double> ref = ReferenceRmsNorm(x, w, kTokens, hidden, kEps);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i;

  std::vector<float> in_place = x;  // out == x is allowed
  RmsNorm(in_place.data(), w.data(), in_place.data(), kTokens, hidden, kEps);
  EXPECT_EQ(in_place, out);
}

TEST_P(RmsNormTest, FusedAddUpdatesResidualAndNormalisesTheSum) {
  const int64_t hidden = GetParam();
  constexpr int64_t kTokens = 2;
  constexpr float kEps = 1e-5f;
  std::vector<float> x = RandomVector(kTokens * hidden, 4);
  std::vector<float> residual = RandomVector(kTokens * hidden, 5);
  const std::vector<float> w = RandomVector(hidden, 6, 0.5f, 1.5f);
  std::vector<float> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + residual[i];
  FusedAddRmsNorm(x.data(), residual.data(), w.data(), kTokens, hidden, kEps);
  EXPECT_EQ(residual, sum);
  const std::vector<double> ref = ReferenceRmsNorm(sum, w, kTokens, hidden, kEps);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], ref[i], 1e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(Hidden, RmsNormTest, ::testing::Values(1, 7, 64, 257));

// Enough rows that both calls hand them to the kernel pool: the same bits on 1 and 2 threads,
// and the reference on each.
TEST(RmsNormPoolTest, ManyRowsGiveTheSameBitsOnOneAndTwoThreads) {
  constexpr int64_t kTokens = 200, kHidden = 257;  // 51 400 outputs, above the pool threshold
  constexpr float kEps = 1e-5f;
  const std::vector<float> x = RandomVector(kTokens * kHidden, 7);
  const std::vector<float> residual = RandomVector(kTokens * kHidden, 8);
  const std::vector<float> w = RandomVector(kHidden, 9, 0.5f, 1.5f);
  std::vector<float> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + residual[i];
  const std::vector<double> ref = ReferenceRmsNorm(x, w, kTokens, kHidden, kEps);
  const std::vector<double> ref_sum = ReferenceRmsNorm(sum, w, kTokens, kHidden, kEps);

  const int threads_before = KernelThreadPool().num_threads();
  std::vector<std::vector<float>> normed, fused;
  for (int threads : {1, 2}) {
    SetBlasNumThreads(threads);
    std::vector<float> out(x.size());
    RmsNorm(x.data(), w.data(), out.data(), kTokens, kHidden, kEps);
    std::vector<float> fx = x, fr = residual;
    FusedAddRmsNorm(fx.data(), fr.data(), w.data(), kTokens, kHidden, kEps);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-5) << threads << " threads, " << i;
      ASSERT_NEAR(fx[i], ref_sum[i], 1e-5) << threads << " threads, " << i;
    }
    EXPECT_EQ(fr, sum) << threads << " threads";
    normed.push_back(std::move(out));
    fused.push_back(std::move(fx));
  }
  SetBlasNumThreads(threads_before);
  EXPECT_EQ(normed[0], normed[1]);
  EXPECT_EQ(fused[0], fused[1]);
}

TEST(RmsNormEdgeTest, EpsilonKeepsAZeroRowFinite) {
  const std::vector<float> x(8, 0.0f);
  const std::vector<float> w(8, 1.0f);
  std::vector<float> out(8, 1.0f);
  RmsNorm(x.data(), w.data(), out.data(), 1, 8, 1e-6f);
  EXPECT_EQ(out, x);
}

// SiluAndMul of `tokens` rows of width `d` (d = 11: the scalar loop only; d = 40: the 16-lane
// vector loop and a tail) against the double formula, extremes included.
void CheckSiluAndMul(int64_t tokens, int64_t d) {
  std::vector<float> gate_up = RandomVector(tokens * 2 * d, 7, -6.0f, 6.0f);
  gate_up[0] = -200.0f;  // e^200 overflows float: must give -0, not NaN
  gate_up[1] = 200.0f;
  gate_up[2] = -88.0f;  // e^88 is near the float maximum
  gate_up[3] = 0.0f;
  std::vector<float> out(tokens * d);
  SiluAndMul(gate_up.data(), out.data(), tokens, d);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      const double g = gate_up[t * 2 * d + i];
      const double u = gate_up[t * 2 * d + d + i];
      const double ref = g / (1.0 + std::exp(-g)) * u;
      ASSERT_TRUE(std::isfinite(out[t * d + i])) << t << "," << i;
      ASSERT_NEAR(out[t * d + i], ref, 1e-5 * (1.0 + std::abs(ref))) << t << "," << i;
    }
  }
}

TEST(SiluAndMulTest, MatchesReferenceIncludingExtremes) { CheckSiluAndMul(3, 11); }

TEST(SiluAndMulTest, WideRowsMatchReference) { CheckSiluAndMul(3, 40); }

TEST(GeluTanhAndMulTest, MatchesReferenceIncludingExtremes) {
  constexpr int64_t kTokens = 3, kD = 13;
  std::vector<float> gate_up = RandomVector(kTokens * 2 * kD, 8, -6.0f, 6.0f);
  gate_up[0] = -200.0f;  // x³ is large but finite: tanh saturates to -1, gelu to -0
  gate_up[1] = 200.0f;
  gate_up[2] = 0.0f;
  std::vector<float> out(kTokens * kD);
  GeluTanhAndMul(gate_up.data(), out.data(), kTokens, kD);
  const double beta = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t i = 0; i < kD; ++i) {
      const double g = gate_up[t * 2 * kD + i];
      const double u = gate_up[t * 2 * kD + kD + i];
      const double ref = 0.5 * g * (1.0 + std::tanh(beta * (g + 0.044715 * g * g * g))) * u;
      ASSERT_TRUE(std::isfinite(out[t * kD + i])) << t << "," << i;
      ASSERT_NEAR(out[t * kD + i], ref, 1e-5 * (1.0 + std::abs(ref))) << t << "," << i;
    }
  }
}

TEST(SoftCapTest, MatchesReferenceAndStaysWithinTheCap) {
  std::vector<float> x = RandomVector(257, 9, -60.0f, 60.0f);
  x[0] = 1e30f;
  x[1] = -std::numeric_limits<float>::infinity();
  const std::vector<float> in = x;
  constexpr float kCap = 15.0f;
  SoftCap(x.data(), static_cast<int64_t>(x.size()), kCap);
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = kCap * std::tanh(double{in[i]} / kCap);
    ASSERT_NEAR(x[i], ref, 1e-5 * kCap) << i;
    ASSERT_LE(std::abs(x[i]), kCap) << i;
  }
  EXPECT_EQ(x[0], kCap);
  EXPECT_EQ(x[1], -kCap);
}

TEST(ScaleTest, MultipliesEveryElement) {
  std::vector<float> x = RandomVector(33, 10);
  const std::vector<float> in = x;
  Scale(x.data(), static_cast<int64_t>(x.size()), 8.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], in[i] * 8.0f) << i;
}

}  // namespace
}  // namespace vllm::kernels::cpu
