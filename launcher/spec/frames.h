// Length-prefixed frames on a stream socket (the launcher's control sockets to its API server
// and DP coordinator processes): a 4-byte big-endian length, then that many bytes (one msgpack
// message of launcher/spec/). A frame over kMaxFrameBytes is refused on both sides.
#ifndef VLLM_LAUNCHER_SPEC_FRAMES_H_
#define VLLM_LAUNCHER_SPEC_FRAMES_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::launcher {

// The largest frame (an API server's spec carries the whole VllmConfig, <= 16 KiB).
inline constexpr size_t kMaxFrameBytes = 64 * 1024;

// Writes one frame (MSG_NOSIGNAL); false when the peer is gone or `bytes` is over the limit.
bool WriteFrame(int fd, std::string_view bytes);

// Reads exactly one frame from `fd` (never a byte past it, so another reader can take over),
// within `timeout`. Unavailable at EOF or an error, DeadlineExceeded past the timeout,
// InvalidArgument for a length over kMaxFrameBytes.
[[nodiscard]] absl::StatusOr<std::string> ReadOneFrame(int fd, absl::Duration timeout);

// Splits what arrives on a socket into frames. Not thread-safe.
class FrameReader {
 public:
  explicit FrameReader(int fd) : fd_(fd) {}
  // One read(): the frames completed so far (maybe none), or nullopt at EOF, an error, or a
  // frame over kMaxFrameBytes (not our peer).
  std::optional<std::vector<std::string>> Read();

 private:
  int fd_;
  std::string pending_;
};

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SPEC_FRAMES_H_
