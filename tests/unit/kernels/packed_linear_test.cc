// PackedWeight and LinearPacked (kernels/cpu/packed_linear.h): the packed layout, the product
// against a double-precision reference on every supported ISA, the edge shapes, determinism
// across pool sizes, and agreement with Linear on the bundled model's projections.
#include "kernels/cpu/packed_linear.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/gemm_small.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace vllm::kernels::cpu {
namespace {

constexpr int64_t kPanel = PackedWeight::kPanel;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Inputs in [-1, 1), multiples of 2⁻²³, from a linear congruential generator: RandomVector
// (random_vector.h) costs a long-double log per value in the Debug/ASan build, most of this
// test's time there; the products need no better randomness.
std::vector<float> Uniform(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t state = seed * 2654435761u + 1;
  for (float& f : v) {
    state = state * 1664525u + 1013904223u;
    f = static_cast<float>(state >> 8) * (1.0f / 8388608.0f) - 1.0f;
  }
  return v;
}

std::vector<GemmIsa> SupportedIsas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (GemmIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp takes no null pointer, even for 0 bytes (an empty vector's data() may be null).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Sets the kernel pool (and OpenBLAS) to `threads` and restores the previous size on exit,
// also when an ASSERT returns early.
class PoolThreads {
 public:
  explicit PoolThreads(int threads) : before_(KernelThreadPool().num_threads()) {
    SetBlasNumThreads(threads);
  }
  ~PoolThreads() { SetBlasNumThreads(before_); }
  PoolThreads(const PoolThreads&) = delete;
  PoolThreads& operator=(const PoolThreads&) = delete;

 private:
  const int before_;
};

// ---- Pack / Unpack.

// Unpack returns the packed weight bit for bit, and panels() holds the documented layout:
// panel p is [k][32], feature p·32 + c at column c, the last panel's missing features 0.
void ExpectRoundTrip(int64_t n, int64_t k, uint32_t seed) {
  std::vector<float> w = Uniform(n * k, seed);
  // Values a lossy copy would change: -0, a subnormal, infinity.
  if (n * k >= 3) {
    w[0] = -0.0f;
    w[1] = std::numeric_limits<float>::denorm_min();
    w[2] = std::numeric_limits<float>::infinity();
  }
  const PackedWeight p = PackedWeight::Pack(w.data(), n, k);
  ASSERT_EQ(p.n(), n);
  ASSERT_EQ(p.k(), k);
  EXPECT_EQ(p.empty(), n == 0);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  ASSERT_GE(p.bytes(), static_cast<size_t>(panels * k * kPanel) * sizeof(float));
  EXPECT_TRUE(SameBits(p.Unpack(), w)) << "n=" << n << " k=" << k;
  for (int64_t panel = 0; panel < panels; ++panel) {
    for (int64_t l = 0; l < k; ++l) {
      for (int64_t c = 0; c < kPanel; ++c) {
        const int64_t j = panel * kPanel + c;
        const float got = p.float_panels()[(panel * k + l) * kPanel + c];
        const float want = j < n ? w[j * k + l] : 0.0f;
        ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
            << "n=" << n << " k=" << k << " panel " << panel << " l " << l << " c " << c << ": "
            << got << " vs " << want;
      }
    }
  }
}

TEST(PackedWeightTest, RoundTripIsExact) {
  uint32_t seed = 1;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{1, 1},
                             {1, 7},
                             {5, 3},
                             {31, 17},
                             {32, 16},
                             {33, 5},
                             {64, 3},
                             {100, 9},
                             {257, 2}}) {
    ExpectRoundTrip(n, k, seed++);
  }
}

TEST(PackedWeightTest, EmptyShapes) {
  ExpectRoundTrip(5, 0, 20);   // k == 0: n features of no inputs
  ExpectRoundTrip(33, 0, 21);  // two (empty) panels
  ExpectRoundTrip(0, 7, 22);   // n == 0
  ExpectRoundTrip(0, 0, 23);
  const PackedWeight d;  // default: an empty 0 × 0 weight
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.n(), 0);
  EXPECT_EQ(d.k(), 0);
  EXPECT_TRUE(d.Unpack().empty());
}

