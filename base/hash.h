// 64-bit hashing pieces, stable across processes and runs.
#ifndef VLLM_BASE_HASH_H_
#define VLLM_BASE_HASH_H_

#include <cstdint>

namespace vllm::base {

// splitmix64's finaliser: every input bit affects every output bit.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace vllm::base

#endif  // VLLM_BASE_HASH_H_
