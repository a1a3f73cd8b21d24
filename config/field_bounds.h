// FieldBounds: what one config field may hold beyond its type. Each config struct lists its
// fields once, with their bounds, in a static `Fields(self, visitor)` beside the members
// (vllm_config.h, kv_events_config.h); the codec's decoder refuses a frame outside them, and
// Validate() refuses a value outside them, naming the flag (config_fields.h walks the lists).
#ifndef VLLM_CONFIG_FIELD_BOUNDS_H_
#define VLLM_CONFIG_FIELD_BOUNDS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

namespace vllm::config {

// Longest enum spelling and host name accepted on the wire, and the default bound of a string.
inline constexpr size_t kMaxNameBytes = 255;
// Longest model path accepted (PATH_MAX).
inline constexpr size_t kMaxPathBytes = 4096;

struct FieldBounds {
  int64_t min = std::numeric_limits<int64_t>::min();  // integers (and optional integers)
  int64_t max = std::numeric_limits<int64_t>::max();
  size_t max_bytes = kMaxNameBytes;                // strings and paths
  std::span<const std::string_view> choices = {};  // strings: one of these (empty: any)
};

// An integer in [lo, hi].
constexpr FieldBounds Range(int64_t lo, int64_t hi) { return {.min = lo, .max = hi}; }
// A string or path of at most n bytes.
constexpr FieldBounds MaxBytes(size_t n) { return {.max_bytes = n}; }
// A string that is one of `choices`.
constexpr FieldBounds OneOf(std::span<const std::string_view> choices) {
  return {.choices = choices};
}

}  // namespace vllm::config

#endif  // VLLM_CONFIG_FIELD_BOUNDS_H_
