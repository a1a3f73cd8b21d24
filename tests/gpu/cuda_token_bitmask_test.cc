// kernels::cuda::ApplyTokenBitmask against kernels::cpu::ApplyTokenBitmask: random logits
// rows of Llama-2 (32000), odd (32001: a partial last word) and Llama-3 (128256)
// vocabularies in float32, float16 and bfloat16; mask rows sparse, dense, full, empty, one
// token at the end, and garbage only past the vocabulary (which allows nothing); the rows
// they constrain given in a shuffled index array with gaps, so unconstrained rows between them
// must come back untouched. Every test skips itself when no CUDA device is visible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace vllm::kernels::cuda {
namespace {

using gpu_test::DeviceBuffer;
using gpu_test::FromF;
using gpu_test::ToFloats;

template <typename T>
class CudaTokenBitmaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_CUDA_OK(cudaSetDevice(0));
  }
  std::mt19937 rng_{20250611};
};

using gpu_test::ElementTypes;
using gpu_test::TypeNames;
TYPED_TEST_SUITE(CudaTokenBitmaskTest, ElementTypes, TypeNames);

enum class MaskKind { kSparse, kDense, kFull, kEmpty, kLastTokenOnly, kTailGarbageOnly };
constexpr MaskKind kKinds[] = {
    MaskKind::kSparse,        MaskKind::kDense,  MaskKind::kFull,           MaskKind::kEmpty,
    MaskKind::kLastTokenOnly, MaskKind::kSparse, MaskKind::kTailGarbageOnly};

// One mask row of `words` words for `vocab` tokens.
std::vector<int32_t> MakeMask(MaskKind kind, int64_t vocab, int64_t words, std::mt19937& rng) {
  std::vector<uint32_t> m(words, 0);
  auto set = [&m](int64_t token) { m[token / 32] |= 1u << (token % 32); };
  std::bernoulli_distribution sparse(0.01), dense(0.5);
  switch (kind) {
    case MaskKind::kSparse:
    case MaskKind::kDense:
      for (int64_t t = 0; t < vocab; ++t) {
        if (kind == MaskKind::kSparse ? sparse(rng) : dense(rng)) set(t);
      }
      set(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));  // never empty
      break;
    case MaskKind::kFull:
      std::fill(m.begin(), m.end(), 0xffffffffu);  // past-the-vocabulary bits set too
      break;
    case MaskKind::kEmpty:
      break;
    case MaskKind::kLastTokenOnly:
      set(vocab - 1);
      break;
    case MaskKind::kTailGarbageOnly:
      if (vocab % 32 != 0) m.back() = ~((1u << (vocab % 32)) - 1);
      break;
  }
  std::vector<int32_t> out(words);
  for (int64_t w = 0; w < words; ++w) out[w] = static_cast<int32_t>(m[w]);
  return out;
}

TYPED_TEST(CudaTokenBitmaskTest, MatchesCpuOnIndexedRows) {
  using T = TypeParam;
  for (int64_t vocab : {32000, 32001, 128256, 77}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    const int64_t words = (vocab + 31) / 32;
    constexpr int64_t kMasks = 7;
    constexpr int64_t kRows = 2 * kMasks + 3;
    // Distinct logits rows in shuffled order, with unconstrained rows between them.
    std::vector<int32_t> rows(kRows);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), this->rng_);
    rows.resize(kMasks);
    std::vector<int32_t> bitmask;
    for (int64_t i = 0; i < kMasks; ++i) {
      const std::vector<int32_t> m = MakeMask(kKinds[i], vocab, words, this->rng_);
      bitmask.insert(bitmask.end(), m.begin(), m.end());
    }
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<T> logits(kRows * vocab);
    for (T& x : logits) x = FromF<T>(dist(this->rng_));
    std::vector<float> want = ToFloats(logits);
    int applied = 0;
    for (int64_t i = 0; i < kMasks; ++i) {
      applied +=
          cpu::ApplyTokenBitmask(want.data() + rows[i] * vocab, vocab, bitmask.data() + i * words);
    }
    // The empty and the garbage-only rows allow nothing and are left as they are.
    EXPECT_EQ(applied, kMasks - 2);

    DeviceBuffer<T> dl(logits);
    DeviceBuffer<int32_t> dmask(bitmask), drows(rows);
    ASSERT_CUDA_OK(ApplyTokenBitmask(dl.get(), vocab, dmask.get(), drows.get(), kMasks, nullptr));
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = ToFloats(dl.Download());
    for (int64_t r = 0; r < kRows; ++r) {
      int64_t mismatches = 0, first = -1;
      for (int64_t t = 0; t < vocab; ++t) {
        if (got[r * vocab + t] != want[r * vocab + t]) {
          if (first < 0) first = t;
          ++mismatches;
        }
      }
      EXPECT_EQ(mismatches, 0) << "logits row " << r << ", first at token " << first;
    }
  }
}

TYPED_TEST(CudaTokenBitmaskTest, OnlyAllowedTokensSurviveAndNothingIsANoOp) {
  using T = TypeParam;
  constexpr int64_t kVocab = 128256;
  const int64_t words = (kVocab + 31) / 32;
  // One logits row, one mask allowing tokens 3, 31, 32 and the last: every other is -inf.
  std::vector<uint32_t> bits(words, 0);
  for (int64_t t : {int64_t{3}, int64_t{31}, int64_t{32}, kVocab - 1}) bits[t / 32] |= 1u << t % 32;
  std::vector<int32_t> mask(bits.begin(), bits.end());
  std::vector<T> logits(kVocab, FromF<T>(1.5f));
  DeviceBuffer<T> dl(logits);
  DeviceBuffer<int32_t> dmask(mask), drow(std::vector<int32_t>{0});
  // No mask rows: nothing launched, nothing changed.
  ASSERT_CUDA_OK(ApplyTokenBitmask(dl.get(), kVocab, dmask.get(), drow.get(), 0, nullptr));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(ToFloats(dl.Download()), ToFloats(logits));
  ASSERT_CUDA_OK(ApplyTokenBitmask(dl.get(), kVocab, dmask.get(), drow.get(), 1, nullptr));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = ToFloats(dl.Download());
  int64_t finite = 0;
  for (int64_t t = 0; t < kVocab; ++t) {
    if (got[t] == 1.5f) {
      ++finite;
      EXPECT_TRUE(t == 3 || t == 31 || t == 32 || t == kVocab - 1) << "token " << t;
    } else {
      EXPECT_TRUE(std::isinf(got[t]) && got[t] < 0) << "token " << t << ": " << got[t];
    }
  }
  EXPECT_EQ(finite, 4);
}

}  // namespace
}  // namespace vllm::kernels::cuda
