// Small-m GEMM (gemm_small.h) and the packed-weight GEMM (packed_linear.h): the per-ISA
// register tiles (gemm_small_tile.inc, included once per ISA below), the run-time dispatch,
// and the split over the kernel thread pool.
#include "kernels/cpu/gemm_small.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VLLM_GEMM_X86 1
#else
#define VLLM_GEMM_X86 0
#endif

namespace vllm::kernels::cpu {
namespace {

// BF16 is the top half of a float32: widening is exact.
inline float WeightToFloat(float w) { return w; }
inline float WeightToFloat(uint16_t w) {
  const uint32_t bits = static_cast<uint32_t>(w) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

using ColumnsFn = void (*)(const float* x, const void* w, const float* bias, float* y, int64_t m,
                           int64_t n, int64_t k, int64_t kc, int64_t n0, int64_t n1);

// Portable: 4 floats (the x86-64 baseline SSE register; any target's vector extension).
namespace portable {
#define VLLM_GEMM_TARGET
typedef float Vec __attribute__((vector_size(16)));
constexpr int kW = 4, kMR = 2, kNR = 4;
inline Vec Zero() { return Vec{}; }
inline Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline Vec LoadBf16(const uint16_t* p) {
  Vec v{};
  for (int i = 0; i < kW; ++i) v[i] = WeightToFloat(p[i]);
  return v;
}
inline Vec Fma(Vec a, Vec b, Vec acc) { return a * b + acc; }
inline float Sum(Vec v) { return (v[0] + v[1]) + (v[2] + v[3]); }
inline Vec Broadcast(float f) { return Vec{f, f, f, f}; }
inline Vec Add(Vec a, Vec b) { return a + b; }
inline void Store(float* p, Vec v) { std::memcpy(p, &v, sizeof(v)); }
// 8 accumulators and 8 weight vectors per row of a packed panel.
constexpr int kPackedMR = 1;
#include "kernels/cpu/gemm_small_tile.inc"
#undef VLLM_GEMM_TARGET
}  // namespace portable

#if VLLM_GEMM_X86
namespace avx2 {
#define VLLM_GEMM_TARGET __attribute__((target("avx2,fma")))
using Vec = __m256;
// 16 ymm registers: 8 accumulators, 4 weight vectors, 1 activation vector.
constexpr int kW = 8, kMR = 2, kNR = 4;
VLLM_GEMM_TARGET inline Vec Zero() { return _mm256_setzero_ps(); }
VLLM_GEMM_TARGET inline Vec Load(const float* p) { return _mm256_loadu_ps(p); }
VLLM_GEMM_TARGET inline Vec LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
VLLM_GEMM_TARGET inline Vec Fma(Vec a, Vec b, Vec acc) { return _mm256_fmadd_ps(a, b, acc); }
VLLM_GEMM_TARGET inline Vec Broadcast(float f) { return _mm256_set1_ps(f); }
VLLM_GEMM_TARGET inline Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
VLLM_GEMM_TARGET inline void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
// Packed panels: 2 rows × 4 registers of accumulators, 4 weight vectors, 1 broadcast.
constexpr int kPackedMR = 2;
VLLM_GEMM_TARGET inline float Sum(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#include "kernels/cpu/gemm_small_tile.inc"
#undef VLLM_GEMM_TARGET
}  // namespace avx2

namespace avx512 {
#define VLLM_GEMM_TARGET __attribute__((target("avx512f,avx2,fma")))
using Vec = __m512;
// 32 zmm registers: 16 accumulators, 4 weight vectors, 1 activation vector.
constexpr int kW = 16, kMR = 4, kNR = 4;
VLLM_GEMM_TARGET inline Vec Zero() { return _mm512_setzero_ps(); }
VLLM_GEMM_TARGET inline Vec Load(const float* p) { return _mm512_loadu_ps(p); }
VLLM_GEMM_TARGET inline Vec LoadBf16(const uint16_t* p) {
  // The maskz forms: GCC 12 warns (maybe-uninitialized) inside the plain forms' headers.
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
}
VLLM_GEMM_TARGET inline Vec Fma(Vec a, Vec b, Vec acc) { return _mm512_fmadd_ps(a, b, acc); }
VLLM_GEMM_TARGET inline Vec Broadcast(float f) { return _mm512_set1_ps(f); }
VLLM_GEMM_TARGET inline Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
VLLM_GEMM_TARGET inline void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
// Packed panels: 12 rows × 2 registers of accumulators, 2 weight vectors, 1 broadcast.
constexpr int kPackedMR = 12;
VLLM_GEMM_TARGET inline float Sum(Vec v) {
  // Halves by memcpy (compiled to vextractf): the intrinsics trip the same warning.
  __m256 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  return avx2::Sum(_mm256_add_ps(lo, hi));
}
#include "kernels/cpu/gemm_small_tile.inc"
#undef VLLM_GEMM_TARGET
}  // namespace avx512
#endif  // VLLM_GEMM_X86

ColumnsFn Columns(GemmIsa isa, bool bf16) {
  switch (isa) {
#if VLLM_GEMM_X86
    case GemmIsa::kAvx512:
      return bf16 ? &avx512::AccumulateColumnsBf16 : &avx512::AccumulateColumnsF32;
    case GemmIsa::kAvx2:
      return bf16 ? &avx2::AccumulateColumnsBf16 : &avx2::AccumulateColumnsF32;
#endif
    default:
      return bf16 ? &portable::AccumulateColumnsBf16 : &portable::AccumulateColumnsF32;
  }
}

using PackedColumnsFn = void (*)(const float* x, const void* panels, const float* bias, float* y,
                                 int64_t m, int64_t n, int64_t k, int64_t p0, int64_t p1);

PackedColumnsFn PackedColumns(GemmIsa isa, bool bf16) {
  switch (isa) {
#if VLLM_GEMM_X86
    case GemmIsa::kAvx512:
      return bf16 ? &avx512::PackedColumnsBf16 : &avx512::PackedColumnsF32;
    case GemmIsa::kAvx2:
      return bf16 ? &avx2::PackedColumnsBf16 : &avx2::PackedColumnsF32;
#endif
    default:
      return bf16 ? &portable::PackedColumnsBf16 : &portable::PackedColumnsF32;
  }
}

// y[:, n0:n1] = bias[n0:n1] (or 0) for all m rows of the [m, n] y: a product with k == 0.
void BiasOrZeroColumns(const float* bias, float* y, int64_t m, int64_t n, int64_t n0, int64_t n1) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = y + i * n;
    if (bias != nullptr) {
      std::copy(bias + n0, bias + n1, row + n0);
    } else {
      std::fill(row + n0, row + n1, 0.0f);
    }
  }
}

// Below this many weights a call runs on the calling thread: waking a worker and splitting
// costs more than the work (measured on the bundled model's 256 x 256 o_proj: parallel wins).
constexpr int64_t kMinParallelWeights = 32 * 1024;
// A k block keeps m · kc floats of x (plus a tile of w) in L2 across all of a chunk's tiles.
constexpr int64_t kXBlockFloats = 64 * 1024;
constexpr int64_t kMinKBlock = 256;

void RunSmallM(const float* x, const void* w, const float* bias, float* y, int64_t m, int64_t n,
               int64_t k, GemmIsa isa, bool bf16) {
  VLLM_CHECK(m >= 0 && n >= 0 && k >= 0)
      << "LinearSmallM: negative shape " << m << "x" << n << "x" << k;
  VLLM_CHECK(GemmIsaSupported(isa)) << "LinearSmallM: " << GemmIsaName(isa) << " unsupported";
  if (m == 0 || n == 0) return;
  const ColumnsFn columns = Columns(isa, bf16);
  const int64_t kc =
      std::min(k, std::max(kMinKBlock, kXBlockFloats / m / 64 * 64));  // multiple of 64
  ThreadPool& pool = KernelThreadPool();
  const int64_t threads = n * k >= kMinParallelWeights ? pool.num_threads() : 1;
  // About 4 chunks per thread (dynamic hand-out absorbs a descheduled thread), whole cache
  // lines of y, at most 512 rows (x is re-read from L2 once per chunk and k block).
  const int64_t chunk =
      std::clamp<int64_t>((n + 4 * threads - 1) / (4 * threads) + 15, 16, 512) / 16 * 16;
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  auto run_chunk = [&](int64_t c) {
    const int64_t n0 = c * chunk, n1 = std::min(n, n0 + chunk);
    // The first k block writes bias + its sums (no fill of y, and the same float additions).
    if (k > 0) {
      columns(x, w, bias, y, m, n, k, kc, n0, n1);
      return;
    }
    BiasOrZeroColumns(bias, y, m, n, n0, n1);
  };
  if (threads == 1) {
    for (int64_t c = 0; c < num_chunks; ++c) run_chunk(c);
  } else {
    pool.ParallelFor(num_chunks, run_chunk);
  }
}

GemmIsa ResolveBestIsa() {
  GemmIsa best = GemmIsa::kPortable;
  if (GemmIsaSupported(GemmIsa::kAvx512)) {
    best = GemmIsa::kAvx512;
  } else if (GemmIsaSupported(GemmIsa::kAvx2)) {
    best = GemmIsa::kAvx2;
  }
  const char* cap = std::getenv("VLLM_CPU_GEMM_ISA");
  if (cap == nullptr) return best;
  const std::string_view v(cap);
  if (v == "portable") return GemmIsa::kPortable;
  if (v == "avx2" && best == GemmIsa::kAvx512) return GemmIsa::kAvx2;
  return best;
}

}  // namespace

bool GemmIsaSupported(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return true;
#if VLLM_GEMM_X86
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
#endif
    default:
      return false;
  }
}

