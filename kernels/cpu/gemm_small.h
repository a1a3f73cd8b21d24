// Small-m linear layers (decode batches): y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]) that reads
// each weight once per call for all m rows of x, instead of OpenBLAS's sgemm, which packs all
// of w on every call (on the 8B model's shapes its m = 4 costs 4-6× its m = 1, ours 1.2-1.7×:
// docs/BENCHMARKS.md, LinearPath). kernels::cpu::Linear calls it for m <=
// kLinearSmallMMaxRows and OpenBLAS above; the model's dense projections use packed_linear.h
// instead, so Linear serves unpacked weights (MoE experts, routers, shared experts) and tests.
//
// Work split: output features in chunks over KernelThreadPool() (thread_pool.h: about 4 per
// thread, multiples of 16, at most 512; on the caller alone below 32 K weights); inside a
// chunk, k in blocks small enough that the block of x stays in L2 (m · kc <= 64 K floats,
// kc >= 256), and register tiles of (rows of x) × (4 rows of w) dot products — 4 rows of x
// on AVX-512, 2 on AVX2 and the portable path — each a SIMD accumulator reduced once per k
// block. Accumulation in float32, so results differ from BLAS's only by summation order;
// BF16 weights are widened exactly (bits << 16) as they are loaded.
//
// ISA: AVX-512F, AVX2+FMA or a portable 4-wide path (GCC/Clang vector extensions, any
// target), chosen at run time (__builtin_cpu_supports; target attributes, so the build
// needs no -march and never runs an instruction the CPU lacks). VLLM_CPU_GEMM_ISA=
// portable|avx2|avx512 caps the choice; =blas turns the small-m path off in Linear (OpenBLAS
// for every m), for A/B runs. The per-ISA tiles of this kernel and of LinearPacked are
// gemm_small_tile.inc, compiled once per ISA in gemm_small.cc.
//
// Thread-safety: reentrant (concurrent calls run serially on their own threads when the pool
// is busy). Shapes are the caller's contract (VLLM_CHECK).
#ifndef VLLM_KERNELS_CPU_GEMM_SMALL_H_
#define VLLM_KERNELS_CPU_GEMM_SMALL_H_

#include <cstdint>

namespace vllm::kernels::cpu {

// Largest m for which Linear takes the small-m path: measured (docs/DECISIONS.md,
// 2026-11-26; bench/kernels/kernels_cpu_bench.cc, LinearPath).
inline constexpr int64_t kLinearSmallMMaxRows = 64;

enum class GemmIsa { kPortable, kAvx2, kAvx512 };

// Whether this CPU can run `isa` (kPortable: always).
bool GemmIsaSupported(GemmIsa isa);

// The widest supported ISA, capped by VLLM_CPU_GEMM_ISA; resolved once per process.
GemmIsa BestGemmIsa();

// "portable", "avx2", "avx512".
const char* GemmIsaName(GemmIsa isa);

// False when VLLM_CPU_GEMM_ISA=blas: Linear then uses OpenBLAS for every m.
bool SmallMLinearEnabled();

// y = x · wᵀ (+ bias), the semantics of Linear (y is overwritten; k == 0 gives the bias or
// zeros), any m (fast for small m), with `isa`, which must be supported.
void LinearSmallM(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
                  int64_t k, GemmIsa isa);

// The same with BF16 weights as stored (raw bits, Hugging Face's [n, k] layout); the product
// equals LinearSmallM on the weights widened to float32. Tested; no caller in the product yet
// (the model widens BF16 checkpoints to float32 on load).
void LinearSmallMBf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m,
                      int64_t n, int64_t k, GemmIsa isa);

// OpenBLAS for every m (what Linear did before the small-m path; sgemv for m <= 2, sgemm
// above): the peer in tests and benchmarks, and Linear's path above kLinearSmallMMaxRows.
// Defined in linear.cc.
void LinearBlas(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
                int64_t k);

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_GEMM_SMALL_H_
