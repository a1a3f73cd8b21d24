// The CUDA backend's elementwise / memory ops and GEMM against the CPU reference
// (kernels/cpu), on random inputs over the fixture models' and Llama-3-8B's shapes, in
// float32, float16 and bfloat16. Inputs are rounded to the element type first and the CPU
// runs on those rounded values, so only the GPU's arithmetic and output rounding differ.
// Every test skips itself when no CUDA device is visible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_table.h"
#include "tests/gpu/gpu_test_util.h"

namespace vllm::kernels::cuda {
namespace {

using gpu_test::CudaToCpuKvLayout;
using gpu_test::DeviceBuffer;
using gpu_test::FromF;
using gpu_test::ToF;
using gpu_test::ToFloats;

// ‖out − ref‖ / ‖ref‖ the element type should stay under (output rounding dominates).
template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, __half>) return 2e-3;
  return 1.6e-2;
}

// Random values rounded to T: `typed` for the device, `f` (the same values) for the CPU.
template <typename T>
struct Values {
  std::vector<T> typed;
  std::vector<float> f;
};

template <typename T>
Values<T> RandomValues(size_t n, std::mt19937& rng, float scale = 1.0f, float offset = 0.0f) {
  std::normal_distribution<float> dist(offset, scale);
  Values<T> v;
  v.typed.resize(n);
  v.f.resize(n);
  for (size_t i = 0; i < n; ++i) {
    v.typed[i] = FromF<T>(dist(rng));
    v.f[i] = ToF(v.typed[i]);
  }
  return v;
}

// ‖out − ref‖ / ‖ref‖; infinity when any output is NaN (unwritten or broken).
double RelativeError(const std::vector<float>& out, const std::vector<float>& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(out[i]) != std::isnan(ref[i])) return INFINITY;
    if (std::isnan(ref[i])) continue;
    diff += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

template <typename T>
class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_CUDA_OK(cudaSetDevice(0));
  }
  std::mt19937 rng_{20240607};
};

using gpu_test::ElementTypes;
using gpu_test::TypeNames;
TYPED_TEST_SUITE(CudaOpsTest, ElementTypes, TypeNames);

// (num_tokens, hidden): fixture models, Llama-3-8B, sizes with no 16-byte vector, one token.
const std::vector<std::pair<int64_t, int64_t>> kNormShapes = {
    {1, 64}, {7, 128}, {33, 4096}, {5, 100}, {3, 4100}, {1, 4096}, {129, 64}, {2, 1}};

TYPED_TEST(CudaOpsTest, RmsNormMatchesCpu) {
  using T = TypeParam;
  for (auto [tokens, hidden] : kNormShapes) {
    SCOPED_TRACE(testing::Message() << tokens << "x" << hidden);
    const auto x = RandomValues<T>(tokens * hidden, this->rng_, 2.0f);
    const auto w = RandomValues<T>(hidden, this->rng_, 0.5f, 1.0f);
    std::vector<float> ref(tokens * hidden);
    cpu::RmsNorm(x.f.data(), w.f.data(), ref.data(), tokens, hidden, 1e-5f);
    DeviceBuffer<T> dx(x.typed), dw(w.typed), dout(tokens * hidden);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(RmsNorm(dx.get(), dw.get(), dout.get(), tokens, hidden, 1e-5f, nullptr));
    EXPECT_LT(RelativeError(ToFloats(dout.Download()), ref), Tolerance<T>());
    // In place (out == x).
    ASSERT_CUDA_OK(RmsNorm(dx.get(), dw.get(), dx.get(), tokens, hidden, 1e-5f, nullptr));
    EXPECT_LT(RelativeError(ToFloats(dx.Download()), ref), Tolerance<T>());
  }
}

TYPED_TEST(CudaOpsTest, FusedAddRmsNormMatchesCpu) {
  using T = TypeParam;
  for (auto [tokens, hidden] : kNormShapes) {
    SCOPED_TRACE(testing::Message() << tokens << "x" << hidden);
    const auto x = RandomValues<T>(tokens * hidden, this->rng_);
    const auto res = RandomValues<T>(tokens * hidden, this->rng_, 3.0f);
    const auto w = RandomValues<T>(hidden, this->rng_, 0.5f, 1.0f);
    std::vector<float> ref_x = x.f, ref_res = res.f;
    cpu::FusedAddRmsNorm(ref_x.data(), ref_res.data(), w.f.data(), tokens, hidden, 1e-6f);
    DeviceBuffer<T> dx(x.typed), dres(res.typed), dw(w.typed);
    ASSERT_CUDA_OK(FusedAddRmsNorm(dx.get(), dres.get(), dw.get(), tokens, hidden, 1e-6f, nullptr));
    EXPECT_LT(RelativeError(ToFloats(dres.Download()), ref_res), Tolerance<T>());
    EXPECT_LT(RelativeError(ToFloats(dx.Download()), ref_x), Tolerance<T>());
  }
}

