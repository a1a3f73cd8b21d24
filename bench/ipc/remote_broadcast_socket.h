// Plain POSIX socket and pipe helpers for remote_broadcast.cc: an owned file descriptor, a
// line read from a pipe with a deadline, and blocking TCP (IPv4) with TCP_NODELAY whose every
// call is bounded by SO_RCVTIMEO / SO_SNDTIMEO. Errors come back as absl::Status; a timeout is
// DeadlineExceeded. Not thread-safe (one owner per descriptor).
#ifndef VLLM_BENCH_IPC_REMOTE_BROADCAST_SOCKET_H_
#define VLLM_BENCH_IPC_REMOTE_BROADCAST_SOCKET_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::bench {

// Closes its descriptor when destroyed. Move-only.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.Release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  int Release();
  void Reset();  // closes now

 private:
  int fd_ = -1;
};

// Reads up to the first '\n' (excluded). DeadlineExceeded at `deadline`; Unavailable if the
// other end closed first.
[[nodiscard]] absl::StatusOr<std::string> ReadLine(int fd, absl::Time deadline);
// Writes all `n` bytes (blocking).
[[nodiscard]] absl::Status WriteAll(int fd, const void* data, size_t n);

// A listening TCP socket on `host` (an IPv4 address), any free port.
class TcpListener {
 public:
  [[nodiscard]] static absl::StatusOr<TcpListener> Bind(const std::string& host);
  int port() const { return port_; }
  // Accepts one connection; DeadlineExceeded at `deadline`.
  [[nodiscard]] absl::StatusOr<ScopedFd> Accept(absl::Time deadline);

 private:
  ScopedFd fd_;
  int port_ = 0;
};

// Connects to host:port (which must be listening already); DeadlineExceeded at `deadline`.
[[nodiscard]] absl::StatusOr<ScopedFd> TcpConnect(const std::string& host, int port,
                                                  absl::Time deadline);
// TCP_NODELAY on, and every later send/recv on `fd` bounded by `timeout`.
[[nodiscard]] absl::Status ConfigureTcp(int fd, absl::Duration timeout);

// Sends all `n` bytes. DeadlineExceeded when a send blocks past the socket's timeout.
[[nodiscard]] absl::Status SendAll(int fd, const void* data, size_t n);
// Receives exactly `n` bytes into `out`. Returns false when the peer closed the connection
// before the first byte (a clean end between messages); DataLoss when it closed in the middle,
// DeadlineExceeded when a recv blocks past the socket's timeout.
[[nodiscard]] absl::StatusOr<bool> RecvAll(int fd, void* out, size_t n);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_IPC_REMOTE_BROADCAST_SOCKET_H_
