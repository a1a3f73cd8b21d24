#include "kernels/comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "gloo/common/error.h"
#include "ipc/zmq_util.h"

namespace vllm::kernels::comm {
namespace {

using Limits = TcpStoreLimits;

constexpr absl::string_view kSet = "SET";
constexpr absl::string_view kGet = "GET";
constexpr absl::string_view kCheck = "CHECK";
constexpr absl::string_view kOk = "ok";
constexpr absl::string_view kValue = "value";
constexpr absl::string_view kMissing = "missing";
constexpr absl::string_view kError = "error";
// Routing id, seq, op and up to kMaxCheckKeys keys.
constexpr size_t kMaxRequestParts = 3 + Limits::kMaxCheckKeys;
// The serving thread re-checks its stop flag at least this often even if the eventfd were lost.
constexpr int kServePollMs = 100;
// Requests served before polling the stop flag again.
constexpr int kBurst = 256;

absl::string_view View(const zmq::message_t& m) {
  return absl::string_view(static_cast<const char*>(m.data()), m.size());
}

zmq::message_t Msg(absl::string_view s) { return zmq::message_t(s.data(), s.size()); }

// A key for an error message: escaped, at most 64 characters.
std::string Quote(absl::string_view key) {
  std::string q = absl::CHexEscape(key.substr(0, 64));
  if (key.size() > 64) absl::StrAppend(&q, "...");
  return absl::StrCat("'", q, "'");
}

std::string QuoteKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) quoted.push_back(Quote(keys[i]));
  std::string out = absl::StrJoin(quoted, ", ");
  if (keys.size() > kShown) absl::StrAppend(&out, " and ", keys.size() - kShown, " more");
  return out;
}

// Why a key or value is out of bounds; empty when it is within them.
std::string KeyProblem(absl::string_view key) {
  if (key.empty()) return "empty key";
  if (key.size() > Limits::kMaxKeyBytes) {
    return absl::StrCat("key of ", key.size(), " bytes (at most ", Limits::kMaxKeyBytes, ")");
  }
  return "";
}

// What an unexpected reply (status and frames after it) says.
std::string WhyRefused(const std::vector<zmq::message_t>& reply) {
  if (reply.size() >= 2 && View(reply[0]) == kError) {
    return std::string(View(reply[1]).substr(0, 256));
  }
  return absl::StrCat("unexpected reply ", Quote(View(reply[0]).substr(0, 16)));
}

std::string ValueProblem(size_t size) {
  if (size > Limits::kMaxValueBytes) {
    return absl::StrCat("value of ", size, " bytes (at most ", Limits::kMaxValueBytes, ")");
  }
  return "";
}

// Sleeps `pause` (at most until `until`) before polling the server again, then doubles it up to
// 10 ms; calls timed_out() (which throws) when `until` has passed already.
template <typename F>
void Pause(std::chrono::microseconds& pause, std::chrono::steady_clock::time_point until,
           const F& timed_out) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= until) timed_out();
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, until - now));
  pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
}

// socket.recv() / send(), again when a signal interrupts them (cppzmq throws EINTR then).
bool Recv(zmq::socket_t& socket, zmq::message_t& msg, zmq::recv_flags flags) {
  while (true) {
    try {
      return socket.recv(msg, flags).has_value();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

bool Send(zmq::socket_t& socket, zmq::message_t& msg, zmq::send_flags flags) {
  while (true) {
    try {
      return socket.send(msg, flags).has_value();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

// The address to bind for `host`: itself when it is an IP address; else the address it
// resolves to (IPv4 preferred); else `host` unchanged (libzmq takes an interface name, e.g.
// "eth0", and reports anything else as it binds).
std::string BindAddress(absl::string_view host) {
  const std::string name(host);
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1) {
    return name;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return name;
  std::string best;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr =
        ai->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(ai->ai_addr)->sin6_addr);
    if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
        inet_ntop(ai->ai_family, addr, text, sizeof(text)) == nullptr) {
      continue;
    }
    if (best.empty() || ai->ai_family == AF_INET) best = text;
    if (ai->ai_family == AF_INET) break;
  }
  freeaddrinfo(found);
  return best.empty() ? name : best;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// StoreServer

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    absl::string_view host, const std::optional<ipc::CurveKeys>& curve) {
  std::optional<zmq::socket_t> socket;
  try {
    socket.emplace(ipc::ZmqContext(), zmq::socket_type::router);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::maxmsgsize, Limits::kMaxFrameBytes);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("gloo rendezvous store: socket: ", e.what()));
  }
  if (curve.has_value()) VLLM_RETURN_IF_ERROR(ipc::MakeCurveServer(*socket, *curve));
  absl::StatusOr<std::string> address = ipc::BindTcp(*socket, BindAddress(host), 0);
  if (!address.ok()) {
    return absl::Status(address.status().code(),
                        absl::StrCat("gloo rendezvous store: ", address.status().message()));
  }
  const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    return absl::InternalError(
        absl::StrCat("gloo rendezvous store: eventfd: ", std::strerror(errno)));
  }
  auto server = std::unique_ptr<StoreServer>(
      new StoreServer(std::move(*socket), stop_fd, std::move(*address)));
  try {
    // The socket moves to the serving thread: starting a thread orders everything before it.
    server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  } catch (const std::system_error& e) {
    return absl::InternalError(absl::StrCat("gloo rendezvous store: thread: ", e.what()));
  }
  return server;
}

