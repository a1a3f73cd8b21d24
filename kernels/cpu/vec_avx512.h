// Private to kernels/cpu: AVX-512 helpers for the hand-written loops (attention, activations),
// compiled with a target attribute (VLLM_AVX512_TARGET) so the build needs no -march. Only
// call them from functions with the same attribute, and only after UseAvx512Loops() said yes.
//
// GCC 12's AVX-512 headers pass _mm512_undefined_ps() as the unused source of unmasked
// intrinsics, which -Wmaybe-uninitialized (or, inlined deeper, -Wuninitialized) reports at
// every inlined use: includers wrap their AVX-512 code in VLLM_AVX512_BEGIN /
// VLLM_AVX512_END, which silence both.
#ifndef VLLM_KERNELS_CPU_VEC_AVX512_H_
#define VLLM_KERNELS_CPU_VEC_AVX512_H_

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VLLM_HAVE_AVX512_HELPERS 1
#else
#define VLLM_HAVE_AVX512_HELPERS 0
#endif

namespace vllm::kernels::cpu::internal {

// Whether the AVX-512 loops run: the CPU has AVX-512F, AVX2 and FMA, and VLLM_CPU_VEC_ISA
// is not "portable" (an A/B switch, like VLLM_CPU_GEMM_ISA for the GEMMs: attention and the
// activations then take their portable loops). False off x86. Resolved once per process.
bool UseAvx512Loops();

}  // namespace vllm::kernels::cpu::internal

#if VLLM_HAVE_AVX512_HELPERS

#define VLLM_AVX512_TARGET __attribute__((target("avx512f,avx2,fma")))
#if defined(__clang__)  // clang has no such warning (and -Werror refuses unknown ones)
#define VLLM_AVX512_BEGIN
#define VLLM_AVX512_END
#else
#define VLLM_AVX512_BEGIN                                                                    \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define VLLM_AVX512_END _Pragma("GCC diagnostic pop")
#endif

VLLM_AVX512_BEGIN
namespace vllm::kernels::cpu::internal::avx512 {

// The two 256-bit halves of v.
VLLM_AVX512_TARGET inline void Halves(__m512 v, __m256* lo, __m256* hi) {
  *lo = _mm512_castps512_ps256(v);
  *hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// Σ of v's 16 lanes.
VLLM_AVX512_TARGET inline float ReduceAdd(__m512 v) {
  __m256 lo, hi;
  Halves(v, &lo, &hi);
  const __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// max of v's 16 lanes.
VLLM_AVX512_TARGET inline float ReduceMax(__m512 v) {
  __m256 lo, hi;
  Halves(v, &lo, &hi);
  const __m256 s8 = _mm256_max_ps(lo, hi);
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x lane by lane: Cephes' expf (Cody-Waite reduction to [-ln2/2, ln2/2], degree-6
// polynomial; within 2 ulp of the correctly rounded value) with scalef for the power of two,
// which gives +inf above the float range and 0 far below it. NaN stays NaN.
VLLM_AVX512_TARGET inline __m512 Exp(__m512 x) {
  // Clamped (NaN passes: max returns its second operand when either is NaN) so n stays in
  // the range where scalef saturates cleanly.
  x = _mm512_min_ps(_mm512_set1_ps(104.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace vllm::kernels::cpu::internal::avx512
VLLM_AVX512_END

#endif  // VLLM_HAVE_AVX512_HELPERS

#endif  // VLLM_KERNELS_CPU_VEC_AVX512_H_