// ---- LinearPacked against the double-precision reference.

// Element (i, j) of x · wᵀ in double, and Σ_l |x[i, l] · w[j, l]|: the scale of float32
// rounding in it. One pass for both (raw pointers: the Debug/ASan build runs this loop).
struct Reference {
  std::vector<double> y, scale;
};

Reference ReferenceLinear(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                          int64_t n, int64_t k) {
  Reference r{std::vector<double>(m * n), std::vector<double>(m * n)};
  const float* xp = x.data();
  const float* wp = w.data();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double t = static_cast<double>(xp[i * k + l]) * wp[j * k + l];
        sum += t;
        abs_sum += t < 0.0 ? -t : t;  // not std::fabs: a call per term at -O0
      }
      r.y[i * n + j] = sum;
      r.scale[i * n + j] = abs_sum;
    }
  }
  return r;
}

// The tolerance, relative to Σ|x·w| + |bias| (the same as linear_test.cc's for the small-m
// kernel): 2e-6 ≈ 34 u (u = 2⁻²⁴, float32's unit roundoff). The worst-case bound of a float32
// sum of k products (FMA, in any order or blocking) is about k·u·Σ|x·w|, up to 6.6e-5 of it
// here (k ≤ 1100), too loose to catch a lost term; the actual error of k random-sign terms is
// a random walk, ≈ u·σ·k/√2 with σ = 1/3 for x, w uniform in [-1, 1), against Σ|x·w| ≈ k/4:
// ≈ 0.9 u relative. So 34 u leaves a wide margin for every element, yet a term lost, doubled
// or taken from the wrong row or column (1/4 on average) exceeds it (2e-6 · k/4 ≤ 5.5e-4).
// The absolute 1e-7 covers sums that cancel to ~0.
double Tolerance(double scale) { return 2e-6 * scale + 1e-7; }

struct Shape {
  int64_t m, n, k;
};

// Every m in {1, 2, 3, 11, 12, 13, 16, 25, 64, 100, 200, 300}, n in {1, 5, 31, 32, 33, 64, 100,
// 257} and k in {1, 3, 16, 17, 255, 256, 257, 600, 1100} at least once: m around the AVX-512
// tile of 12 rows and past the row block (192 rows), n around the panel of 32, k past the k
// block (512) once and twice. Σ m·n·k ≈ 3 M: the Debug/ASan build runs the kernels and the
// reference unoptimized (some 25 M multiply-adds per second).
constexpr Shape kShapes[] = {
    {1, 1, 1},     {1, 257, 1100}, {2, 5, 3},      {2, 100, 600}, {3, 31, 17},   {3, 257, 256},
    {11, 32, 255}, {11, 33, 1100}, {12, 64, 257},  {12, 1, 600},  {13, 33, 16},  {13, 100, 17},
    {16, 32, 256}, {16, 257, 17},  {25, 5, 257},   {25, 64, 16},  {64, 31, 16},  {64, 257, 3},
    {100, 33, 16}, {100, 1, 1100}, {200, 100, 16}, {200, 5, 600}, {200, 257, 3}, {300, 33, 17},
    {300, 257, 1}, {300, 32, 3},
};

// Larger ones where the build is optimized (Σ m·n·k ≈ 60 M): several panels, row blocks and
// k blocks at once.
constexpr Shape kLargeShapes[] = {
    {200, 33, 600}, {300, 100, 600}, {200, 257, 257}, {64, 257, 1100},
    {100, 64, 255}, {25, 100, 1100}, {16, 257, 600},
};

// Unoptimized or sanitized: the larger shapes (and most of the model shapes below) would take
// seconds.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VLLM_PACKED_LINEAR_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VLLM_PACKED_LINEAR_TEST_SANITIZED 1
#endif
#if !defined(__OPTIMIZE__) || defined(VLLM_PACKED_LINEAR_TEST_SANITIZED)
constexpr bool kSlowBuild = true;
#else
constexpr bool kSlowBuild = false;
#endif

