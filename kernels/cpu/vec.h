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

// Σ a[i]·b[i] for i < n.
inline float Dot(const float* a, const float* b, int64_t n) {
  Vec4 acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += LoadVec(a + i) * LoadVec(b + i);
    acc1 += LoadVec(a + i + 4) * LoadVec(b + i + 4);
    acc2 += LoadVec(a + i + 8) * LoadVec(b + i + 8);
    acc3 += LoadVec(a + i + 12) * LoadVec(b + i + 12);
  }
  for (; i + 4 <= n; i += 4) acc0 += LoadVec(a + i) * LoadVec(b + i);
  const Vec4 acc = (acc0 + acc1) + (acc2 + acc3);
  float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out[r] = Σ_j q[j]·rows[r·stride + j] for r < 4, j < d: four dot products sharing each
// load of q, so a block of keys costs 1.25 loads per multiply-add instead of 2.
inline void Dot4Rows(const float* q, const float* rows, int64_t stride, int64_t d, float* out) {
  const float* r0 = rows;
  const float* r1 = rows + stride;
  const float* r2 = rows + 2 * stride;
  const float* r3 = rows + 3 * stride;
  Vec4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t j = 0;
  for (; j + 4 <= d; j += 4) {
    const Vec4 qv = LoadVec(q + j);
    a0 += qv * LoadVec(r0 + j);
    a1 += qv * LoadVec(r1 + j);
    a2 += qv * LoadVec(r2 + j);
    a3 += qv * LoadVec(r3 + j);
  }
  out[0] = (a0[0] + a0[1]) + (a0[2] + a0[3]);
  out[1] = (a1[0] + a1[1]) + (a1[2] + a1[3]);
  out[2] = (a2[0] + a2[1]) + (a2[2] + a2[3]);
  out[3] = (a3[0] + a3[1]) + (a3[2] + a3[3]);
  for (; j < d; ++j) {
    out[0] += q[j] * r0[j];
    out[1] += q[j] * r1[j];
    out[2] += q[j] * r2[j];
    out[3] += q[j] * r3[j];
  }
}

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

// y[i] *= alpha for i < n.
inline void Scale(float alpha, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) StoreVec(y + i, LoadVec(y + i) * alpha);
  for (; i < n; ++i) y[i] *= alpha;
}

}  // namespace vllm::kernels::cpu::internal

#endif  // VLLM_KERNELS_CPU_VEC_H_
