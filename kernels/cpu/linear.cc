// Linear layers: y = x · wᵀ (+ bias), weights in Hugging Face's [out, in] layout. Small m
// (decode) through our kernel (gemm_small.h), which reads w once for all rows; larger m
// through OpenBLAS's sgemm.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "base/status_macros.h"
#include "kernels/cpu/gemm_small.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace vllm::kernels::cpu {

void SetBlasNumThreads(int num_threads) {
  openblas_set_num_threads(std::max(1, num_threads));
  KernelThreadPool().Resize(num_threads);
}

void Linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k) {
  VLLM_CHECK(m >= 0 && n >= 0 && k >= 0) << "Linear: negative shape " << m << "x" << n << "x" << k;
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();  // BLAS takes int sizes
  VLLM_CHECK(m <= kMaxDim && n <= kMaxDim && k <= kMaxDim) << "Linear: dimension too large";
  if (m == 0 || n == 0) return;
  // Up to the switch point (measured: docs/DECISIONS.md) our kernel streams w once for all m
  // rows; OpenBLAS's sgemm packs all of w per call and only pays that back at larger m.
  if (m <= kLinearSmallMMaxRows && SmallMLinearEnabled()) {
    LinearSmallM(x, w, bias, y, m, n, k, BestGemmIsa());
    return;
  }
  LinearBlas(x, w, bias, y, m, n, k);
}

void LinearBlas(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
                int64_t k) {
  VLLM_CHECK(m >= 0 && n >= 0 && k >= 0) << "Linear: negative shape " << m << "x" << n << "x" << k;
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();  // BLAS takes int sizes
  VLLM_CHECK(m <= kMaxDim && n <= kMaxDim && k <= kMaxDim) << "Linear: dimension too large";
  if (m == 0 || n == 0) return;
  // With a bias, y starts as the broadcast bias and BLAS accumulates onto it (beta = 1), so
  // the bias costs one pass over y instead of a second sweep after the GEMM.
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, y + i * n);
    beta = 1.0f;
  }
  if (k == 0) {
    if (bias == nullptr) std::fill(y, y + m * n, 0.0f);
    return;
  }
  // One or two rows: sgemv streams w once per row without the packing sgemm does.
  if (m <= 2) {
    for (int64_t i = 0; i < m; ++i) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k),
                  1.0f, w, static_cast<blasint>(k), x + i * k, 1, beta, y + i * n, 1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w,
              static_cast<blasint>(k), beta, y, static_cast<blasint>(n));
}

}  // namespace vllm::kernels::cpu
