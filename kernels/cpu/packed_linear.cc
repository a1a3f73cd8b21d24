// PackedWeight (packed_linear.h): the layout. LinearPacked is defined in gemm_small.cc, beside
// the other per-ISA GEMM tiles it shares the dispatch with.
#include "kernels/cpu/packed_linear.h"

#include "base/status_macros.h"

namespace vllm::kernels::cpu {

PackedWeight PackedWeight::Pack(const float* w, int64_t n, int64_t k) {
  VLLM_CHECK(n >= 0 && k >= 0) << "PackedWeight: negative shape " << n << "x" << k;
  PackedWeight p;
  p.n_ = n;
  p.k_ = k;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  p.data_.assign(static_cast<size_t>(panels * k * kPanel), 0.0f);
  if (k == 0) return p;  // no weights (and data_ is empty: no pointer to offset)
  for (int64_t j = 0; j < n; ++j) {
    float* dst = p.data_.data() + (j / kPanel) * k * kPanel + j % kPanel;
    const float* src = w + j * k;
    for (int64_t l = 0; l < k; ++l) dst[l * kPanel] = src[l];
  }
  return p;
}

std::vector<float> PackedWeight::Unpack() const {
  std::vector<float> w(static_cast<size_t>(n_ * k_));
  if (k_ == 0) return w;
  for (int64_t j = 0; j < n_; ++j) {
    const float* src = data_.data() + (j / kPanel) * k_ * kPanel + j % kPanel;
    for (int64_t l = 0; l < k_; ++l) w[j * k_ + l] = src[l * kPanel];
  }
  return w;
}

}  // namespace vllm::kernels::cpu
