#include "base/msgpack_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace vllm::wire {
namespace {
// Let str/bin/ext objects point into the caller's buffer instead of copying into the zone.
bool ReferenceAll(msgpack::type::object_type, std::size_t, void*) { return true; }
}  // namespace

absl::StatusOr<msgpack::object_handle> UnpackBounded(absl::Span<const uint8_t> bytes,
                                                     const UnpackLimits& limits) {
  // No container holds more elements, and no str/bin more bytes, than the frame has bytes, so
  // a short frame cannot make the unpacker allocate a huge array.
  const size_t n = bytes.size();
  const msgpack::unpack_limit limit(std::min(limits.max_array, n), std::min(limits.max_map, n),
                                    std::min(limits.max_str, n), std::min(limits.max_bin, n),
                                    std::min(limits.max_bin, n), limits.max_depth);
  std::size_t offset = 0;
  try {
    msgpack::object_handle oh =
        msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), offset,
                        &ReferenceAll, nullptr, limit);
    if (offset != bytes.size()) {
      return absl::DataLossError(absl::StrCat("msgpack frame has ", bytes.size() - offset,
                                              " trailing bytes after ", offset));
    }
    return oh;
  } catch (const msgpack::depth_size_overflow& e) {
    return absl::ResourceExhaustedError(absl::StrCat("msgpack frame nests too deeply: ", e.what()));
  } catch (const msgpack::size_overflow& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("msgpack frame exceeds a size limit or declares more than its ", n,
                     " bytes hold: ", e.what()));
  } catch (const msgpack::insufficient_bytes& e) {
    return absl::DataLossError(absl::StrCat("truncated msgpack frame (", bytes.size(), " bytes)"));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed msgpack frame: ", e.what()));
  }
}

}  // namespace vllm::wire
