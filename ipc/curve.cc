#include "ipc/curve.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "ipc/zmq_util.h"
#include "spdlog/spdlog.h"

namespace vllm::ipc {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr size_t kKeyBytes = 32;
constexpr size_t kMaxKeyFileBytes = 4096;
constexpr absl::string_view kZapEndpoint = "inproc://zeromq.zap.01";
constexpr absl::string_view kZapDomainPrefix = "vllm-curve/";
constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);

// Decodes a 40-character Z85 key; false when it is not one.
bool DecodeKey(absl::string_view z85, std::array<uint8_t, kKeyBytes>& out) {
  if (z85.size() != kZ85KeyChars) return false;
  const std::string terminated(z85);
  return zmq_z85_decode(out.data(), terminated.c_str()) != nullptr;
}

// ---------------------------------------------------------------------------------------------
// The ZAP handler (RFC 27): one REP socket on inproc://zeromq.zap.01, one thread, started once.
//
// Request frames: version "1.0", request id, domain, address, routing id, mechanism,
// credentials... (CURVE: one frame, the client's 32-byte public key).
// Reply frames: version "1.0", request id, status code ("200" or "400"), status text, user id,
// metadata (empty).

struct ZapState {
  absl::Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;
  pid_t pid ABSL_GUARDED_BY(mu) = 0;                  // the process that started the thread
  std::thread* thread ABSL_GUARDED_BY(mu) = nullptr;  // joined at exit (StopZapAtExit)
  std::string stop_address ABSL_GUARDED_BY(mu);       // inproc PAIR: any frame stops it
};

ZapState& Zap() {
  static ZapState* z = new ZapState;  // leaked: used by the atexit hook
  return *z;
}

std::string Frame(const zmq::message_t& m) { return std::string(m.to_string_view()); }

// Decides one request: empty string to accept, else why it is refused.
std::string Refusal(const std::vector<zmq::message_t>& req) {
  if (req.size() < 6 || req[0].to_string_view() != "1.0") return "malformed ZAP request";
  const std::string domain = Frame(req[2]);
  const std::string mechanism = Frame(req[5]);
  if (!absl::StartsWith(domain, kZapDomainPrefix)) return "no such ZAP domain";
  if (mechanism != "CURVE" || req.size() != 7 || req[6].size() != kKeyBytes) {
    return "not a CURVE client";
  }
  std::array<uint8_t, kKeyBytes> allowed{};
  if (!DecodeKey(absl::string_view(domain).substr(kZapDomainPrefix.size()), allowed)) {
    return "bad ZAP domain";
  }
  if (std::memcmp(allowed.data(), req[6].data(), kKeyBytes) != 0) return "not the cluster key";
  return "";
}

