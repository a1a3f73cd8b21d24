// The run-time switch of the AVX-512 loops (vec_avx512.h).
#include "kernels/cpu/vec_avx512.h"

#include <cstdlib>
#include <string_view>

#include "kernels/cpu/gemm_small.h"

namespace vllm::kernels::cpu::internal {

bool UseAvx512Loops() {
#if VLLM_HAVE_AVX512_HELPERS
  static const bool kUse = [] {
    const char* cap = std::getenv("VLLM_CPU_VEC_ISA");
    if (cap != nullptr && std::string_view(cap) == "portable") return false;
    return GemmIsaSupported(GemmIsa::kAvx512);  // the same target (avx512f, avx2, fma)
  }();
  return kUse;
#else
  return false;
#endif
}

}  // namespace vllm::kernels::cpu::internal