// Qwen3's q/k norm: each head of a strided [tokens, heads, head_dim] block (q or k inside the
// fused qkv rows) normalised in place; the rest of each row is left alone.
TYPED_TEST(CudaOpsTest, HeadRmsNormMatchesCpuAndKeepsTheRestOfTheRow) {
  using T = TypeParam;
  struct Shape {
    int64_t tokens, stride, offset;
    int32_t heads, head_dim;
  };
  // Fixture qwen3 (q: 4 heads of 32 in rows of 256; k at offset 128), Qwen3-8B's k,
  // head_dim without a 16-byte vector, an odd stride.
  const Shape shapes[] = {{7, 256, 0, 4, 32},
                          {7, 256, 128, 2, 32},
                          {5, 6144, 4096, 8, 128},
                          {3, 40, 4, 3, 12},
                          {2, 33, 1, 2, 16}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << s.tokens << " tokens, stride " << s.stride << ", " << s.heads
                                    << "x" << s.head_dim);
    const auto x = RandomValues<T>(s.tokens * s.stride, this->rng_, 2.0f);
    const auto w = RandomValues<T>(s.head_dim, this->rng_, 0.5f, 1.0f);
    std::vector<float> ref = x.f;
    for (int64_t t = 0; t < s.tokens; ++t) {
      float* heads = ref.data() + t * s.stride + s.offset;
      cpu::RmsNorm(heads, w.f.data(), heads, s.heads, s.head_dim, 1e-6f);
    }
    DeviceBuffer<T> dx(x.typed), dw(w.typed);
    ASSERT_CUDA_OK(HeadRmsNorm(dx.get() + s.offset, s.tokens, s.stride, s.heads, s.head_dim,
                               dw.get(), 1e-6f, nullptr));
    const std::vector<float> got = ToFloats(dx.Download());
    EXPECT_LT(RelativeError(got, ref), Tolerance<T>());
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t i = 0; i < s.stride; ++i) {
        if (i >= s.offset && i < s.offset + int64_t{s.heads} * s.head_dim) continue;
        ASSERT_EQ(got[t * s.stride + i], x.f[t * s.stride + i]) << "token " << t << ", " << i;
      }
    }
  }
}

TYPED_TEST(CudaOpsTest, SiluAndMulMatchesCpu) {
  using T = TypeParam;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 64}, {9, 256}, {5, 14336}, {1, 14336}, {3, 37}, {2, 1028}, {64, 344}};
  for (auto [tokens, d] : shapes) {
    SCOPED_TRACE(testing::Message() << tokens << "x" << d);
    auto gate_up = RandomValues<T>(tokens * 2 * d, this->rng_, 3.0f);
    gate_up.typed[0] = FromF<T>(-100.0f);  // e^-x overflows: must give -0, not NaN
    gate_up.f[0] = ToF(gate_up.typed[0]);
    std::vector<float> ref(tokens * d);
    cpu::SiluAndMul(gate_up.f.data(), ref.data(), tokens, d);
    DeviceBuffer<T> din(gate_up.typed), dout(tokens * d);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(SiluAndMul(din.get(), dout.get(), tokens, d, nullptr));
    EXPECT_LT(RelativeError(ToFloats(dout.Download()), ref), Tolerance<T>());
  }
}

