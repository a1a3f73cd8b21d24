#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

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
  const std::vector<float> x = RandomVector(m * k, 1);
  const std::vector<float> w = RandomVector(n * k, 2);
  const std::vector<float> bias = RandomVector(n, 3);
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
  const std::vector<float> w = RandomVector(4, 5);
  Linear(nullptr, w.data(), nullptr, y.data(), 0, 1, 4);
  EXPECT_EQ(y[0], 9.0f);
}

}  // namespace
}  // namespace vllm::kernels::cpu