std::vector<Shape> ReferenceShapes() {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  if (!kSlowBuild) shapes.insert(shapes.end(), std::begin(kLargeShapes), std::end(kLargeShapes));
  return shapes;
}

class PackedLinearTest : public ::testing::TestWithParam<GemmIsa> {};

// Every supported ISA in one test, so each shape's reference is computed once.
TEST(PackedLinearReferenceTest, MatchesDoubleReferenceOnEveryIsa) {
  uint32_t seed = 100;
  int shape_index = 0;
  for (const auto& [m, n, k] : ReferenceShapes()) {
    ++shape_index;
    const std::vector<float> x = Uniform(m * k, seed);
    const std::vector<float> w = Uniform(n * k, seed + 1);
    const std::vector<float> bias = Uniform(n, seed + 2);
    seed += 3;
    const PackedWeight packed = PackedWeight::Pack(w.data(), n, k);
    const Reference ref = ReferenceLinear(x, w, m, n, k);
    for (const auto& [isa, use_bias] : {std::pair{GemmIsa::kPortable, false},
                                        {GemmIsa::kPortable, true},
                                        {GemmIsa::kAvx2, false},
                                        {GemmIsa::kAvx2, true},
                                        {GemmIsa::kAvx512, false},
                                        {GemmIsa::kAvx512, true}}) {
      if (!GemmIsaSupported(isa)) continue;
      // Unoptimized or sanitized builds: one of the two per shape and ISA, in turn (each ISA
      // still sees both on every kind of shape).
      if (kSlowBuild && use_bias != ((shape_index + static_cast<int>(isa)) % 2 == 1)) continue;
      // NaN: y must be overwritten, neither added to nor scaled by 0.
      std::vector<float> y(m * n, kNaN);
      LinearPacked(x.data(), packed, use_bias ? bias.data() : nullptr, y.data(), m, isa);
      for (int64_t i = 0; i < m * n; ++i) {
        const int64_t j = i % n;
        const double want = ref.y[i] + (use_bias ? bias[j] : 0.0);
        const double scale = ref.scale[i] + (use_bias ? std::fabs(bias[j]) : 0.0);
        ASSERT_NEAR(y[i], want, Tolerance(scale))
            << GemmIsaName(isa) << " m=" << m << " n=" << n << " k=" << k << " bias=" << use_bias
            << " row " << i / n << " col " << j;
      }
    }
  }
}

// x, bias and y one float past an aligned start: the kernel may not assume vector alignment.
TEST_P(PackedLinearTest, UnalignedBuffers) {
  const GemmIsa isa = GetParam();
  constexpr int64_t m = 13, n = 37, k = 70;
  const std::vector<float> x = Uniform(m * k + 1, 7);
  const std::vector<float> w = Uniform(n * k, 8);
  const std::vector<float> bias = Uniform(n + 1, 9);
  const std::vector<float> x0(x.begin() + 1, x.end());
  const PackedWeight packed = PackedWeight::Pack(w.data(), n, k);
  const Reference ref = ReferenceLinear(x0, w, m, n, k);
  std::vector<float> y(m * n + 1, kNaN);
  LinearPacked(x.data() + 1, packed, bias.data() + 1, y.data() + 1, m, isa);
  for (int64_t i = 0; i < m * n; ++i) {
    const int64_t j = i % n;
    ASSERT_NEAR(y[i + 1], ref.y[i] + bias[j + 1], Tolerance(ref.scale[i] + std::fabs(bias[j + 1])))
        << GemmIsaName(isa) << " row " << i / n << " col " << j;
  }
  EXPECT_TRUE(std::isnan(y[0]));  // the float before y untouched
}