// Gemma's (1 + w) norms: the CPU computes them with weights 1 + w (the CPU model's layout).
TYPED_TEST(CudaOpsTest, GemmaNormsMatchCpuWithOnePlusWeight) {
  using T = TypeParam;
  for (auto [tokens, hidden] : kNormShapes) {
    SCOPED_TRACE(testing::Message() << tokens << "x" << hidden);
    const auto x = RandomValues<T>(tokens * hidden, this->rng_, 2.0f);
    const auto res = RandomValues<T>(tokens * hidden, this->rng_, 3.0f);
    const auto w = RandomValues<T>(hidden, this->rng_, 0.3f);  // around 0, as Gemma stores them
    std::vector<float> one_plus_w(hidden);
    for (int64_t i = 0; i < hidden; ++i) one_plus_w[i] = 1.0f + w.f[i];
    std::vector<float> ref(tokens * hidden);
    cpu::RmsNorm(x.f.data(), one_plus_w.data(), ref.data(), tokens, hidden, 1e-6f);
    DeviceBuffer<T> dx(x.typed), dres(res.typed), dw(w.typed), dout(tokens * hidden);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(RmsNorm(dx.get(), dw.get(), dout.get(), tokens, hidden, 1e-6f, nullptr,
                           NormWeight::kGemma));
    EXPECT_LT(RelativeError(ToFloats(dout.Download()), ref), Tolerance<T>());
    std::vector<float> ref_x = x.f, ref_res = res.f;
    cpu::FusedAddRmsNorm(ref_x.data(), ref_res.data(), one_plus_w.data(), tokens, hidden, 1e-6f);
    ASSERT_CUDA_OK(FusedAddRmsNorm(dx.get(), dres.get(), dw.get(), tokens, hidden, 1e-6f, nullptr,
                                   NormWeight::kGemma));
    EXPECT_LT(RelativeError(ToFloats(dres.Download()), ref_res), Tolerance<T>());
    EXPECT_LT(RelativeError(ToFloats(dx.Download()), ref_x), Tolerance<T>());
  }
  // Gemma-3's per-head q/k norm (fixture gemma3: 4 heads of 32 in qkv rows of 256).
  constexpr int64_t kTokens = 7, kStride = 256;
  constexpr int32_t kHeads = 4, kHeadDim = 32;
  const auto x = RandomValues<T>(kTokens * kStride, this->rng_, 2.0f);
  const auto w = RandomValues<T>(kHeadDim, this->rng_, 0.3f);
  std::vector<float> one_plus_w(kHeadDim);
  for (int32_t i = 0; i < kHeadDim; ++i) one_plus_w[i] = 1.0f + w.f[i];
  std::vector<float> ref = x.f;
  for (int64_t t = 0; t < kTokens; ++t) {
    cpu::RmsNorm(ref.data() + t * kStride, one_plus_w.data(), ref.data() + t * kStride, kHeads,
                 kHeadDim, 1e-6f);
  }
  DeviceBuffer<T> dx(x.typed), dw(w.typed);
  ASSERT_CUDA_OK(HeadRmsNorm(dx.get(), kTokens, kStride, kHeads, kHeadDim, dw.get(), 1e-6f, nullptr,
                             NormWeight::kGemma));
  EXPECT_LT(RelativeError(ToFloats(dx.Download()), ref), Tolerance<T>());
}

TYPED_TEST(CudaOpsTest, GeluTanhAndMulMatchesCpu) {
  using T = TypeParam;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 64}, {9, 128}, {5, 9216}, {3, 37}, {64, 344}};
  for (auto [tokens, d] : shapes) {
    SCOPED_TRACE(testing::Message() << tokens << "x" << d);
    auto gate_up = RandomValues<T>(tokens * 2 * d, this->rng_, 3.0f);
    gate_up.typed[0] = FromF<T>(-100.0f);  // tanh saturates: -0, not NaN
    gate_up.f[0] = ToF(gate_up.typed[0]);
    std::vector<float> ref(tokens * d);
    cpu::GeluTanhAndMul(gate_up.f.data(), ref.data(), tokens, d);
    DeviceBuffer<T> din(gate_up.typed), dout(tokens * d);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(GeluTanhAndMul(din.get(), dout.get(), tokens, d, nullptr));
    EXPECT_LT(RelativeError(ToFloats(dout.Download()), ref), Tolerance<T>());
  }
}

TYPED_TEST(CudaOpsTest, SoftCapAndScaleMatchCpu) {
  using T = TypeParam;
  for (int64_t n : {int64_t{1}, int64_t{513}, int64_t{3} * 256000}) {
    SCOPED_TRACE(testing::Message() << n << " elements");
    const auto x = RandomValues<T>(n, this->rng_, 20.0f);
    std::vector<float> ref = x.f;
    cpu::SoftCap(ref.data(), n, 30.0f);
    DeviceBuffer<T> dx(x.typed);
    ASSERT_CUDA_OK(SoftCap(dx.get(), n, 30.0f, nullptr));
    EXPECT_LT(RelativeError(ToFloats(dx.Download()), ref), Tolerance<T>());
    std::vector<float> scaled = x.f;
    cpu::Scale(scaled.data(), n, 8.0f);
    DeviceBuffer<T> ds(x.typed);
    ASSERT_CUDA_OK(Scale(ds.get(), n, 8.0f, nullptr));
    EXPECT_LT(RelativeError(ToFloats(ds.Download()), scaled), Tolerance<T>());
  }
  DeviceBuffer<T> one(std::vector<T>{FromF<T>(1.0f)});
  EXPECT_EQ(SoftCap(one.get(), 1, 0.0f, nullptr), cudaErrorInvalidValue);
}

