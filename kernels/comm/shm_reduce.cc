#include "kernels/comm/shm_reduce.h"

#include <algorithm>
#include <cstring>

namespace vllm::kernels::comm {
namespace {

// Four floats, unaligned loads and stores through memcpy: SSE2 on any x86-64, and the same
// IEEE additions as the scalar tail, so results do not depend on where a block starts.
using V4 = float __attribute__((vector_size(16)));

inline V4 Load(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void Store(float* p, V4 v) { std::memcpy(p, &v, sizeof v); }

// out[i] = a[i] + b[i]; out may equal a or b.
void Add(const float* a, const float* b, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const V4 x0 = Load(a + i) + Load(b + i);
    const V4 x1 = Load(a + i + 4) + Load(b + i + 4);
    const V4 x2 = Load(a + i + 8) + Load(b + i + 8);
    const V4 x3 = Load(a + i + 12) + Load(b + i + 12);
    Store(out + i, x0);
    Store(out + i + 4, x1);
    Store(out + i + 8, x2);
    Store(out + i + 12, x3);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

// Floats summed in an L1-resident accumulator before they are stored to `out`.
constexpr size_t kBlock = 2048;

}  // namespace

void SumInRankOrder(const float* const* src, int32_t n, size_t offset, size_t count, float* out) {
  if (n == 1) {
    std::memmove(out, src[0] + offset, count * sizeof(float));
    return;
  }
  if (n == 2) {  // element-wise, so `out` aliasing a source is harmless
    Add(src[0] + offset, src[1] + offset, out, count);
    return;
  }
  // With more sources `out` may alias a later one: accumulate a block, then store it.
  alignas(64) float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t len = std::min(kBlock, count - base);
    Add(src[0] + offset + base, src[1] + offset + base, acc, len);
    for (int32_t j = 2; j < n; ++j) Add(acc, src[j] + offset + base, acc, len);
    std::memcpy(out + base, acc, len * sizeof(float));
  }
}

}  // namespace vllm::kernels::comm