TEST_P(PackedLinearTest, ZeroInnerDimensionYieldsBiasOrZero) {
  const GemmIsa isa = GetParam();
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  const std::vector<float> empty;  // x [2, 0], w [3, 0]
  const PackedWeight packed = PackedWeight::Pack(empty.data(), 3, 0);
  std::vector<float> y(2 * 3, 7.0f);
  LinearPacked(empty.data(), packed, bias.data(), y.data(), 2, isa);
  EXPECT_EQ(y, (std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f}));
  LinearPacked(empty.data(), packed, nullptr, y.data(), 2, isa);
  EXPECT_EQ(y, std::vector<float>(6, 0.0f));
  // Past one panel: 33 features, every one of them written.
  const std::vector<float> bias33 = Uniform(33, 10);
  const PackedWeight packed33 = PackedWeight::Pack(empty.data(), 33, 0);
  std::vector<float> y33(5 * 33, kNaN);
  LinearPacked(empty.data(), packed33, bias33.data(), y33.data(), 5, isa);
  for (int64_t i = 0; i < 5 * 33; ++i) ASSERT_EQ(y33[i], bias33[i % 33]) << "element " << i;
  LinearPacked(empty.data(), packed33, nullptr, y33.data(), 5, isa);
  EXPECT_EQ(y33, std::vector<float>(5 * 33, 0.0f));
}

TEST_P(PackedLinearTest, ZeroRowsOrFeaturesWriteNothing) {
  const GemmIsa isa = GetParam();
  const std::vector<float> w = Uniform(40 * 9, 11);
  const std::vector<float> bias = Uniform(40, 12);
  const PackedWeight packed = PackedWeight::Pack(w.data(), 40, 9);
  std::vector<float> y = {9.0f};
  LinearPacked(nullptr, packed, bias.data(), y.data(), 0, isa);  // m == 0
  LinearPacked(nullptr, packed, nullptr, y.data(), 0, isa);
  EXPECT_EQ(y[0], 9.0f);
  const std::vector<float> x = Uniform(3 * 9, 13);
  const PackedWeight none = PackedWeight::Pack(w.data(), 0, 9);  // n == 0: y is [3, 0]
  LinearPacked(x.data(), none, nullptr, y.data(), 3, isa);
  EXPECT_EQ(y[0], 9.0f);
}

// The pool splits panels over threads; every element's sum is the same sequence of float
// operations whoever computes it, so 1 and 2 threads agree bit for bit. Every shape has
// n · k >= 32 K (the parallel threshold, gemm_small.cc): many panels, few, past the k block.
TEST_P(PackedLinearTest, SameBitsOnOneAndTwoThreads) {
  const GemmIsa isa = GetParam();
  uint32_t seed = 500;
  for (const Shape& s :
       {Shape{4, 257, 256}, Shape{1, 1376, 256}, Shape{3, 64, 1100}, Shape{13, 33, 1000}}) {
    const std::vector<float> x = Uniform(s.m * s.k, seed);
    const std::vector<float> w = Uniform(s.n * s.k, seed + 1);
    const std::vector<float> bias = Uniform(s.n, seed + 2);
    seed += 3;
    const PackedWeight packed = PackedWeight::Pack(w.data(), s.n, s.k);
    std::vector<float> y1(s.m * s.n, kNaN), y2(s.m * s.n, 5.0f);
    {
      PoolThreads threads(1);
      LinearPacked(x.data(), packed, bias.data(), y1.data(), s.m, isa);
    }
    {
      PoolThreads threads(2);
      LinearPacked(x.data(), packed, bias.data(), y2.data(), s.m, isa);
    }
    EXPECT_TRUE(SameBits(y1, y2)) << GemmIsaName(isa) << " m=" << s.m << " n=" << s.n
                                  << " k=" << s.k;
  }
}