struct RopeShape {
  int64_t tokens;
  int32_t q_heads, kv_heads, head_dim;
  cpu::RopeScaling scaling;
  double theta;
};

TYPED_TEST(CudaOpsTest, RotaryEmbeddingMatchesCpu) {
  using T = TypeParam;
  cpu::RopeScaling llama3{cpu::RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 8192};
  const std::vector<RopeShape> shapes = {
      {1, 4, 2, 16, {}, 10000.0},
      {7, 4, 2, 32, {}, 10000.0},
      {33, 32, 8, 128, llama3, 5e5},
      {5, 3, 1, 6, {}, 10000.0},
  };
  constexpr int64_t kMaxPosition = 4096;
  for (const RopeShape& s : shapes) {
    SCOPED_TRACE(testing::Message() << s.tokens << " tokens, head_dim " << s.head_dim);
    auto rope = cpu::RotaryEmbedding::Create(s.head_dim, s.theta, kMaxPosition, s.scaling);
    ASSERT_TRUE(rope.ok()) << rope.status();
    DeviceBuffer<float> table(RopeCosSinTable(*rope));
    std::vector<int32_t> positions(s.tokens);
    std::uniform_int_distribution<int32_t> pos_dist(0, kMaxPosition - 1);
    for (auto& p : positions) p = pos_dist(this->rng_);
    positions[0] = kMaxPosition - 1;
    const int64_t q_row = int64_t{s.q_heads} * s.head_dim, k_row = int64_t{s.kv_heads} * s.head_dim;
    const auto q = RandomValues<T>(s.tokens * q_row, this->rng_);
    const auto k = RandomValues<T>(s.tokens * k_row, this->rng_);
    std::vector<float> ref_q = q.f, ref_k = k.f;
    rope->Apply(positions.data(), s.tokens, ref_q.data(), s.q_heads, ref_k.data(), s.kv_heads);
    DeviceBuffer<int32_t> dpos(positions);
    DeviceBuffer<T> dq(q.typed), dk(k.typed);
    ASSERT_CUDA_OK(RotaryEmbedding(dpos.get(), s.tokens, dq.get(), q_row, s.q_heads, dk.get(),
                                   k_row, s.kv_heads, s.head_dim, table.get(), kMaxPosition,
                                   nullptr));
    const double tol = (std::is_same_v<T, float>) ? 1e-6 : Tolerance<T>();
    EXPECT_LT(RelativeError(ToFloats(dq.Download()), ref_q), tol);
    EXPECT_LT(RelativeError(ToFloats(dk.Download()), ref_k), tol);
  }
}

TYPED_TEST(CudaOpsTest, ReshapeAndCacheMatchesCpu) {
  using T = TypeParam;
  struct Shape {
    int32_t kv_heads, head_dim, block_size;
  };
  for (const Shape& s : std::vector<Shape>{{2, 16, 16}, {2, 32, 16}, {8, 128, 16}, {3, 6, 4}}) {
    SCOPED_TRACE(testing::Message() << s.kv_heads << " heads x " << s.head_dim);
    constexpr int64_t kNumBlocks = 6;
    const int64_t row = int64_t{s.kv_heads} * s.head_dim;
    const int64_t num_slots = kNumBlocks * s.block_size;
    // Slots at block boundaries, a padding token, and one token at the very end.
    const std::vector<int64_t> slots = {0,
                                        s.block_size - 1,
                                        s.block_size,
                                        -1,
                                        2 * s.block_size + 1,
                                        num_slots - 1,
                                        3 * s.block_size};
    const int64_t tokens = static_cast<int64_t>(slots.size());
    const auto k = RandomValues<T>(tokens * row, this->rng_);
    const auto v = RandomValues<T>(tokens * row, this->rng_);
    const auto kc = RandomValues<T>(num_slots * row, this->rng_);
    const auto vc = RandomValues<T>(num_slots * row, this->rng_);
    // The CUDA cache is [block][slot][head][dim]; the CPU's has its own layout (cpu/ops.h):
    // compare in the CPU's.
    const auto cpu_layout = [&](const std::vector<float>& cuda, bool key) {
      return CudaToCpuKvLayout(cuda, key, s.kv_heads, s.head_dim, s.block_size);
    };
    std::vector<float> ref_kc = cpu_layout(kc.f, true), ref_vc = cpu_layout(vc.f, false);
    cpu::ReshapeAndCache(k.f.data(), v.f.data(), ref_kc.data(), ref_vc.data(), slots.data(), tokens,
                         s.kv_heads, s.head_dim, s.block_size);
    DeviceBuffer<T> dk(k.typed), dv(v.typed), dkc(kc.typed), dvc(vc.typed);
    DeviceBuffer<int64_t> dslots(slots);
    ASSERT_CUDA_OK(ReshapeAndCache(dk.get(), dv.get(), dkc.get(), dvc.get(), dslots.get(), tokens,
                                   s.kv_heads, s.head_dim, s.block_size, nullptr));
    EXPECT_EQ(cpu_layout(ToFloats(dkc.Download()), true), ref_kc);  // a copy: exact
    EXPECT_EQ(cpu_layout(ToFloats(dvc.Download()), false), ref_vc);
  }
}

