// PackedWeight (packed_linear.h): the layout. LinearPacked is defined in gemm_small.cc, beside
// the other per-ISA GEMM tiles it shares the dispatch with.
#include "kernels/cpu/packed_linear.h"

#include <bit>

#include "base/status_macros.h"

namespace vllm::kernels::cpu {

namespace {

// Whether every one of the count floats is a BF16 value (its low 16 bits are zero).
bool AllBf16(const float* w, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if ((std::bit_cast<uint32_t>(w[i]) & 0xFFFFu) != 0) return false;
  }
  return true;
}

// Panels of [k][kPanel] elements, the last zero-padded; convert(float) gives the stored one.
template <typename T, typename Convert>
std::vector<T> PackPanels(const float* w, int64_t n, int64_t k, int64_t panel,
                          const Convert& convert) {
  const int64_t panels = (n + panel - 1) / panel;
  std::vector<T> out(static_cast<size_t>(panels * k * panel), T{});
  if (k == 0) return out;  // no weights (and out is empty: no pointer to offset)
  for (int64_t j = 0; j < n; ++j) {
    T* dst = out.data() + (j / panel) * k * panel + j % panel;
    const float* src = w + j * k;
    for (int64_t l = 0; l < k; ++l) dst[l * panel] = convert(src[l]);
  }
  return out;
}

}  // namespace

PackedWeight PackedWeight::Pack(const float* w, int64_t n, int64_t k, Storage storage) {
  VLLM_CHECK(n >= 0 && k >= 0) << "PackedWeight: negative shape " << n << "x" << k;
  PackedWeight p;
  p.n_ = n;
  p.k_ = k;
  if (storage == Storage::kBf16IfExact && n > 0 && k > 0 && AllBf16(w, n * k)) {
    p.bf16_ = PackPanels<uint16_t>(w, n, k, kPanel, [](float f) {
      return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
    });
  } else {
    p.data_ = PackPanels<float>(w, n, k, kPanel, [](float f) { return f; });
  }
  return p;
}

std::vector<float> PackedWeight::Unpack() const {
  std::vector<float> w(static_cast<size_t>(n_ * k_));
  if (k_ == 0) return w;
  for (int64_t j = 0; j < n_; ++j) {
    const int64_t first = (j / kPanel) * k_ * kPanel + j % kPanel;
    for (int64_t l = 0; l < k_; ++l) {
      const int64_t at = first + l * kPanel;
      w[j * k_ + l] =
          bf16() ? std::bit_cast<float>(static_cast<uint32_t>(bf16_[at]) << 16) : data_[at];
    }
  }
  return w;
}

}  // namespace vllm::kernels::cpu