// BF16 storage (kBf16IfExact on weights that are all BF16 values) gives the float32 storage's
// result bit for bit, on the direct path (few rows: BF16 widened in every tile) and the
// widening one (many rows: a panel's k block widened once), with and without bias.
TEST_P(PackedLinearTest, Bf16StorageEqualsFloat32Bits) {
  const GemmIsa isa = GetParam();
  uint32_t seed = 900;
  for (const Shape& s : {Shape{1, 37, 70}, Shape{16, 64, 256}, Shape{33, 100, 600},
                         Shape{200, 45, 513}, Shape{5, 1, 3}}) {
    std::vector<float> w = Uniform(s.n * s.k, seed);
    for (float& f : w) {  // keep the top 16 bits: a BF16 value
      uint32_t u;
      std::memcpy(&u, &f, sizeof(u));
      u &= 0xFFFF0000u;
      std::memcpy(&f, &u, sizeof(u));
    }
    const std::vector<float> x = Uniform(s.m * s.k, seed + 1);
    const std::vector<float> bias = Uniform(s.n, seed + 2);
    seed += 3;
    const PackedWeight f32 = PackedWeight::Pack(w.data(), s.n, s.k);
    const PackedWeight bf16 =
        PackedWeight::Pack(w.data(), s.n, s.k, PackedWeight::Storage::kBf16IfExact);
    ASSERT_FALSE(f32.bf16());
    ASSERT_TRUE(bf16.bf16());
    EXPECT_LT(bf16.bytes(), f32.bytes());
    EXPECT_TRUE(SameBits(bf16.Unpack(), w));
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<float> want(s.m * s.n, kNaN), got(s.m * s.n, 3.0f);
      LinearPacked(x.data(), f32, b, want.data(), s.m, isa);
      LinearPacked(x.data(), bf16, b, got.data(), s.m, isa);
      EXPECT_TRUE(SameBits(want, got)) << GemmIsaName(isa) << " m=" << s.m << " n=" << s.n
                                       << " k=" << s.k << " bias=" << (b != nullptr);
    }
  }
}

// k >= 1024 with many panels per chunk: the kernel packs x per (row block, k block). Against
// the double reference, with 1 and 2 pool threads (chunk sizes differ, so whether a chunk
// packs differs too) and the same bits either way.
TEST_P(PackedLinearTest, PackedRowsPathMatchesReference) {
  const GemmIsa isa = GetParam();
  constexpr int64_t k = 1100;
  // n = 1024: 32 panels, chunks of 4 (2 threads) or 8 (1 thread). Sanitized builds: fewer rows
  // and the narrowest n that still packs (1 thread: chunk 4).
  const int64_t n = kSlowBuild ? 512 : 1024;
  for (const int64_t m :
       kSlowBuild ? std::vector<int64_t>{1, 13} : std::vector<int64_t>{1, 13, 200}) {
    const std::vector<float> x = Uniform(m * k, 40 + static_cast<uint32_t>(m));
    const std::vector<float> w = Uniform(n * k, 41);
    const std::vector<float> bias = Uniform(n, 42);
    const PackedWeight packed = PackedWeight::Pack(w.data(), n, k);
    const Reference ref = ReferenceLinear(x, w, m, n, k);
    std::vector<float> y1(m * n, kNaN), y2(m * n, kNaN);
    {
      PoolThreads threads(1);
      LinearPacked(x.data(), packed, bias.data(), y1.data(), m, isa);
    }
    {
      PoolThreads threads(2);
      LinearPacked(x.data(), packed, bias.data(), y2.data(), m, isa);
    }
    EXPECT_TRUE(SameBits(y1, y2)) << GemmIsaName(isa) << " m=" << m;
    for (int64_t i = 0; i < m * n; ++i) {
      const int64_t j = i % n;
      ASSERT_NEAR(y1[i], ref.y[i] + bias[j], Tolerance(ref.scale[i] + std::fabs(bias[j])))
          << GemmIsaName(isa) << " m=" << m << " row " << i / n << " col " << j;
    }
  }
}

// kBf16IfExact keeps float32 when one weight is not a BF16 value.
TEST(PackedWeightTest, Bf16OnlyWhenExact) {
  std::vector<float> w(40 * 9, 0.5f);
  EXPECT_TRUE(PackedWeight::Pack(w.data(), 40, 9, PackedWeight::Storage::kBf16IfExact).bf16());
  w[17] = 0.1f;  // 0.1 needs more than 8 bits of mantissa
  const PackedWeight p = PackedWeight::Pack(w.data(), 40, 9, PackedWeight::Storage::kBf16IfExact);
  EXPECT_FALSE(p.bf16());
  EXPECT_TRUE(SameBits(p.Unpack(), w));
}