TYPED_TEST(CudaOpsTest, EmbeddingMatchesCpu) {
  using T = TypeParam;
  struct Shape {
    int64_t vocab_start, vocab_size, hidden, full_vocab;
  };
  // The fixture's whole vocabulary; a Llama-3-8B tensor-parallel shard (hidden 4096); odd rows.
  for (const Shape& s :
       std::vector<Shape>{{0, 512, 64, 512}, {64128, 1024, 4096, 128256}, {0, 300, 37, 300}}) {
    SCOPED_TRACE(testing::Message() << s.vocab_size << " x " << s.hidden);
    const auto table = RandomValues<T>(s.vocab_size * s.hidden, this->rng_);
    std::uniform_int_distribution<int32_t> id_dist(0, static_cast<int32_t>(s.full_vocab) - 1);
    std::vector<int32_t> ids(40);
    for (auto& id : ids) id = id_dist(this->rng_);
    ids[0] = static_cast<int32_t>(s.vocab_start);
    ids[1] = static_cast<int32_t>(s.vocab_start + s.vocab_size - 1);
    ids[2] = -1;
    ids[3] = static_cast<int32_t>(s.vocab_start + s.vocab_size);
    for (int i = 4; i < 20; ++i) {
      ids[i] = static_cast<int32_t>(s.vocab_start) + id_dist(this->rng_) % s.vocab_size;
    }
    const int64_t tokens = static_cast<int64_t>(ids.size());
    std::vector<float> ref(tokens * s.hidden);
    cpu::Embedding(ids.data(), tokens, table.f.data(), s.vocab_start, s.vocab_size, s.hidden,
                   ref.data());
    DeviceBuffer<T> dtable(table.typed), dout(tokens * s.hidden);
    DeviceBuffer<int32_t> dids(ids);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(Embedding(dids.get(), tokens, dtable.get(), s.vocab_start, s.vocab_size,
                             s.hidden, dout.get(), nullptr));
    EXPECT_EQ(ToFloats(dout.Download()), ref);
  }
}

TYPED_TEST(CudaOpsTest, ArgmaxMatchesCpuWithTiesToLowestId) {
  using T = TypeParam;
  for (int64_t vocab : {512, 128256, 1000, 1}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    constexpr int64_t kRows = 9;
    auto logits = RandomValues<T>(kRows * vocab, this->rng_, 3.0f);
    // Row 1: a tie for the maximum far apart; row 2: every logit equal.
    if (vocab > 10) {
      const T big = FromF<T>(50.0f);
      logits.typed[vocab + vocab - 3] = big;
      logits.typed[vocab + 5] = big;
      for (int64_t i = 0; i < vocab; ++i) logits.typed[2 * vocab + i] = FromF<T>(1.0f);
    }
    logits.f = ToFloats(logits.typed);
    DeviceBuffer<T> dl(logits.typed);
    DeviceBuffer<int32_t> dout(kRows);
    ASSERT_CUDA_OK(ArgmaxRows(dl.get(), kRows, vocab, dout.get(), nullptr));
    const std::vector<int32_t> got = dout.Download();
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<float> row(logits.f.begin() + r * vocab, logits.f.begin() + (r + 1) * vocab);
      EXPECT_EQ(got[r],
                cpu::SampleRow(row.data(), vocab, cpu::SamplingRow{.temperature = 0.0f}, 0.0))
          << "row " << r;
    }
    if (vocab > 10) {
      EXPECT_EQ(got[1], 5);
      EXPECT_EQ(got[2], 0);
    }
  }
}