StoreServer::StoreServer(zmq::socket_t socket, int stop_fd, std::string address)
    : socket_(std::move(socket)), stop_fd_(stop_fd), address_(std::move(address)) {}

StoreServer::~StoreServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    ssize_t n;
    do {
      n = write(stop_fd_, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    thread_.join();
  }
  close(stop_fd_);
  // socket_ closes with linger 0 after the thread is joined.
}

void StoreServer::Serve() {
  pthread_setname_np(pthread_self(), "vllm-store");  // gloo rendezvous for a comm group
  std::vector<zmq::message_t> parts;
  while (true) {
    zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, stop_fd_, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(kServePollMs));
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      continue;  // EINTR
    }
    if (items[1].revents & ZMQ_POLLIN) return;
    for (int served = 0; served < kBurst; ++served) {
      parts.clear();
      bool truncated = false;
      try {
        zmq::message_t msg;
        if (!Recv(socket_, msg, zmq::recv_flags::dontwait)) break;
        bool more = msg.more();
        parts.push_back(std::move(msg));
        // The parts of one message arrive together: the rest is there already.
        while (more) {
          zmq::message_t next;
          (void)Recv(socket_, next, zmq::recv_flags::none);
          more = next.more();
          if (parts.size() < kMaxRequestParts) {
            parts.push_back(std::move(next));
          } else {
            truncated = true;
          }
        }
        Handle(parts, truncated);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) return;
        break;  // a reply that could not be sent: its client is gone
      }
    }
  }
}

void StoreServer::Handle(std::vector<zmq::message_t>& parts, bool truncated) {
  // parts[0] is the routing id ROUTER prepends; a DEALER's request follows.
  std::vector<zmq::message_t> reply;
  reply.push_back(std::move(parts[0]));
  const bool has_seq = parts.size() >= 2 && parts[1].size() <= Limits::kMaxSeqBytes;
  reply.push_back(has_seq ? Msg(View(parts[1])) : zmq::message_t());
  auto error = [&reply](absl::string_view message) {
    reply.resize(2);
    reply.push_back(Msg(kError));
    reply.push_back(Msg(message));
  };
  const absl::string_view op = parts.size() >= 3 ? View(parts[2]) : absl::string_view();
  const size_t args = parts.size() >= 3 ? parts.size() - 3 : 0;
  if (!has_seq || parts.size() < 3) {
    error("malformed request: expected [seq (<= 8 bytes)] [op] [args...]");
  } else if (truncated) {
    error(absl::StrCat("request with more than ", kMaxRequestParts - 1, " frames"));
  } else if (op == kSet) {
    if (args != 2) {
      error("SET takes a key and a value");
    } else if (std::string p = KeyProblem(View(parts[3])); !p.empty()) {
      error(p);
    } else if (p = ValueProblem(parts[4].size()); !p.empty()) {
      error(p);
    } else {
      std::string key(View(parts[3]));
      auto it = values_.find(key);
      if (it == values_.end() && values_.size() >= Limits::kMaxKeys) {
        error(absl::StrCat("store full (", Limits::kMaxKeys, " keys)"));
      } else {
        values_.insert_or_assign(std::move(key), std::string(View(parts[4])));
        reply.push_back(Msg(kOk));
      }
    }
  } else if (op == kGet) {
    if (args != 1) {
      error("GET takes one key");
    } else if (std::string p = KeyProblem(View(parts[3])); !p.empty()) {
      error(p);
    } else if (auto it = values_.find(std::string(View(parts[3]))); it == values_.end()) {
      reply.push_back(Msg(kMissing));
    } else {
      reply.push_back(Msg(kValue));
      reply.push_back(Msg(it->second));
    }
  } else if (op == kCheck) {
    std::vector<zmq::message_t> missing;
    std::string problem = args == 0 ? "CHECK takes 1 or more keys" : "";
    for (size_t i = 3; i < parts.size() && problem.empty(); ++i) {
      problem = KeyProblem(View(parts[i]));
      if (!values_.contains(std::string(View(parts[i])))) missing.push_back(Msg(View(parts[i])));
    }
    if (!problem.empty()) {
      error(problem);
    } else {
      reply.push_back(Msg(missing.empty() ? kOk : kMissing));
      for (zmq::message_t& m : missing) reply.push_back(std::move(m));
    }
  } else {
    error(absl::StrCat("unknown op ", Quote(op.substr(0, 16))));
  }
  for (size_t i = 0; i < reply.size(); ++i) {
    // ROUTER drops a reply to a client that is gone (or at its high-water mark): never blocks.
    (void)Send(socket_, reply[i],
               i + 1 < reply.size() ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                    : zmq::send_flags::dontwait);
  }
}