void ServeZap(zmq::socket_t socket, zmq::socket_t stop) {
  std::vector<zmq::message_t> req;
  absl::Time last_log = absl::InfinitePast();
  uint64_t refused_since_log = 0;
  while (true) {
    req.clear();
    try {
      // Waits for libzmq's next request, or the stop frame sent at exit: no deadline by design,
      // it serves for the life of the process.
      zmq::pollitem_t items[2] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                  {stop.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) return;
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      do {
        req.emplace_back();
        (void)socket.recv(req.back(), zmq::recv_flags::none);
      } while (req.back().more() && req.size() < 16);
      while (req.back().more()) {  // more frames than any mechanism sends: drain them
        zmq::message_t rest;
        (void)socket.recv(rest, zmq::recv_flags::none);
        if (!rest.more()) break;
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("ZAP handler stopped: {}", e.what());
      return;
    }
    const std::string refusal = Refusal(req);
    if (!refusal.empty()) {
      ++refused_since_log;
      if (absl::Now() - last_log >= kRefusalLogInterval) {
        spdlog::warn("CURVE: refused {} connection(s) (latest from {}: {})", refused_since_log,
                     req.size() > 3 ? Frame(req[3]) : std::string("?"), refusal);
        last_log = absl::Now();
        refused_since_log = 0;
      }
    }
    const std::string request_id = req.size() > 1 ? Frame(req[1]) : std::string();
    const std::array<std::string, 6> reply = {
        "1.0", request_id, refusal.empty() ? "200" : "400", refusal.empty() ? "OK" : refusal,
        "",    ""};
    try {
      for (size_t i = 0; i < reply.size(); ++i) {
        (void)socket.send(zmq::buffer(reply[i]),
                          i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      spdlog::error("ZAP handler stopped: {}", e.what());
      return;
    }
  }
}

// Stops and joins the ZAP thread at exit, before the static destructors (spdlog's among
// them, which it logs with) run: registered after spdlog's registry was constructed.
void StopZapAtExit() {
  ZapState& z = Zap();
  std::thread* thread = nullptr;
  std::string address;
  {
    absl::MutexLock lock(&z.mu);
    if (z.thread == nullptr || z.pid != getpid()) return;  // a forked child has no such thread
    thread = std::exchange(z.thread, nullptr);
    address = z.stop_address;
  }
  bool sent = false;
  try {
    zmq::socket_t s(ZmqContext(), zmq::socket_type::pair);
    s.set(zmq::sockopt::linger, 0);
    s.connect(address);  // inproc: the pipe exists once connect returns
    sent = s.send(zmq::str_buffer("stop"), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
  }
  if (sent) {
    thread->join();
  } else {
    thread->detach();
  }
  delete thread;  // joined or detached: the object itself is no longer needed
}

absl::Status EnsureZapHandler() {
  ZapState& z = Zap();
  absl::MutexLock lock(&z.mu);
  if (z.started) return absl::OkStatus();
  zmq::socket_t socket(ZmqContext(), zmq::socket_type::rep);
  zmq::socket_t stop(ZmqContext(), zmq::socket_type::pair);
  const std::string stop_address = absl::StrCat("inproc://vllm-zap-stop-", UniqueToken());
  try {
    socket.set(zmq::sockopt::linger, 0);
    stop.set(zmq::sockopt::linger, 0);
    stop.bind(stop_address);
    // Bound here, before any CURVE server exists: libzmq lets every client in when no ZAP
    // handler is bound.
    socket.bind(std::string(kZapEndpoint));
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot start the ZAP handler on ", kZapEndpoint,
                                            " (another one in this process?): ", e.what()));
  }
  (void)spdlog::default_logger();  // constructs spdlog's registry before the atexit hook below
  // The sockets move to the thread; starting a thread is a full memory barrier, as ZMQ
  // requires for handing a socket over.
  z.thread = new std::thread([s = std::move(socket), t = std::move(stop)]() mutable {
    pthread_setname_np(pthread_self(), "vllm-zap");  // answers libzmq's CURVE auth requests
    ServeZap(std::move(s), std::move(t));
  });
  z.pid = getpid();
  z.stop_address = stop_address;
  z.started = true;
  std::atexit(StopZapAtExit);
  return absl::OkStatus();
}

absl::Status SetKey(zmq::socket_t& socket, int option, const std::string& z85) {
  if (zmq_setsockopt(socket.handle(), option, z85.c_str(), z85.size()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CURVE key option ", option, ": ", zmq_strerror(zmq_errno())));
  }
  return absl::OkStatus();
}

absl::Status CheckKeys(const CurveKeys& keys) {
  std::array<uint8_t, kKeyBytes> unused{};
  if (!DecodeKey(keys.public_key, unused) || !DecodeKey(keys.secret_key, unused)) {
    return absl::InvalidArgumentError("CURVE keys must be 40-character Z85 strings");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCurveSupported() {
  if (zmq_has("curve") == 0) {
    return absl::FailedPreconditionError(
        "this libzmq has no CURVE support (it was built without libsodium): authenticated "
        "TCP sockets are unavailable");
  }
  return absl::OkStatus();
}

absl::StatusOr<CurveKeys> GenerateCurveKeys() {
  VLLM_RETURN_IF_ERROR(CheckCurveSupported());
  char pub[kZ85KeyChars + 1] = {};
  char sec[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return absl::InternalError(absl::StrCat("zmq_curve_keypair: ", zmq_strerror(zmq_errno())));
  }
  CurveKeys keys{pub, sec};
  std::memset(sec, 0, sizeof sec);
  return keys;
}

absl::StatusOr<CurveKeys> CurveKeysFromSecret(absl::string_view z85_secret) {
  VLLM_RETURN_IF_ERROR(CheckCurveSupported());
  std::array<uint8_t, kKeyBytes> raw{};
  if (!DecodeKey(z85_secret, raw)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a CURVE secret key is 40 Z85 characters (got ", z85_secret.size(),
        z85_secret.size() == kZ85KeyChars ? " characters, not all Z85)" : " characters)"));
  }
  const std::string secret(z85_secret);
  char pub[kZ85KeyChars + 1] = {};
  if (zmq_curve_public(pub, secret.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("zmq_curve_public: ", zmq_strerror(zmq_errno())));
  }
  return CurveKeys{pub, secret};
}

absl::StatusOr<CurveKeys> LoadCurveKeyFile(const std::string& path) {
  VLLM_RETURN_IF_ERROR(CheckCurveSupported());
  const std::string what = absl::StrCat("cluster key file '", path, "'");
  // O_NONBLOCK: a FIFO must not hang us; fstat below refuses anything but a regular file.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
    return absl::FailedPreconditionError(msg);
  }
  struct stat st {};
  std::string content;
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = absl::InternalError(absl::StrCat(what, ": fstat: ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(absl::StrCat(what, " is not a regular file"));
  } else if ((st.st_mode & 077) != 0) {
    // As ssh does with private keys: a secret others can read is no secret.
    status = absl::PermissionDeniedError(absl::StrFormat(
        "%s is accessible by group or others (mode %04o): it holds the cluster secret; run "
        "'chmod 600 %s'",
        what, st.st_mode & 07777, path));
  } else if (st.st_uid != geteuid() && st.st_uid != 0) {
    status = absl::FailedPreconditionError(absl::StrCat(
        what, " is owned by uid ", st.st_uid, ", not by this user (", geteuid(), ") or root"));
  } else {
    char buf[kMaxKeyFileBytes + 1];
    size_t got = 0;
    while (got < sizeof buf) {
      const ssize_t n = read(fd, buf + got, sizeof buf - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = absl::InternalError(absl::StrCat(what, ": read: ", std::strerror(errno)));
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (status.ok() && got > kMaxKeyFileBytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat(what, " is larger than ", kMaxKeyFileBytes, " bytes: not a key file"));
    }
    content.assign(buf, got);
    std::memset(buf, 0, sizeof buf);
  }
  close(fd);
  VLLM_RETURN_IF_ERROR(status);

  std::vector<absl::string_view> keys;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    keys.push_back(line);
  }
  if (keys.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": expected one line with a 40-character Z85 CURVE secret key ('#' lines are "
                     "comments), found ",
                     keys.size(), " non-comment lines"));
  }
  absl::StatusOr<CurveKeys> parsed = CurveKeysFromSecret(keys[0]);
  std::fill(content.begin(), content.end(), '\0');
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": malformed key: ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<CurveKeys> CreateCurveKeyFile(const std::string& path) {
  VLLM_ASSIGN_OR_RETURN(CurveKeys keys, GenerateCurveKeys());
  const std::string what = absl::StrCat("cluster key file '", path, "'");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
    if (err == EEXIST) return absl::AlreadyExistsError(msg);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
    return absl::FailedPreconditionError(msg);
  }
  const std::string text = absl::StrCat(
      "# vllm-launch cluster key: the CURVE secret key (Z85) shared by the nodes of one cluster.\n"
      "# Keep it secret: mode 0600, never in argv or logs.\n",
      keys.secret_key, "\n");
  absl::Status status;
  if (fchmod(fd, 0600) != 0) {
    status = absl::InternalError(absl::StrCat(what, ": fchmod: ", std::strerror(errno)));
  }
  size_t done = 0;
  while (status.ok() && done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = absl::InternalError(absl::StrCat(what, ": write: ", std::strerror(errno)));
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (status.ok() && fsync(fd) != 0) {
    status = absl::InternalError(absl::StrCat(what, ": fsync: ", std::strerror(errno)));
  }
  close(fd);
  if (!status.ok()) {
    unlink(path.c_str());
    return status;
  }
  return keys;
}

absl::Status MakeCurveServer(zmq::socket_t& socket, const CurveKeys& keys) {
  VLLM_RETURN_IF_ERROR(CheckCurveSupported());
  VLLM_RETURN_IF_ERROR(CheckKeys(keys));
  VLLM_RETURN_IF_ERROR(EnsureZapHandler());
  try {
    socket.set(zmq::sockopt::curve_server, true);
    socket.set(zmq::sockopt::zap_domain, absl::StrCat(kZapDomainPrefix, keys.public_key));
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("CURVE server options: ", e.what()));
  }
  return SetKey(socket, ZMQ_CURVE_SECRETKEY, keys.secret_key);
}

absl::Status MakeCurveClient(zmq::socket_t& socket, const CurveKeys& keys) {
  VLLM_RETURN_IF_ERROR(CheckCurveSupported());
  VLLM_RETURN_IF_ERROR(CheckKeys(keys));
  VLLM_RETURN_IF_ERROR(SetKey(socket, ZMQ_CURVE_SERVERKEY, keys.public_key));
  VLLM_RETURN_IF_ERROR(SetKey(socket, ZMQ_CURVE_PUBLICKEY, keys.public_key));
  return SetKey(socket, ZMQ_CURVE_SECRETKEY, keys.secret_key);
}

}  // namespace vllm::ipc
