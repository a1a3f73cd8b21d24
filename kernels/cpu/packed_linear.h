// Linear layers with the weight packed once, at load time: y[m, n] = x[m, k] · w[n, k]ᵀ
// (+ bias[n]) for every m, the model's projections and lm_head on the CPU.
//
// Use: worker/llama_model.cc packs qkv, o, gate_up, down and lm_head at load (tied embeddings
// keep the table for the lookup and a packed copy for lm_head), as Storage::kBf16IfExact
// unless VLLM_CPU_PACKED_WEIGHTS=float32 (A/B runs). Why one path for every m instead of
// Linear's small-m kernel and OpenBLAS (docs/DECISIONS.md, 2026-11-27): one thread, m = 16
// on the bundled model's gate_up 100 µs vs 141 (small-m) and 171 (OpenBLAS), m = 512 on a
// 4096 × 4096 weight level with OpenBLAS (1.05× slower); BF16 panels take a 1-row step over
// the bundled model's 25 matrices from 0.66 ms to 0.24 ms.
//
// Layout: w in panels of kPanel = 32 output features; a panel is [k][32] floats, contiguous
// (the last panel zero-padded). The kernel multiplies one panel row (32 weights) into up to
// MR rows of x per step of k with broadcast FMAs (AVX-512: 12 rows × 2 registers of 16; AVX2
// 2 rows × 4 of 8; portable 1 row × 8 of 4), so it needs no horizontal sums (gemm_small.h's
// dot-product tiles do), and nothing is packed per call (OpenBLAS's sgemm packs all of w on
// every call). vLLM's CPU backend likewise prepacks weights once (oneDNN) instead of calling
// BLAS on the checkpoint's layout.
//
// Work split: panels in chunks over KernelThreadPool() (thread_pool.h); inside a chunk, rows
// of x in blocks of 192 and k in blocks of 512 (gemm_small_tile.inc), so a block of x and a
// panel's k block stay in L2 while every row tile of the block uses them; a row block is cut
// into tiles of near-equal height (16 rows: 8 + 8). For k >= 1024 (and chunks of 4 panels or
// more) the block of x is first copied tile by tile into [k][rows] order (rows k floats apart
// would share one L1 set). BF16 panels are widened as they are loaded, or, above 32 rows,
// once per panel k block into a per-thread buffer. Accumulation in float32, k in order
// within a k block; the first k block writes bias + its sums (y needs no prior fill), later
// ones add theirs.
//
// ISA: GemmIsa (gemm_small.h): AVX-512F, AVX2+FMA or portable, picked at run time by
// BestGemmIsa() (VLLM_CPU_GEMM_ISA caps it; "blas" does not apply here: packed weights have
// no BLAS layout).
//
// Thread-safety: a PackedWeight is immutable after Pack; LinearPacked is reentrant. (Pack in
// packed_linear.cc; LinearPacked in gemm_small.cc, which holds the per-ISA tiles.)
#ifndef VLLM_KERNELS_CPU_PACKED_LINEAR_H_
#define VLLM_KERNELS_CPU_PACKED_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm_small.h"

namespace vllm::kernels::cpu {

class PackedWeight {
 public:
  static constexpr int64_t kPanel = 32;

  // How the panels hold the weights. kBf16IfExact: as BF16 (the top half of a float32) when
  // every weight is one, i.e. the checkpoint was BF16 and was widened on load; the kernel
  // widens them back exactly as it reads them, so the product is bit-identical to kFloat32's
  // with half the bytes to stream. Otherwise float32.
  enum class Storage { kFloat32, kBf16IfExact };

  PackedWeight() = default;
  // w: [n, k] floats (Hugging Face's layout), n, k >= 0.
  static PackedWeight Pack(const float* w, int64_t n, int64_t k,
                           Storage storage = Storage::kFloat32);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  bool empty() const { return n_ == 0; }
  // Whether the panels hold BF16 bits (else float32).
  bool bf16() const { return !bf16_.empty(); }
  // Panel p's [k][32] weights start at panels() + p · k · 32 (floats, or uint16_t BF16 bits when
  // bf16()); float_panels() is that pointer for float32 storage (null for BF16).
  const void* panels() const {
    return bf16() ? static_cast<const void*>(bf16_.data()) : data_.data();
  }
  const float* float_panels() const { return data_.data(); }
  size_t bytes() const { return data_.size() * sizeof(float) + bf16_.size() * sizeof(uint16_t); }
  // Back to [n, k] floats (tests).
  std::vector<float> Unpack() const;

 private:
  int64_t n_ = 0;
  int64_t k_ = 0;
  std::vector<float> data_;     // float32 storage
  std::vector<uint16_t> bf16_;  // BF16 storage
};

// y = x · wᵀ (+ bias): y is [m, w.n()], overwritten; x is [m, w.k()]; bias is [w.n()] or null.
// k == 0 gives the bias (or zeros). With BestGemmIsa().
void LinearPacked(const float* x, const PackedWeight& w, const float* bias, float* y, int64_t m);
// The same with `isa`, which must be supported (tests and benchmarks).
void LinearPacked(const float* x, const PackedWeight& w, const float* bias, float* y, int64_t m,
                  GemmIsa isa);

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_PACKED_LINEAR_H_