// Whether `token` is a defensible draw for (filtered row, u): the CPU's inverse-CDF
// interval of `token` lies within `slack` (relative to the total mass) of u · total. The CPU
// leaves the filtered, scaled logits in `filtered` (-inf for dropped tokens).
bool NearTie(const std::vector<float>& filtered, int32_t token, double u, double slack) {
  if (token < 0 || token >= static_cast<int32_t>(filtered.size())) return false;
  if (std::isinf(filtered[token])) return false;
  const float max_logit = *std::max_element(filtered.begin(), filtered.end());
  std::vector<std::pair<float, int32_t>> c;
  for (size_t i = 0; i < filtered.size(); ++i) {
    if (!std::isinf(filtered[i]))
      c.push_back({std::exp(filtered[i] - max_logit), static_cast<int32_t>(i)});
  }
  std::sort(c.begin(), c.end(), [](auto a, auto b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  double total = 0.0;
  for (auto& x : c) total += x.first;
  double cum = 0.0;
  for (auto& x : c) {
    const double before = cum;
    cum += x.first;
    if (x.second == token) {
      return u * total >= before - slack * total && u * total <= cum + slack * total;
    }
  }
  return false;
}

TYPED_TEST(CudaOpsTest, SamplerMatchesCpuSampleRow) {
  using T = TypeParam;
  const std::vector<cpu::SamplingRow> settings = {
      {.temperature = 1.0f},
      {.temperature = 0.7f, .top_k = 50},
      {.temperature = 1.0f, .top_p = 0.9f},
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.02f},
      {.temperature = 1.3f, .min_p = 0.1f},
      {.temperature = 0.0f},
      {.temperature = 1.0f, .top_k = 1},
      {.temperature = 0.5f, .top_p = 0.5f},
  };
  for (int64_t vocab : {512, 128256, 77}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int64_t rows = vocab > 1000 ? 16 : 64;
    const auto logits = RandomValues<T>(rows * vocab, this->rng_, 2.5f);
    std::vector<SamplingParams> params(rows);
    std::vector<double> u(rows);
    std::uniform_real_distribution<double> u_dist(0.0, 1.0);
    for (int64_t r = 0; r < rows; ++r) {
      const cpu::SamplingRow& s = settings[r % settings.size()];
      params[r] = {s.temperature, s.top_k, s.top_p, s.min_p};
      u[r] = r == 1 ? 0.999999999 : u_dist(this->rng_);
    }
    DeviceBuffer<T> dl(logits.typed);
    DeviceBuffer<SamplingParams> dparams(params);
    DeviceBuffer<double> du(u);
    DeviceBuffer<int32_t> dout(rows);
    ASSERT_CUDA_OK(SampleRows(dl.get(), rows, vocab, dparams.get(), du.get(), dout.get(), nullptr));
    const std::vector<int32_t> got = dout.Download();
    int exact = 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> row(logits.f.begin() + r * vocab, logits.f.begin() + (r + 1) * vocab);
      const int32_t want = cpu::SampleRow(row.data(), vocab, settings[r % settings.size()], u[r]);
      if (got[r] == want) {
        ++exact;
        continue;
      }
      // Only a float near-tie may separate the two backends.
      EXPECT_TRUE(NearTie(row, got[r], u[r], 1e-4))
          << "row " << r << ": GPU " << got[r] << ", CPU " << want;
    }
    EXPECT_GE(exact, rows - rows / 16) << "too many near-tie differences";
    // Same inputs, same tokens.
    ASSERT_CUDA_OK(SampleRows(dl.get(), rows, vocab, dparams.get(), du.get(), dout.get(), nullptr));
    EXPECT_EQ(dout.Download(), got);
  }
}

template <typename T>
GemmDType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return GemmDType::kFloat32;
  if constexpr (std::is_same_v<T, __half>) return GemmDType::kFloat16;
  return GemmDType::kBFloat16;
}

// One linear-layer case: random x [m, k], w [n, k] and bias [n] on the host and the device,
// the CPU's y = x · wᵀ (+ bias), and a poisoned device y.
template <typename T>
struct LinearCase {
  LinearCase(int64_t m_, int64_t n_, int64_t k_, bool bias_, std::mt19937& rng)
      : m(m_),
        n(n_),
        k(k_),
        bias(bias_),
        x(RandomValues<T>(m * k, rng)),
        w(RandomValues<T>(n * k, rng, 0.05f)),
        b(RandomValues<T>(n, rng)),
        ref(m * n),
        dx(x.typed),
        dw(w.typed),
        db(b.typed),
        dy(m * n) {
    cpu::Linear(x.f.data(), w.f.data(), bias ? b.f.data() : nullptr, ref.data(), m, n, k);
  }
  const void* bias_ptr() const { return bias ? db.get() : nullptr; }
  double Error() const { return RelativeError(ToFloats(dy.Download()), ref); }

  int64_t m, n, k;
  bool bias;
  Values<T> x, w, b;
  std::vector<float> ref;
  DeviceBuffer<T> dx, dw, db, dy;
};