INSTANTIATE_TEST_SUITE_P(Isas, PackedLinearTest, ::testing::ValuesIn(SupportedIsas()),
                         [](const auto& info) { return std::string(GemmIsaName(info.param)); });

// The overload without isa is BestGemmIsa()'s, bit for bit.
TEST(PackedLinearDefaultIsaTest, EqualsBestIsa) {
  EXPECT_TRUE(GemmIsaSupported(BestGemmIsa()));
  uint32_t seed = 700;
  for (const Shape& s :
       {Shape{1, 33, 17}, Shape{13, 100, 257}, Shape{4, 257, 300}, Shape{200, 31, 16}}) {
    const std::vector<float> x = Uniform(s.m * s.k, seed);
    const std::vector<float> w = Uniform(s.n * s.k, seed + 1);
    const std::vector<float> bias = Uniform(s.n, seed + 2);
    seed += 3;
    const PackedWeight packed = PackedWeight::Pack(w.data(), s.n, s.k);
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<float> y_default(s.m * s.n, kNaN), y_best(s.m * s.n, 5.0f);
      LinearPacked(x.data(), packed, b, y_default.data(), s.m);
      LinearPacked(x.data(), packed, b, y_best.data(), s.m, BestGemmIsa());
      EXPECT_TRUE(SameBits(y_default, y_best))
          << "m=" << s.m << " n=" << s.n << " k=" << s.k << " bias=" << (b != nullptr);
    }
  }
}

// ---- Agreement with Linear (small-m kernel up to kLinearSmallMMaxRows, OpenBLAS above) on
// kjv-llama-tiny's projections (hidden 256, intermediate 688, vocab 4096).

// Σ_l |x[i, l] · w[j, l]| ≤ ‖x[i]‖₂ · ‖w[j]‖₂ (Cauchy–Schwarz): a bound on the rounding scale
// that costs O((m + n) · k) instead of another product (≈ 4/3 of Σ|x·w| for uniform inputs).
std::vector<double> RowNorms(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<double> norms(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(a[r * cols + c]) * a[r * cols + c];
    norms[r] = std::sqrt(s);
  }
  return norms;
}

TEST(PackedLinearModelTest, AgreesWithLinearOnModelShapes) {
  struct NamedShape {
    const char* name;
    int64_t n, k;
  };
  const NamedShape shapes[] = {{"qkv", 512, 256},
                               {"o", 256, 256},
                               {"gate_up", 1376, 256},
                               {"down", 256, 688},
                               {"lm_head", 4096, 256}};
  uint32_t seed = 900;
  for (const auto& [name, n, k] : shapes) {
    const std::vector<float> w = Uniform(n * k, seed++);
    const std::vector<double> w_norms = RowNorms(w, n, k);
    const PackedWeight packed = PackedWeight::Pack(w.data(), n, k);
    for (int64_t m : {1, 16, 64, 144}) {
      // Unoptimized or sanitized builds: every shape at m = 1 (Linear's small-m kernel) and
      // o_proj at m = 144 (OpenBLAS); the rest would take seconds there.
      if (kSlowBuild && m > 1 && !(m == 144 && std::strcmp(name, "o") == 0)) continue;
      const std::vector<float> x = Uniform(m * k, seed++);
      const std::vector<double> x_norms = RowNorms(x, m, k);
      std::vector<float> y_linear(m * n, kNaN), y_packed(m * n, kNaN);
      Linear(x.data(), w.data(), nullptr, y_linear.data(), m, n, k);
      LinearPacked(x.data(), packed, nullptr, y_packed.data(), m);
      for (int64_t i = 0; i < m * n; ++i) {
        // Each within Tolerance of the exact product, so within twice it of each other.
        ASSERT_NEAR(y_packed[i], y_linear[i], 2 * Tolerance(x_norms[i / n] * w_norms[i % n]))
            << name << " m=" << m << " n=" << n << " k=" << k << " row " << i / n << " col "
            << i % n;
      }
    }
  }
}

}  // namespace
}  // namespace vllm::kernels::cpu
