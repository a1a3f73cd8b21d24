// A key-value store over ZMQ TCP for gloo's rendezvous between the ranks of a group that spans
// several nodes (gloo's FileStore needs a directory every rank can see; Debian's gloo has no
// TCPStore).
//
//   executor (head node)                           worker of rank r (any node)
//   ---------------------------------------        ---------------------------------------------
//   server = StoreServer::Start(head_ip, keys)
//   hand server->address() to the workers    ->    client = TcpStoreClient::Connect(address,
//                                                                                    keys, timeout)
//                                                  context->connectFullMesh(*client, device)
//
// StoreServer: a ZMQ ROUTER bound to tcp://<host>:<free port>, served by its own thread until
// the server is destroyed. With CURVE keys (ipc/curve.h: the cluster key) it admits only clients
// holding the same key and the traffic is encrypted; without, anyone who reaches the port can
// read and write keys. gloo's own pair connections (which carry the all-reduce data) are plain
// TCP without authentication either way, as in PyTorch's gloo backend: the nodes' network must be
// trusted.
//
// Protocol: plain ZMQ multipart frames (no serialisation format). A request from a DEALER is
//   [seq] [op] [args...]
// where seq is an opaque frame of at most 8 bytes echoed in the reply [seq] [status] [...]:
//   SET key value   -> ok                         (overwrites an existing key)
//   GET key         -> value <bytes> | missing
//   CHECK key...    -> ok | missing key...        (1..kMaxCheckKeys keys; lists the absent ones)
//   anything else   -> error <message>            (bad op, frame count or size, store full)
// Bounds (checked before any use): keys 1..kMaxKeyBytes bytes, values at most kMaxValueBytes,
// at most kMaxKeys keys; a frame over kMaxFrameBytes disconnects its sender (ZMQ_MAXMSGSIZE).
// A malformed request gets an error reply; nothing a client sends stops the server.
#ifndef VLLM_KERNELS_COMM_TCP_STORE_H_
#define VLLM_KERNELS_COMM_TCP_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "ipc/curve.h"

namespace vllm::kernels::comm {

// Limits of the store's protocol (see the file comment).
struct TcpStoreLimits {
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxValueBytes = size_t{64} << 10;
  static constexpr size_t kMaxKeys = 4096;
  static constexpr size_t kMaxCheckKeys = 64;
  static constexpr size_t kMaxSeqBytes = 8;
  static constexpr int64_t kMaxFrameBytes = int64_t{1} << 20;
};

class StoreServer {
 public:
  // Binds tcp://<host>:<free port>; `host` is an address of this node that the clients can
  // reach: an IP, a host name (bound at the address it resolves to, IPv4 preferred) or an
  // interface name; not a wildcard (InvalidArgument). With `curve`, a CURVE server admitting
  // only holders of the same keys. Unavailable when it cannot bind, Internal when the socket or
  // the thread cannot be made.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<StoreServer>> Start(
      absl::string_view host, const std::optional<ipc::CurveKeys>& curve = std::nullopt);
  // Stops the serving thread (within milliseconds) and closes the socket.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // "tcp://<ip>:<port>" ("tcp://[<ipv6>]:<port>"): what clients connect to.
  const std::string& address() const { return address_; }

 private:
  StoreServer(zmq::socket_t socket, int stop_fd, std::string address);
  void Serve();  // the serving thread
  // Handles one request (`parts[0]` is the sender's routing id) and sends the reply.
  void Handle(std::vector<zmq::message_t>& parts, bool truncated);

  zmq::socket_t socket_;  // used by the serving thread only, once it runs
  const int stop_fd_;     // eventfd: readable once the destructor asks the thread to stop
  const std::string address_;
  std::unordered_map<std::string, std::string> values_;  // the serving thread's only
  std::thread thread_;
};

// gloo::rendezvous::Store over a StoreServer, bounded by one deadline set at construction:
// every call ends by it (wait(keys, timeout) sooner if its timeout is shorter). set() waits for
// the server's acknowledgement; get() and wait() ask the server again every <= 10 ms until the
// keys exist. Failures throw gloo::IoException (gloo's convention, caught by gloo's callers and
// by GlooCommunicator): on a deadline "timed out ..." naming the store's address and the keys —
// and saying the store did not answer at all when no reply ever came (not reachable, gone, or
// it refused this client's CURVE key) — and "... refused ..." with the server's message for an
// error reply. Not thread-safe: one thread uses a client.
class TcpStoreClient final : public gloo::rendezvous::Store {
 public:
  // Connects (asynchronously, ZMQ reconnects until the deadline) to `address` (a StoreServer's
  // address()); with `curve` as a CURVE client with the cluster key. The deadline is now +
  // `timeout`. InvalidArgument for an address that is not tcp://..., Internal when the socket
  // cannot be made.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(
      const std::string& address, const std::optional<ipc::CurveKeys>& curve,
      absl::Duration timeout);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  const std::string& address() const { return address_; }

 private:
  using Clock = std::chrono::steady_clock;

  TcpStoreClient(zmq::socket_t socket, std::string address, Clock::time_point deadline)
      : socket_(std::move(socket)),
        address_(std::move(address)),
        connected_(Clock::now()),
        deadline_(deadline) {}
  // Sends `request` (without seq) and returns the reply's frames after seq; nullopt when
  // `until` passed first. Throws gloo::IoException for a reply without a status.
  std::optional<std::vector<zmq::message_t>> Call(std::vector<zmq::message_t> request,
                                                  Clock::time_point until);
  [[noreturn]] void ThrowTimeout(absl::string_view doing,
                                 const std::vector<std::string>& keys) const;
  [[noreturn]] void ThrowRefused(absl::string_view op, absl::string_view key,
                                 absl::string_view why) const;

  zmq::socket_t socket_;  // DEALER
  const std::string address_;
  const Clock::time_point connected_;  // when Connect() made the client
  const Clock::time_point deadline_;
  uint64_t seq_ = 0;       // of the last request
  bool answered_ = false;  // any reply came: the server is reachable and admitted us
};

}  // namespace vllm::kernels::comm

#endif  // VLLM_KERNELS_COMM_TCP_STORE_H_