TYPED_TEST(CudaOpsTest, GemmMatchesCpuLinear) {
  using T = TypeParam;
  auto gemm = CublasLtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  struct Shape {
    int64_t m, n, k;
    bool bias;
  };
  // Fixture projections, Llama-3-8B's qkv / o / gate_up / down, odd sizes, one token.
  const std::vector<Shape> shapes = {{1, 192, 64, false},     {7, 512, 128, true},
                                     {1, 6144, 4096, false},  {17, 4096, 4096, true},
                                     {5, 28672, 4096, false}, {64, 4096, 14336, false},
                                     {3, 40, 24, true},       {128, 512, 64, false}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k);
    LinearCase<T> c(s.m, s.n, s.k, s.bias, this->rng_);
    ASSERT_CUDA_OK(c.dy.Poison());
    for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the cached plan
      ASSERT_TRUE((*gemm)
                      ->Linear(DTypeOf<T>(), c.dx.get(), c.dw.get(), c.bias_ptr(), c.dy.get(), s.m,
                               s.n, s.k, nullptr)
                      .ok());
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      const double tol = (std::is_same_v<T, float>) ? 1e-5 : Tolerance<T>();
      EXPECT_LT(c.Error(), tol);
    }
  }
  EXPECT_EQ((*gemm)->num_cached_plans(), shapes.size());
  EXPECT_FALSE(
      (*gemm)->Linear(DTypeOf<T>(), nullptr, nullptr, nullptr, nullptr, 2, 2, 0, nullptr).ok());
}

// The decode GEMV that CublasLtGemm's tuning may pick (m <= 8, half types): against the CPU
// linear on shapes that exercise the unrolled loop, its remainder, odd n and the bias.
TYPED_TEST(CudaOpsTest, SkinnyGemvMatchesCpuLinear) {
  using T = TypeParam;
  if constexpr (std::is_same_v<T, float>) {
    EXPECT_FALSE(SkinnyGemvSupports(GemmDType::kFloat32, 1, 8, 8));
    EXPECT_EQ(
        LaunchSkinnyGemv(GemmDType::kFloat32, nullptr, nullptr, nullptr, nullptr, 1, 8, 8, nullptr),
        cudaErrorInvalidValue);
  } else {
    EXPECT_FALSE(SkinnyGemvSupports(DTypeOf<T>(), 9, 8, 8));   // m too large
    EXPECT_FALSE(SkinnyGemvSupports(DTypeOf<T>(), 1, 8, 12));  // rows not 16-byte aligned
    struct Shape {
      int64_t m, n, k;
      bool bias;
    };
    const std::vector<Shape> shapes = {
        {1, 13, 8, false},       {2, 1000, 24, true},   {3, 97, 264, false},
        {4, 4096, 4096, true},   {5, 77, 1032, false},  {6, 130, 2056, true},
        {7, 4096, 14336, false}, {8, 6144, 4096, true}, {1, 128256 / 16, 4096, false}};
    for (const Shape& s : shapes) {
      SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k);
      ASSERT_TRUE(SkinnyGemvSupports(DTypeOf<T>(), s.m, s.n, s.k));
      LinearCase<T> c(s.m, s.n, s.k, s.bias, this->rng_);
      ASSERT_CUDA_OK(c.dy.Poison());
      ASSERT_CUDA_OK(LaunchSkinnyGemv(DTypeOf<T>(), c.dx.get(), c.dw.get(), c.bias_ptr(),
                                      c.dy.get(), s.m, s.n, s.k, nullptr));
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_LT(c.Error(), Tolerance<T>());
    }
  }
}

// (tokens, experts, k, renormalize): the fixtures (8 / top-2, 4 / top-2), Qwen3-30B-A3B
// (128 / top-8), an expert count that is no multiple of the warp, k == num_experts.
struct MoeShape {
  int64_t tokens;
  int32_t experts, k;
  bool renormalize;
};
const std::vector<MoeShape> kMoeShapes = {
    {1, 8, 2, false}, {33, 8, 2, true}, {7, 128, 8, true}, {5, 60, 4, false}, {3, 4, 4, true}};