// ---------------------------------------------------------------------------------------------
// TcpStoreClient

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(
    const std::string& address, const std::optional<ipc::CurveKeys>& curve,
    absl::Duration timeout) {
  if (!absl::StartsWith(address, "tcp://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo rendezvous store address '", address, "' is not tcp://<host>:<port>"));
  }
  const auto deadline = Clock::now() + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(std::clamp(
                                           timeout, absl::ZeroDuration(), absl::Hours(24 * 365))));
  std::optional<zmq::socket_t> socket;
  try {
    socket.emplace(ipc::ZmqContext(), zmq::socket_type::dealer);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::maxmsgsize, Limits::kMaxFrameBytes);
    if (address.find('[') != std::string::npos) socket->set(zmq::sockopt::ipv6, 1);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("gloo rendezvous store client: ", e.what()));
  }
  if (curve.has_value()) VLLM_RETURN_IF_ERROR(ipc::MakeCurveClient(*socket, *curve));
  try {
    socket->connect(address);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo rendezvous store address '", address, "': ", e.what()));
  }
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(*socket), address, deadline));
}

TcpStoreClient::~TcpStoreClient() = default;

std::optional<std::vector<zmq::message_t>> TcpStoreClient::Call(std::vector<zmq::message_t> request,
                                                                Clock::time_point until) {
  ++seq_;
  request.insert(request.begin(), zmq::message_t(&seq_, sizeof(seq_)));
  auto wait_for = [&](short events) {
    while (true) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
      zmq::pollitem_t item{socket_.handle(), 0, events, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(std::max<int64_t>(0, left)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw gloo::IoException(absl::StrCat("zmq poll: ", e.what()));
      }
      if (item.revents & events) return true;
      if (Clock::now() >= until) return false;
    }
  };
  try {
    for (size_t i = 0; i < request.size(); ++i) {
      const auto flags =
          zmq::send_flags::dontwait |
          (i + 1 < request.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      while (!Send(socket_, request[i], flags)) {
        if (!wait_for(ZMQ_POLLOUT)) return std::nullopt;  // only the first part can block
      }
    }
    while (true) {
      if (!wait_for(ZMQ_POLLIN)) return std::nullopt;
      std::vector<zmq::message_t> reply;
      bool more = true;
      while (more) {
        zmq::message_t msg;
        if (!Recv(socket_, msg, zmq::recv_flags::none)) break;
        more = msg.more();
        if (reply.size() < kMaxRequestParts) reply.push_back(std::move(msg));
      }
      answered_ = true;
      // A reply to an earlier request that timed out is dropped.
      if (reply.empty() || reply[0].size() != sizeof(seq_) ||
          std::memcmp(reply[0].data(), &seq_, sizeof(seq_)) != 0) {
        continue;
      }
      if (reply.size() < 2) {
        throw gloo::IoException(
            absl::StrCat("gloo rendezvous store ", address_, " sent a reply without a status"));
      }
      reply.erase(reply.begin());
      return reply;
    }
  } catch (const zmq::error_t& e) {
    throw gloo::IoException(absl::StrCat("gloo rendezvous store ", address_, ": ", e.what()));
  }
}

void TcpStoreClient::ThrowTimeout(absl::string_view doing,
                                  const std::vector<std::string>& keys) const {
  const int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - connected_).count();
  const std::string head =
      absl::StrCat("timed out ", ms, " ms after connecting to the gloo ", "rendezvous store ",
                   address_, ", ", doing, " key(s) ", QuoteKeys(keys));
  if (!answered_) {
    throw gloo::IoException(absl::StrCat(
        head, ": it did not answer (not reachable, gone, or it refused this process's CURVE key)"));
  }
  throw gloo::IoException(head);
}

