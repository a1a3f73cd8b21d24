#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {
namespace {

// Hugging Face's inverse frequencies, straight from the formulas, in double.
std::vector<double> ReferenceInvFreq(int32_t head_dim, double theta, const RopeScaling& s) {
  std::vector<double> inv_freq(head_dim / 2);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    double f = 1.0 / std::pow(theta, 2.0 * i / head_dim);
    if (s.type == RopeScaling::Type::kLinear) f /= s.factor;
    if (s.type == RopeScaling::Type::kLlama3) {
      const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < old_ctx / s.high_freq_factor) {
        // high frequency: unchanged
      } else if (wavelen > old_ctx / s.low_freq_factor) {
        f /= s.factor;
      } else {
        const double smooth =
            (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  return inv_freq;
}

// rotate_half applied to one head in double.
std::vector<double> ReferenceRotate(const float* x, int32_t head_dim, double pos,
                                    const std::vector<double>& inv_freq) {
  const int32_t half = head_dim / 2;
  std::vector<double> out(head_dim);
  for (int32_t i = 0; i < half; ++i) {
    const double c = std::cos(pos * inv_freq[i]), s = std::sin(pos * inv_freq[i]);
    out[i] = x[i] * c - x[i + half] * s;
    out[i + half] = x[i + half] * c + x[i] * s;
  }
  return out;
}

struct RopeCase {
  int32_t head_dim;
  double theta;
  RopeScaling scaling;
};

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, RotatesQueriesAndKeysLikeTheReference) {
  const RopeCase& c = GetParam();
  constexpr int64_t kMaxPosition = 4096;
  constexpr int32_t kQHeads = 4, kKvHeads = 2;
  auto rope = RotaryEmbedding::Create(c.head_dim, c.theta, kMaxPosition, c.scaling);
  ASSERT_TRUE(rope.ok()) << rope.status();
  EXPECT_EQ(rope->head_dim(), c.head_dim);
  EXPECT_EQ(rope->max_position(), kMaxPosition);

  const std::vector<int32_t> positions = {0, 1, 17, 255, 1000, 4095};
  const auto tokens = static_cast<int64_t>(positions.size());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(tokens * kQHeads * c.head_dim), k(tokens * kKvHeads * c.head_dim);
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = dist(rng);
  const std::vector<float> q0 = q, k0 = k;
  rope->Apply(positions.data(), tokens, q.data(), kQHeads, k.data(), kKvHeads);

  const std::vector<double> inv_freq = ReferenceInvFreq(c.head_dim, c.theta, c.scaling);
  for (int64_t t = 0; t < tokens; ++t) {
    // The kernel rounds inv_freq and position·inv_freq to float as HF does, so the angle may
    // differ from the exact one by ~position·2^-23 rad; anything wrong in the formulas is
    // off by orders of magnitude more.
    const double tol = 1e-5 + positions[t] * 2.5e-7;
    for (auto [buf, base, heads] : {std::tuple{&q, &q0, kQHeads}, std::tuple{&k, &k0, kKvHeads}}) {
      for (int32_t h = 0; h < heads; ++h) {
        const int64_t off = (t * heads + h) * c.head_dim;
        const std::vector<double> ref =
            ReferenceRotate(base->data() + off, c.head_dim, positions[t], inv_freq);
        for (int32_t i = 0; i < c.head_dim; ++i) {
          ASSERT_NEAR((*buf)[off + i], ref[i], tol)
              << "pos " << positions[t] << " head " << h << " dim " << i;
        }
      }
    }
  }
}

RopeScaling LinearScaling(double factor) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLinear;
  s.factor = factor;
  return s;
}

// Llama 3.1's settings; with head_dim 128 and theta 5e5 all three bands are populated.
RopeScaling Llama3() {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  return s;
}

INSTANTIATE_TEST_SUITE_P(Configs, RopeTest,
                         ::testing::Values(RopeCase{2, 10000.0, {}}, RopeCase{64, 10000.0, {}},
                                           RopeCase{80, 1e6, {}}, RopeCase{128, 5e5, Llama3()},
                                           RopeCase{64, 10000.0, LinearScaling(4.0)}));

TEST(RopeLlama3Test, ReferenceCoversAllThreeBands) {
  // Guards the test above: if every frequency fell in one band, a wrong branch would pass.
  const std::vector<double> plain = ReferenceInvFreq(128, 5e5, RopeScaling{});
  const std::vector<double> scaled = ReferenceInvFreq(128, 5e5, Llama3());
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double ratio = plain[i] / scaled[i];
    if (std::abs(ratio - 1.0) < 1e-12) {
      ++kept;
    } else if (std::abs(ratio - 8.0) < 1e-9) {
      ++divided;
    } else {
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTest, PositionZeroIsIdentity) {
  auto rope = RotaryEmbedding::Create(8, 10000.0, 4, Llama3());
  ASSERT_TRUE(rope.ok());
  std::vector<float> q = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> k = {-1, -2, -3, -4, -5, -6, -7, -8};
  const std::vector<float> q0 = q, k0 = k;
  const int32_t pos = 0;
  rope->Apply(&pos, 1, q.data(), 1, k.data(), 1);
  EXPECT_EQ(q, q0);
  EXPECT_EQ(k, k0);
}

TEST(RopeCreateTest, RejectsBadArguments) {
  auto invalid = [](int32_t head_dim, double theta, int64_t max_pos, const RopeScaling& s) {
    return RotaryEmbedding::Create(head_dim, theta, max_pos, s).status().code() ==
           absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(invalid(7, 10000.0, 16, {}));   // odd head_dim
  EXPECT_TRUE(invalid(0, 10000.0, 16, {}));   // empty head
  EXPECT_TRUE(invalid(-4, 10000.0, 16, {}));  // negative head_dim
  EXPECT_TRUE(invalid(8, 0.0, 16, {}));       // theta
  EXPECT_TRUE(invalid(8, -1.0, 16, {}));
  EXPECT_TRUE(invalid(8, 10000.0, 0, {}));  // max_position
  EXPECT_TRUE(invalid(8, 10000.0, 16, LinearScaling(0.5)));
  RopeScaling bad = Llama3();
  bad.factor = 0.5;
  EXPECT_TRUE(invalid(8, 10000.0, 16, bad));
  bad = Llama3();
  bad.low_freq_factor = 4.0;  // == high_freq_factor
  EXPECT_TRUE(invalid(8, 10000.0, 16, bad));
  bad = Llama3();
  bad.original_max_position_embeddings = 0;
  EXPECT_TRUE(invalid(8, 10000.0, 16, bad));
  // A scaling type of kNone ignores a nonsensical factor.
  RopeScaling ignored;
  ignored.factor = -3.0;
  EXPECT_TRUE(RotaryEmbedding::Create(8, 10000.0, 16, ignored).ok());
  EXPECT_TRUE(RotaryEmbedding::Create(8, 10000.0, 16, Llama3()).ok());
}

}  // namespace
}  // namespace vllm::kernels::cpu
