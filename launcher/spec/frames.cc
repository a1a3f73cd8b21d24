#include "launcher/spec/frames.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace vllm::launcher {
namespace {

constexpr size_t kHeaderBytes = 4;

uint32_t ReadLength(std::string_view header) {
  uint32_t n = 0;
  for (size_t i = 0; i < kHeaderBytes; ++i) n = (n << 8) | static_cast<uint8_t>(header[i]);
  return n;
}

// Reads exactly `n` bytes into `out` before `deadline`.
absl::Status ReadExactly(int fd, size_t n, absl::Time deadline, std::string* out) {
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("no frame within the time allowed");
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) <= 0) continue;
    const ssize_t r = read(fd, out->data() + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return absl::UnavailableError("the peer is gone");
    done += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

bool WriteFrame(int fd, std::string_view bytes) {
  if (bytes.size() > kMaxFrameBytes) return false;
  std::string frame(kHeaderBytes, '\0');
  for (size_t i = 0; i < kHeaderBytes; ++i) {
    frame[i] = static_cast<char>((bytes.size() >> (8 * (kHeaderBytes - 1 - i))) & 0xff);
  }
  frame.append(bytes);
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t n = send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

absl::StatusOr<std::string> ReadOneFrame(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string header;
  if (absl::Status s = ReadExactly(fd, kHeaderBytes, deadline, &header); !s.ok()) return s;
  const uint32_t n = ReadLength(header);
  if (n > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a frame of ", n, " bytes, over the limit of ", kMaxFrameBytes));
  }
  std::string body;
  if (absl::Status s = ReadExactly(fd, n, deadline, &body); !s.ok()) return s;
  return body;
}

std::optional<std::vector<std::string>> FrameReader::Read() {
  char buf[4096];
  ssize_t n;
  do {
    n = read(fd_, buf, sizeof buf);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return std::nullopt;
  pending_.append(buf, static_cast<size_t>(n));
  std::vector<std::string> frames;
  while (pending_.size() >= kHeaderBytes) {
    const uint32_t length = ReadLength(pending_);
    if (length > kMaxFrameBytes) return std::nullopt;  // not our peer
    if (pending_.size() < kHeaderBytes + length) break;
    frames.push_back(pending_.substr(kHeaderBytes, length));
    pending_.erase(0, kHeaderBytes + length);
  }
  return frames;
}

}  // namespace vllm::launcher