TYPED_TEST(CudaOpsTest, MoeTopKSoftmaxMatchesCpuDensely) {
  using T = TypeParam;
  for (const MoeShape& s : kMoeShapes) {
    SCOPED_TRACE(testing::Message() << s.tokens << "x" << s.experts << " top-" << s.k);
    const auto logits = RandomValues<T>(s.tokens * s.experts, this->rng_, 2.0f);
    std::vector<int32_t> ids(s.tokens * s.k);
    std::vector<float> top(s.tokens * s.k);
    cpu::TopKSoftmax(logits.f.data(), s.tokens, s.experts, s.k, s.renormalize, ids.data(),
                     top.data());
    std::vector<float> ref(s.tokens * s.experts, 0.0f);
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int32_t j = 0; j < s.k; ++j) ref[t * s.experts + ids[t * s.k + j]] = top[t * s.k + j];
    }
    DeviceBuffer<T> dlogits(logits.typed);
    DeviceBuffer<float> dweights(s.tokens * s.experts);
    ASSERT_CUDA_OK(dweights.Poison());
    ASSERT_CUDA_OK(MoeTopKSoftmax(dlogits.get(), s.tokens, s.experts, s.k, s.renormalize,
                                  dweights.get(), nullptr));
    const std::vector<float> got = dweights.Download();
    for (size_t i = 0; i < ref.size(); ++i) {
      // The same experts (ties go to the lower id on both), weights to float rounding.
      ASSERT_EQ(got[i] == 0.0f, ref[i] == 0.0f) << "element " << i;
      EXPECT_NEAR(got[i], ref[i], 1e-6f + 1e-5f * ref[i]) << "element " << i;
    }
  }
  DeviceBuffer<T> dlogits(8);
  DeviceBuffer<float> dweights(8);
  EXPECT_EQ(MoeTopKSoftmax(dlogits.get(), 1, 8, 9, true, dweights.get(), nullptr),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// The experts' outputs summed with cpu::FusedMoe's arithmetic (product, then sum, in
// ascending expert order) and rows a token did not route to left alone, even NaN ones.
TYPED_TEST(CudaOpsTest, MoeAccumulateAndFinalizeMatchCpu) {
  using T = TypeParam;
  const int64_t tokens = 9, hidden = 100;
  const int32_t experts = 4;
  std::vector<float> weights(tokens * experts, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    weights[t * experts + t % experts] = 0.75f;
    weights[t * experts + (t + 1) % experts] = 0.25f + 0.01f * static_cast<float>(t);
  }
  std::vector<float> ref(tokens * hidden, 0.0f);
  DeviceBuffer<float> dweights(weights), dacc(tokens * hidden);
  ASSERT_CUDA_OK(cudaMemset(dacc.get(), 0, tokens * hidden * sizeof(float)));
  for (int32_t e = 0; e < experts; ++e) {
    auto y = RandomValues<T>(tokens * hidden, this->rng_, 1.5f);
    for (int64_t t = 0; t < tokens; ++t) {
      const float w = weights[t * experts + e];
      if (w == 0.0f) {
        y.typed[t * hidden] = FromF<T>(NAN);  // never read for an unrouted row
        continue;
      }
      for (int64_t j = 0; j < hidden; ++j) ref[t * hidden + j] += w * y.f[t * hidden + j];
    }
    DeviceBuffer<T> dy(y.typed);
    ASSERT_CUDA_OK(
        MoeAccumulate(dy.get(), dweights.get(), experts, e, tokens, hidden, dacc.get(), nullptr));
  }
  const std::vector<float> acc = dacc.Download();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(acc[i], ref[i]) << "element " << i;
  DeviceBuffer<T> dout(tokens * hidden);
  ASSERT_CUDA_OK(dout.Poison());
  ASSERT_CUDA_OK(MoeFinalize(dacc.get(), tokens * hidden, dout.get(), nullptr));
  const std::vector<T> out = dout.Download();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(ToF(out[i]), ToF(FromF<T>(ref[i]))) << i;
}

// Qwen2-MoE's shared_expert_gate: sigmoid of the dot product rounded to T.
TYPED_TEST(CudaOpsTest, MoeSharedExpertGateMatchesCpu) {
  using T = TypeParam;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 64}, {9, 2048}, {4, 37}};
  for (auto [tokens, hidden] : shapes) {
    SCOPED_TRACE(testing::Message() << tokens << "x" << hidden);
    const auto x = RandomValues<T>(tokens * hidden, this->rng_, 1.0f);
    const auto gate = RandomValues<T>(hidden, this->rng_, 0.1f);
    std::vector<float> logit(tokens);
    cpu::Linear(x.f.data(), gate.f.data(), nullptr, logit.data(), tokens, 1, hidden);
    DeviceBuffer<T> dx(x.typed), dgate(gate.typed);
    DeviceBuffer<float> dout(tokens);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(MoeSharedExpertGate(dx.get(), dgate.get(), tokens, hidden, dout.get(), nullptr));
    const std::vector<float> got = dout.Download();
    for (int64_t t = 0; t < tokens; ++t) {
      const float want = 1.0f / (1.0f + std::exp(-ToF(FromF<T>(logit[t]))));
      EXPECT_NEAR(got[t], want, 4 * Tolerance<T>()) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace vllm::kernels::cuda
