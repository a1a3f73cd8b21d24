// Bounded msgpack decoding. Every decoder in the project goes through UnpackBounded so that a
// malformed, truncated or oversized frame from another process becomes a Status — never a
// crash, an exception across a boundary, or an unbounded allocation.
#ifndef VLLM_BASE_MSGPACK_UTIL_H_
#define VLLM_BASE_MSGPACK_UTIL_H_

#include <cstdint>
#include <msgpack.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace vllm::wire {

// Limits for one frame: element counts of arrays and maps, byte lengths of str/bin/ext, nesting.
struct UnpackLimits {
  size_t max_array = 1 << 20;
  size_t max_map = 1 << 16;
  size_t max_str = 1 << 20;
  size_t max_bin = size_t{1} << 32;
  size_t max_depth = 16;
};

// Parses exactly one msgpack object spanning all of `bytes`. The object references `bytes`
// for str/bin data (zero-copy), so `bytes` must outlive the returned handle. DataLoss for
// truncated or malformed input or trailing bytes; ResourceExhausted when a limit is exceeded
// or a container or string declares more elements or bytes than the frame has bytes.
[[nodiscard]] absl::StatusOr<msgpack::object_handle> UnpackBounded(absl::Span<const uint8_t> bytes,
                                                                   const UnpackLimits& limits = {});

// Converts `obj` to T with msgpack-c's adaptors; InvalidArgument naming `what` on a type
// mismatch. Use only for T whose adaptor checks types (ints, strings, vectors of them).
template <typename T>
absl::StatusOr<T> ConvertAs(const msgpack::object& obj, absl::string_view what) {
  try {
    return obj.as<T>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("bad type for ") + std::string(what) + ": " +
                                      e.what());
  }
}

}  // namespace vllm::wire

#endif  // VLLM_BASE_MSGPACK_UTIL_H_