void TcpStoreClient::ThrowRefused(absl::string_view op, absl::string_view key,
                                  absl::string_view why) const {
  throw gloo::IoException(absl::StrCat("gloo rendezvous store ", address_, " refused ", op,
                                       " of key ", Quote(key), ": ", why));
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  if (std::string p = KeyProblem(key); !p.empty()) ThrowRefused(kSet, key, p);
  if (std::string p = ValueProblem(data.size()); !p.empty()) {
    ThrowRefused(kSet, key, p);
  }
  std::vector<zmq::message_t> request;
  request.push_back(Msg(kSet));
  request.push_back(Msg(key));
  request.emplace_back(data.data(), data.size());
  std::optional<std::vector<zmq::message_t>> reply = Call(std::move(request), deadline_);
  if (!reply.has_value()) ThrowTimeout("setting", {key});
  if (View((*reply)[0]) != kOk) ThrowRefused(kSet, key, WhyRefused(*reply));
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  if (std::string p = KeyProblem(key); !p.empty()) ThrowRefused(kGet, key, p);
  auto pause = std::chrono::microseconds(200);
  while (true) {
    std::vector<zmq::message_t> request;
    request.push_back(Msg(kGet));
    request.push_back(Msg(key));
    std::optional<std::vector<zmq::message_t>> reply = Call(std::move(request), deadline_);
    if (!reply.has_value()) ThrowTimeout("waiting for", {key});
    const absl::string_view status = View((*reply)[0]);
    if (status == kValue && reply->size() == 2) {
      const absl::string_view value = View((*reply)[1]);
      return std::vector<char>(value.begin(), value.end());
    }
    if (status != kMissing) ThrowRefused(kGet, key, WhyRefused(*reply));
    Pause(pause, deadline_, [&] { ThrowTimeout("waiting for", {key}); });
  }
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, gloo::kNoTimeout); }

void TcpStoreClient::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) {
    if (std::string p = KeyProblem(key); !p.empty()) {
      ThrowRefused(kCheck, key, p);
    }
  }
  Clock::time_point until = deadline_;
  if (timeout != gloo::kNoTimeout) until = std::min(until, Clock::now() + timeout);
  std::vector<std::string> missing = keys;
  auto pause = std::chrono::microseconds(200);
  while (!missing.empty()) {
    std::vector<std::string> still;
    for (size_t begin = 0; begin < missing.size(); begin += Limits::kMaxCheckKeys) {
      const size_t end = std::min(missing.size(), begin + Limits::kMaxCheckKeys);
      std::vector<zmq::message_t> request;
      request.push_back(Msg(kCheck));
      for (size_t i = begin; i < end; ++i) request.push_back(Msg(missing[i]));
      std::optional<std::vector<zmq::message_t>> reply = Call(std::move(request), until);
      if (!reply.has_value()) ThrowTimeout("waiting for", missing);
      const absl::string_view status = View((*reply)[0]);
      if (status == kMissing) {
        for (size_t i = 1; i < reply->size(); ++i) still.emplace_back(View((*reply)[i]));
      } else if (status != kOk) {
        ThrowRefused(kCheck, missing[begin], WhyRefused(*reply));
      }
    }
    missing = std::move(still);
    if (missing.empty()) return;
    Pause(pause, until, [&] { ThrowTimeout("waiting for", missing); });
  }
}

}  // namespace vllm::kernels::comm
