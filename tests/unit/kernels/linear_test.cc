#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_small.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/unit/kernels/random_vector.h"

namespace vllm::kernels::cpu {
namespace {

// Inputs in [-1, 1).
std::vector<float> Uniform(int64_t n, uint32_t seed) { return RandomVector(n, seed, -1.0f, 1.0f); }

// y = x · wᵀ + bias in double, the definition Linear must match.
std::vector<double> ReferenceLinear(const std::vector<float>& x, const std::vector<float>& w,
                                    const float* bias, int64_t m, int64_t n, int64_t k) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = bias != nullptr ? bias[j] : 0.0;
      for (int64_t l = 0; l < k; ++l) sum += static_cast<double>(x[i * k + l]) * w[j * k + l];
      y[i * n + j] = sum;
    }
  }
  return y;
}

struct LinearCase {
  int64_t m, n, k;
  bool bias;
};

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, MatchesDoubleReference) {
  const auto [m, n, k, use_bias] = GetParam();
  const std::vector<float> x = Uniform(m * k, 1);
  const std::vector<float> w = Uniform(n * k, 2);
  const std::vector<float> bias = Uniform(n, 3);
  const float* bias_ptr = use_bias ? bias.data() : nullptr;
  std::vector<float> y(m * n, 123.0f);  // stale contents must be overwritten, not added to
  Linear(x.data(), w.data(), bias_ptr, y.data(), m, n, k);
  const std::vector<double> ref = ReferenceLinear(x, w, bias_ptr, m, n, k);
  for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(y[i], ref[i], 1e-4) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(LinearCase{1, 1, 1, false}, LinearCase{1, 7, 5, true},
                                           LinearCase{1, 33, 64, false}, LinearCase{2, 9, 17, true},
                                           LinearCase{3, 17, 33, false},
                                           LinearCase{13, 65, 129, true},
                                           LinearCase{64, 40, 96, false}));

TEST(LinearEdgeTest, ZeroInnerDimensionYieldsBiasOrZero) {
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  std::vector<float> y(2 * 3, 7.0f);
  Linear(nullptr, nullptr, bias.data(), y.data(), 2, 3, 0);
  EXPECT_EQ(y, (std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f}));
  Linear(nullptr, nullptr, nullptr, y.data(), 2, 3, 0);
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
}

TEST(LinearEdgeTest, ZeroRowsWritesNothing) {
  std::vector<float> y = {9.0f};
  const std::vector<float> w = Uniform(4, 5);
  Linear(nullptr, w.data(), nullptr, y.data(), 0, 1, 4);
  EXPECT_EQ(y[0], 9.0f);
}

// ---- The small-m kernel (gemm_small.h), every ISA path this CPU has, and the BLAS peer.

// Σ_l |x[i, l] · w[j, l]| + |bias[j]|: the scale of float32 rounding in element (i, j).
std::vector<double> AbsScale(const std::vector<float>& x, const std::vector<float>& w,
                             const float* bias, int64_t m, int64_t n, int64_t k) {
  std::vector<float> ax(x), aw(w), ab;
  for (float& v : ax) v = std::fabs(v);
  for (float& v : aw) v = std::fabs(v);
  if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) ab.push_back(std::fabs(bias[j]));
  }
  return ReferenceLinear(ax, aw, bias != nullptr ? ab.data() : nullptr, m, n, k);
}

using LinearFn = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t,
                          int64_t, GemmIsa);

// Runs `fn` on random data of the shape and compares every element with the double reference
// to float32 accumulation accuracy (relative to Σ|x·w|).
void ExpectMatchesReference(LinearFn fn, GemmIsa isa, int64_t m, int64_t n, int64_t k,
                            bool use_bias, uint32_t seed) {
  const std::vector<float> x = Uniform(m * k, seed);
  const std::vector<float> w = Uniform(n * k, seed + 1);
  const std::vector<float> bias = Uniform(n, seed + 2);
  const float* bias_ptr = use_bias ? bias.data() : nullptr;
  std::vector<float> y(m * n, 123.0f);
  fn(x.data(), w.data(), bias_ptr, y.data(), m, n, k, isa);
  const std::vector<double> ref = ReferenceLinear(x, w, bias_ptr, m, n, k);
  const std::vector<double> scale = AbsScale(x, w, bias_ptr, m, n, k);
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_NEAR(y[i], ref[i], 2e-6 * scale[i] + 1e-7)
        << GemmIsaName(isa) << " m=" << m << " n=" << n << " k=" << k << " bias=" << use_bias
        << " row " << i / n << " col " << i % n;
  }
}

void SmallM(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t n,
            int64_t k, GemmIsa isa) {
  LinearSmallM(x, w, b, y, m, n, k, isa);
}

// Runs the BF16 kernel on w's top 16 bits (w must already be BF16-representable, so the
// reference on w sees the same values).
void SmallMBf16(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t n,
                int64_t k, GemmIsa isa) {
  std::vector<uint16_t> bits(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    uint32_t u;
    std::memcpy(&u, &w[i], sizeof(u));
    bits[i] = static_cast<uint16_t>(u >> 16);
  }
  LinearSmallMBf16(x, bits.data(), b, y, m, n, k, isa);
}

