#include "ipc/zmq_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ipc/wait_strategy.h"

namespace vllm::ipc {

zmq::context_t& ZmqContext() {
  static zmq::context_t* ctx = new zmq::context_t(1);
  return *ctx;
}

std::string UniqueToken() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%d-%d-%08x", getpid(), counter.fetch_add(1),
                         static_cast<uint32_t>(rng()));
}

absl::StatusOr<std::string> BindTcp(zmq::socket_t& socket, absl::string_view host, int port) {
  if (host.empty() || host == "*" || host == "0.0.0.0" || host == "::") {
    return absl::InvalidArgumentError(
        absl::StrCat("bind host must be an address peers can connect to, got '", host, "'"));
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port must be within 0..65535, got ", port));
  }
  const bool v6 = host.find(':') != absl::string_view::npos;
  if (v6) socket.set(zmq::sockopt::ipv6, 1);
  const std::string host_part = v6 ? absl::StrCat("[", host, "]") : std::string(host);
  const std::string endpoint =
      absl::StrCat("tcp://", host_part, ":", port == 0 ? std::string("*") : absl::StrCat(port));
  return BindEndpoint(socket, endpoint);
}

std::optional<int> VllmPortBase() {
  const char* v = std::getenv("VLLM_PORT");
  if (v == nullptr) return std::nullopt;
  int port = 0;
  if (!absl::SimpleAtoi(v, &port) || port < 1 || port > 65535) return std::nullopt;
  return port;
}

absl::StatusOr<std::string> BindEndpoint(zmq::socket_t& socket, const std::string& endpoint) {
  const std::optional<int> base = VllmPortBase();
  if (base.has_value() && absl::StartsWith(endpoint, "tcp://") && absl::EndsWith(endpoint, ":*")) {
    const std::string prefix = endpoint.substr(0, endpoint.size() - 1);
    for (int port = *base; port < *base + kVllmPortAttempts && port <= 65535; ++port) {
      try {
        socket.bind(absl::StrCat(prefix, port));
        return socket.get(zmq::sockopt::last_endpoint);
      } catch (const zmq::error_t& e) {
        if (e.num() != EADDRINUSE && e.num() != EACCES) {
          return absl::UnavailableError(absl::StrCat("cannot bind ", prefix, port, ": ", e.what()));
        }
      }
    }
    return absl::UnavailableError(absl::StrCat("cannot bind ", endpoint, ": no free port among ",
                                               kVllmPortAttempts, " from VLLM_PORT=", *base));
  }
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", endpoint, ": ", e.what()));
  }
  return socket.get(zmq::sockopt::last_endpoint);
}

absl::StatusOr<std::string> NumericHost(absl::string_view host) {
  const std::string name(host);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(name.c_str(), nullptr, &hints, &found); e != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' does not resolve (", gai_strerror(e), ")"));
  }
  std::string v4, v6;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, addr, text, sizeof(text)) == nullptr) continue;
    if (a->ai_family == AF_INET && v4.empty()) v4 = text;
    if (a->ai_family == AF_INET6 && v6.empty()) v6 = text;
  }
  freeaddrinfo(found);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' has no IP address"));
}

int PollItems(zmq::pollitem_t* items, size_t n, absl::Duration timeout) {
  const std::chrono::milliseconds ms(
      timeout < absl::ZeroDuration() ? -1 : absl::ToInt64Milliseconds(timeout));
  try {
    return zmq::poll(items, n, ms);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    for (size_t i = 0; i < n; ++i) items[i].revents = 0;
    return 0;
  }
}

bool TryRecv(zmq::socket_t& socket, zmq::message_t& message) {
  try {
    return socket.recv(message, zmq::recv_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    return false;
  }
}

bool TryRecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, size_t max_parts) {
  parts.clear();
  zmq::message_t part;
  if (!TryRecv(socket, part)) return false;
  bool more = part.more();
  parts.push_back(std::move(part));
  while (more) {
    // The rest of a message arrives with its first part: it is there.
    zmq::message_t next;
    if (!TryRecv(socket, next)) break;
    more = next.more();
    if (parts.size() < max_parts) parts.push_back(std::move(next));
  }
  return true;
}

