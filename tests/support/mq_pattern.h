// Deterministic message streams for MessageQueue tests: message i of stream `seed` has a size
// drawn around the chunk size (mostly small, some near a chunk, a few oversize so the ZMQ
// overflow path runs) and content derived from (seed, i), so any reader can check order and
// content without the writer telling it anything.
#ifndef VLLM_TESTS_SUPPORT_MQ_PATTERN_H_
#define VLLM_TESTS_SUPPORT_MQ_PATTERN_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace vllm::testing {

inline uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Size of message i: 90 % up to 256 B, 8 % up to one chunk, 2 % up to three chunks.
inline size_t PatternSize(uint64_t seed, uint64_t i, size_t chunk_bytes) {
  const uint64_t r = Mix(seed * 1000003 + i);
  const uint64_t bucket = r % 100;
  if (bucket < 90) return 8 + (r >> 8) % 249;
  if (bucket < 98) return 8 + (r >> 8) % chunk_bytes;
  return chunk_bytes + 1 + (r >> 8) % (2 * chunk_bytes);
}

inline void PatternFill(uint64_t seed, uint64_t i, uint8_t* out, size_t n) {
  std::memcpy(out, &i, n < 8 ? n : 8);
  uint64_t x = Mix(seed ^ (i << 20));
  for (size_t k = 8; k < n; k += 8) {
    x = Mix(x);
    std::memcpy(out + k, &x, n - k < 8 ? n - k : 8);
  }
}

inline std::vector<uint8_t> PatternMessage(uint64_t seed, uint64_t i, size_t chunk_bytes) {
  std::vector<uint8_t> v(PatternSize(seed, i, chunk_bytes));
  PatternFill(seed, i, v.data(), v.size());
  return v;
}

// Empty string when message i is right; otherwise what is wrong.
inline std::string PatternCheck(uint64_t seed, uint64_t i, size_t chunk_bytes, const uint8_t* data,
                                size_t n) {
  const size_t want = PatternSize(seed, i, chunk_bytes);
  if (n != want) {
    uint64_t got_index = 0;
    std::memcpy(&got_index, data, n < 8 ? n : 8);
    return "message " + std::to_string(i) + ": size " + std::to_string(n) + ", want " +
           std::to_string(want) + " (its index field says " + std::to_string(got_index) + ")";
  }
  std::vector<uint8_t> expect(n);
  PatternFill(seed, i, expect.data(), n);
  if (n != 0 && std::memcmp(expect.data(), data, n) != 0) {
    return "message " + std::to_string(i) + ": content differs";
  }
  return "";
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_MQ_PATTERN_H_
