// Seeded uniform inputs for the CPU kernel tests (header-only; tests/unit/kernels/ only).
#ifndef VLLM_TESTS_UNIT_KERNELS_RANDOM_VECTOR_H_
#define VLLM_TESTS_UNIT_KERNELS_RANDOM_VECTOR_H_

#include <cstdint>
#include <random>
#include <vector>

namespace vllm::kernels::cpu {

// n floats drawn uniformly from [lo, hi) with a fixed seed (the same on every run).
inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -2.0f,
                                       float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace vllm::kernels::cpu

#endif  // VLLM_TESTS_UNIT_KERNELS_RANDOM_VECTOR_H_
