#include "bench/ipc/remote_broadcast_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace vllm::bench {
namespace {

absl::Status Errno(absl::string_view what) {
  const int err = errno;
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Milliseconds left until `deadline` for poll(), at least 0.
int PollMs(absl::Time deadline) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0,
                                              std::numeric_limits<int>::max()));
}

absl::StatusOr<sockaddr_in> Ipv4(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
  }
  return addr;
}

}  // namespace

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int ScopedFd::Release() { return std::exchange(fd_, -1); }

void ScopedFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<std::string> ReadLine(int fd, absl::Time deadline) {
  std::string line;
  while (line.empty() || line.back() != '\n') {
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("waiting for a line");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, PollMs(deadline)) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return absl::UnavailableError("the other end closed before a whole line");
    if (n < 0 && errno != EINTR) return Errno("read");
    if (n > 0) line.append(buf, static_cast<size_t>(n));
  }
  line.pop_back();
  return line;
}

absl::Status WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Errno("write");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::StatusOr<TcpListener> TcpListener::Bind(const std::string& host) {
  VLLM_ASSIGN_OR_RETURN(sockaddr_in addr, Ipv4(host, 0));
  TcpListener l;
  l.fd_ = ScopedFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (l.fd_.get() < 0) return Errno("socket");
  const int one = 1;
  setsockopt(l.fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Errno(absl::StrCat("bind ", host));
  }
  if (listen(l.fd_.get(), 1) != 0) return Errno("listen");
  socklen_t len = sizeof addr;
  if (getsockname(l.fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }
  l.port_ = ntohs(addr.sin_port);
  return l;
}

absl::StatusOr<ScopedFd> TcpListener::Accept(absl::Time deadline) {
  while (true) {
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("no TCP reader connected");
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, PollMs(deadline)) <= 0) continue;
    ScopedFd conn(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() >= 0) return conn;
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return Errno("accept");
  }
}

absl::StatusOr<ScopedFd> TcpConnect(const std::string& host, int port, absl::Time deadline) {
  VLLM_ASSIGN_OR_RETURN(const sockaddr_in addr, Ipv4(host, port));
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Errno("socket");
  // The writer listens before it starts the reader, so a connect either completes at once or
  // fails; one to an address nobody answers is bounded by the send timeout set here.
  const int64_t left_us = std::max<int64_t>(1, absl::ToInt64Microseconds(deadline - absl::Now()));
  const timeval tv{static_cast<time_t>(left_us / 1'000'000),
                   static_cast<suseconds_t>(left_us % 1'000'000)};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Errno(absl::StrCat("connect ", host, ":", port));
  }
  return fd;
}

absl::Status ConfigureTcp(int fd, absl::Duration timeout) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return Errno("TCP_NODELAY");
  }
  const int64_t us = absl::ToInt64Microseconds(timeout);
  const timeval tv{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
    return Errno("SO_RCVTIMEO/SO_SNDTIMEO");
  }
  return absl::OkStatus();
}

absl::Status SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t s = send(fd, p, n, MSG_NOSIGNAL);
    if (s < 0 && errno == EINTR) continue;
    if (s < 0) return Errno("send");
    p += s;
    n -= static_cast<size_t>(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RecvAll(int fd, void* out, size_t n) {
  char* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, p + got, n - got, MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("recv");
    if (r == 0) {
      if (got == 0) return false;
      return absl::DataLossError(
          absl::StrCat("connection closed after ", got, " of ", n, " bytes"));
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace vllm::bench