GemmIsa BestGemmIsa() {
  static const GemmIsa kBest = ResolveBestIsa();
  return kBest;
}

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
    default:
      return "portable";
  }
}

bool SmallMLinearEnabled() {
  static const bool kEnabled = [] {
    const char* v = std::getenv("VLLM_CPU_GEMM_ISA");
    return v == nullptr || std::string_view(v) != "blas";
  }();
  return kEnabled;
}

void LinearSmallM(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
                  int64_t k, GemmIsa isa) {
  RunSmallM(x, w, bias, y, m, n, k, isa, /*bf16=*/false);
}

void LinearSmallMBf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m,
                      int64_t n, int64_t k, GemmIsa isa) {
  RunSmallM(x, w, bias, y, m, n, k, isa, /*bf16=*/true);
}

void LinearPacked(const float* x, const PackedWeight& w, const float* bias, float* y, int64_t m) {
  LinearPacked(x, w, bias, y, m, BestGemmIsa());
}

void LinearPacked(const float* x, const PackedWeight& w, const float* bias, float* y, int64_t m,
                  GemmIsa isa) {
  VLLM_CHECK(m >= 0) << "LinearPacked: negative m " << m;
  VLLM_CHECK(GemmIsaSupported(isa)) << "LinearPacked: " << GemmIsaName(isa) << " unsupported";
  const int64_t n = w.n(), k = w.k();
  if (m == 0 || n == 0) return;
  if (k == 0) {
    BiasOrZeroColumns(bias, y, m, n, 0, n);
    return;
  }
  const PackedColumnsFn columns = PackedColumns(isa, w.bf16());
  const int64_t panels = (n + PackedWeight::kPanel - 1) / PackedWeight::kPanel;
  ThreadPool& pool = KernelThreadPool();
  const int64_t threads = n * k >= kMinParallelWeights ? pool.num_threads() : 1;
  // About 4 chunks per thread (dynamic hand-out absorbs a descheduled thread).
  const int64_t chunk = std::max<int64_t>(1, (panels + 4 * threads - 1) / (4 * threads));
  const int64_t num_chunks = (panels + chunk - 1) / chunk;
  auto run_chunk = [&](int64_t c) {
    columns(x, w.panels(), bias, y, m, n, k, c * chunk, std::min(panels, (c + 1) * chunk));
  };
  if (threads == 1 || num_chunks == 1) {
    for (int64_t c = 0; c < num_chunks; ++c) run_chunk(c);
  } else {
    pool.ParallelFor(num_chunks, run_chunk);
  }
}

}  // namespace vllm::kernels::cpu