std::vector<GemmIsa> SupportedIsas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (GemmIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

class SmallMTest : public ::testing::TestWithParam<GemmIsa> {};

// m 1..40 against n and k that are not multiples of any vector width (and some that are),
// with and without bias; serial (n · k below the parallel threshold).
TEST_P(SmallMTest, OddShapesMatchDoubleReference) {
  const int64_t shapes[][2] = {{1, 1},   {3, 5},   {5, 16},  {17, 31},
                               {33, 64}, {7, 100}, {4, 257}, {19, 9}};
  uint32_t seed = 10;
  for (int64_t m = 1; m <= 40; ++m) {
    for (const auto& [n, k] : shapes) {
      ExpectMatchesReference(&SmallM, GetParam(), m, n, k, (m + n) % 2 == 0, seed++);
    }
  }
}

// Shapes past the parallel threshold (n · k >= 32 K) and past one k block (kc = 64 K / m,
// at least 256), on a pool of 3 threads so several workers share the chunks.
TEST_P(SmallMTest, ParallelAndKBlockedMatchDoubleReference) {
  KernelThreadPool().Resize(3);
  uint32_t seed = 1000;
  for (int64_t m : {1, 2, 3, 5, 8, 13, 16, 31, 32, 40}) {
    ExpectMatchesReference(&SmallM, GetParam(), m, 301, 131, m % 2 == 0, seed++);
    ExpectMatchesReference(&SmallM, GetParam(), m, 37, 3301, m % 2 == 1, seed++);
  }
  ExpectMatchesReference(&SmallM, GetParam(), 4, 1030, 1027, true, seed++);
  KernelThreadPool().Resize(1);
  ExpectMatchesReference(&SmallM, GetParam(), 4, 1030, 1027, false, seed++);
}

TEST_P(SmallMTest, Bf16WeightsMatchWidenedReference) {
  KernelThreadPool().Resize(2);
  uint32_t seed = 2000;
  for (int64_t m : {1, 2, 3, 4, 5, 9, 17, 32, 33}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{5, 7}, {17, 33}, {301, 131}}) {
      // The reference sees the BF16-rounded weights: round a copy, then both paths read it.
      const std::vector<float> w = Uniform(n * k, seed + 1);
      std::vector<float> w16(w);
      for (float& v : w16) {
        uint32_t u;
        std::memcpy(&u, &v, sizeof(u));
        u &= 0xFFFF0000u;
        std::memcpy(&v, &u, sizeof(v));
      }
      const std::vector<float> x = Uniform(m * k, seed);
      const std::vector<float> bias = Uniform(n, seed + 2);
      std::vector<float> y(m * n, 5.0f);
      SmallMBf16(x.data(), w16.data(), bias.data(), y.data(), m, n, k, GetParam());
      const std::vector<double> ref = ReferenceLinear(x, w16, bias.data(), m, n, k);
      const std::vector<double> scale = AbsScale(x, w16, bias.data(), m, n, k);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_NEAR(y[i], ref[i], 2e-6 * scale[i] + 1e-7) << "m=" << m << " n=" << n;
      }
      ++seed;
    }
  }
}

TEST_P(SmallMTest, ZeroInnerDimensionYieldsBiasOrZero) {
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  std::vector<float> y(2 * 3, 7.0f);
  LinearSmallM(nullptr, nullptr, bias.data(), y.data(), 2, 3, 0, GetParam());
  EXPECT_EQ(y, (std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f}));
  LinearSmallM(nullptr, nullptr, nullptr, y.data(), 2, 3, 0, GetParam());
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Isas, SmallMTest, ::testing::ValuesIn(SupportedIsas()),
                         [](const auto& info) { return std::string(GemmIsaName(info.param)); });

void Blas(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t n, int64_t k,
          GemmIsa) {
  LinearBlas(x, w, b, y, m, n, k);
}

// Linear's two paths agree with the reference on either side of the switch point.
TEST(LinearSwitchTest, BothPathsAroundTheSwitchPoint) {
  uint32_t seed = 3000;
  for (int64_t m : {kLinearSmallMMaxRows - 1, kLinearSmallMMaxRows, kLinearSmallMMaxRows + 1}) {
    ExpectMatchesReference(&Blas, GemmIsa::kPortable, m, 67, 129, true, seed++);
    ExpectMatchesReference([](const float* x, const float* w, const float* b, float* y, int64_t m,
                              int64_t n, int64_t k, GemmIsa) { Linear(x, w, b, y, m, n, k); },
                           GemmIsa::kPortable, m, 67, 129, false, seed++);
  }
}

TEST(GemmIsaTest, BestIsSupported) { EXPECT_TRUE(GemmIsaSupported(BestGemmIsa())); }

}  // namespace
}  // namespace vllm::kernels::cpu
