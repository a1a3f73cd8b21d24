// Private to kernels/cpu: small vector helpers for the hand-written loops (attention).
//
// Written with GCC/Clang vector extensions rather than relying on the auto-vectoriser: a
// float reduction is not vectorised without -ffast-math (reassociation), and RelWithDebInfo
// builds at -O2. The 4-float vector is the x86-64 baseline (SSE) register, so passing it
// between functions keeps the standard ABI; four of them give 16 independent partial sums.
#ifndef VLLM_KERNELS_CPU_VEC_H_
#define VLLM_KERNELS_CPU_VEC_H_

#include <cstdint>
#include <cstring>

namespace vllm::kernels::cpu::internal {

typedef float Vec4 __attribute__((vector_size(4 * sizeof(float))));

// Unaligned load/store: cache rows and activations carry no alignment promise.
inline Vec4 LoadVec(const float* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreVec(float* p, Vec4 v) { std::memcpy(p, &v, sizeof(v)); }

// acc[j] += Σ_i w[i]·rows[i·stride + j] for i < n, j < d. Blocked over j so that 16
// accumulators stay in registers across all n rows: one load and store of acc per call
// instead of one per row, which is what bounds a row-at-a-time Axpy.
inline void AccumulateWeightedRows(const float* w, const float* rows, int64_t stride, int64_t n,
                                   float* acc, int64_t d) {
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    Vec4 a0 = LoadVec(acc + j), a1 = LoadVec(acc + j + 4);
    Vec4 a2 = LoadVec(acc + j + 8), a3 = LoadVec(acc + j + 12);
    for (int64_t i = 0; i < n; ++i) {
      const float* r = rows + i * stride + j;
      a0 += w[i] * LoadVec(r);
      a1 += w[i] * LoadVec(r + 4);
      a2 += w[i] * LoadVec(r + 8);
      a3 += w[i] * LoadVec(r + 12);
    }
    StoreVec(acc + j, a0);
    StoreVec(acc + j + 4, a1);
    StoreVec(acc + j + 8, a2);
    StoreVec(acc + j + 12, a3);
  }
  for (; j + 4 <= d; j += 4) {
    Vec4 a = LoadVec(acc + j);
    for (int64_t i = 0; i < n; ++i) a += w[i] * LoadVec(rows + i * stride + j);
    StoreVec(acc + j, a);
  }
  for (; j < d; ++j) {
    float a = acc[j];
    for (int64_t i = 0; i < n; ++i) a += w[i] * rows[i * stride + j];
    acc[j] = a;
  }
}

// y[i] = alpha·x[i] for i < n (x and y are the same buffer or do not overlap).
inline void ScaleInto(const float* x, float alpha, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    StoreVec(y + i, LoadVec(x + i) * alpha);
    StoreVec(y + i + 4, LoadVec(x + i + 4) * alpha);
  }
  for (; i < n; ++i) y[i] = x[i] * alpha;
}

// y[i] *= alpha for i < n.
inline void Scale(float alpha, float* y, int64_t n) { ScaleInto(y, alpha, y, n); }

}  // namespace vllm::kernels::cpu::internal

#endif  // VLLM_KERNELS_CPU_VEC_H_