absl::Status PollUntil(zmq::socket_t& socket, short events, int64_t deadline_ns,
                       absl::Duration slice, const std::function<absl::Status()>& check,
                       absl::string_view what) {
  const int64_t slice_ns = absl::ToInt64Nanoseconds(slice);
  while (true) {
    zmq::pollitem_t item{socket.handle(), 0, events, 0};
    const int64_t now = MonoNowNs();
    const int64_t wait_ns = std::max<int64_t>(0, std::min(deadline_ns - now, slice_ns));
    int rc = 0;
    try {
      rc = zmq::poll(&item, 1, std::chrono::milliseconds((wait_ns + 999'999) / 1'000'000));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return absl::InternalError(absl::StrCat("zmq poll: ", e.what()));
    }
    if (rc > 0 && (item.revents & events)) return absl::OkStatus();
    if (check) {
      if (absl::Status st = check(); !st.ok()) return st;
    }
    if (MonoNowNs() >= deadline_ns) {
      return absl::DeadlineExceededError(absl::StrCat("timed out waiting for ", what));
    }
  }
}

absl::Status RecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                           size_t max_parts, int64_t deadline_ns, absl::Duration slice,
                           const std::function<absl::Status()>& check, absl::string_view what) {
  parts.clear();
  while (true) {
    zmq::message_t msg;
    zmq::recv_result_t got;
    try {
      got = socket.recv(msg, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      return absl::InternalError(absl::StrCat("zmq recv: ", e.what()));
    }
    if (!got) {
      // Parts of one multipart message arrive together: only the first can be missing.
      if (!parts.empty()) return absl::InternalError("multipart message arrived incomplete");
      if (absl::Status st = PollUntil(socket, ZMQ_POLLIN, deadline_ns, slice, check, what);
          !st.ok()) {
        return st;
      }
      continue;
    }
    const bool more = msg.more();
    if (parts.size() < max_parts) parts.push_back(std::move(msg));
    if (!more) break;
    if (parts.size() == max_parts) {
      // Drain the rest of the oversized message so the next receive starts cleanly.
      zmq::message_t rest;
      do {
        (void)socket.recv(rest, zmq::recv_flags::none);
      } while (rest.more());
      return absl::DataLossError(absl::StrCat("message with more than ", max_parts, " parts"));
    }
  }
  return absl::OkStatus();
}

absl::Status SendMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                           int64_t deadline_ns, absl::Duration slice,
                           const std::function<absl::Status()>& check, absl::string_view what) {
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto flags = zmq::send_flags::dontwait |
                       (i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    while (true) {
      zmq::send_result_t sent;
      try {
        sent = socket.send(parts[i], flags);
      } catch (const zmq::error_t& e) {
        return absl::InternalError(absl::StrCat("zmq send: ", e.what()));
      }
      if (sent) break;
      // Only the first part can hit the high-water mark; later parts go with it.
      if (absl::Status st = PollUntil(socket, ZMQ_POLLOUT, deadline_ns, slice, check, what);
          !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AcceptCounter>> AcceptCounter::Start(zmq::socket_t& socket) {
  const std::string address = absl::StrCat("inproc://accept-monitor-", UniqueToken());
  if (zmq_socket_monitor(socket.handle(), address.c_str(), ZMQ_EVENT_ACCEPTED) != 0) {
    return absl::InternalError(absl::StrCat("zmq_socket_monitor: ", zmq_strerror(zmq_errno())));
  }
  try {
    zmq::socket_t events(ZmqContext(), zmq::socket_type::pair);
    events.set(zmq::sockopt::linger, 0);
    events.connect(address);
    return std::unique_ptr<AcceptCounter>(new AcceptCounter(socket, std::move(events)));
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    return absl::InternalError(absl::StrCat("accept monitor: ", e.what()));
  }
}

AcceptCounter::~AcceptCounter() { zmq_socket_monitor(socket_.handle(), nullptr, 0); }

void AcceptCounter::Drain() {
  while (true) {
    zmq::message_t event;
    if (!events_.recv(event, zmq::recv_flags::dontwait)) return;
    uint16_t id = 0;
    if (event.size() >= 2) std::memcpy(&id, event.data(), 2);
    while (event.more()) (void)events_.recv(event, zmq::recv_flags::none);  // the endpoint
    if (id == ZMQ_EVENT_ACCEPTED) ++accepted_;
  }
}

absl::Status AcceptCounter::WaitForAccepted(int n, int64_t deadline_ns, absl::Duration slice,
                                            const std::function<absl::Status()>& check,
                                            absl::string_view what) {
  while (true) {
    Drain();
    if (accepted_ >= n) return absl::OkStatus();
    absl::Status st = PollUntil(events_, ZMQ_POLLIN, deadline_ns, slice, check, what);
    if (absl::IsDeadlineExceeded(st)) {
      Drain();
      if (accepted_ >= n) return absl::OkStatus();
      return absl::DeadlineExceededError(
          absl::StrCat("timed out waiting for ", what, ": ", accepted_, " of ", n, " connected"));
    }
    if (!st.ok()) return st;
  }
}

}  // namespace vllm::ipc
