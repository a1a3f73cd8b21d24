// Helpers shared by llama_model.cc and llama_eagle.cc (LlamaModel's definitions); not for
// other code.
#ifndef VLLM_WORKER_LLAMA_INTERNAL_H_
#define VLLM_WORKER_LLAMA_INTERNAL_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/packed_linear.h"

namespace vllm::worker::llama_internal {

// Grows `v` to at least n elements (scratch buffers only grow).
inline float* Scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

inline void Append(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// A projection's weight [n, k] packed for the CPU GEMM: as BF16 when that is exact (a BF16
// checkpoint widened on load; half the bytes per step, the same products), unless
// VLLM_CPU_PACKED_WEIGHTS=float32 (A/B runs).
inline kernels::cpu::PackedWeight PackWeight(const float* w, int64_t n, int64_t k) {
  static const bool kFloat32Only = [] {
    const char* v = std::getenv("VLLM_CPU_PACKED_WEIGHTS");
    return v != nullptr && std::string(v) == "float32";
  }();
  using Storage = kernels::cpu::PackedWeight::Storage;
  return kernels::cpu::PackedWeight::Pack(w, n, k,
                                          kFloat32Only ? Storage::kFloat32 : Storage::kBf16IfExact);
}

}  // namespace vllm::worker::llama_internal

#endif  // VLLM_WORKER_LLAMA_INTERNAL_H_
