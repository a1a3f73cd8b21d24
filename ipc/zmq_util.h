// ZeroMQ helpers shared by ipc/ and the layers above: one process-wide context, sends/receives
// bounded by a deadline that keep checking a caller-supplied condition (cancelled, peer dead),
// and a count of the connections a bound socket accepted. Private ipc:// addresses are in
// ipc_address.h (included here for the callers of UniqueIpcAddress).
#ifndef VLLM_IPC_ZMQ_UTIL_H_
#define VLLM_IPC_ZMQ_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ipc/ipc_address.h"

namespace vllm::ipc {

// The process's ZMQ context, created on first use and never destroyed (so no static
// destruction order issues; every socket we make has linger 0). Not fork-safe: a forked child
// must exec or use only a context it creates itself.
zmq::context_t& ZmqContext();

// A unique token "<pid>-<n>-<random hex>" for naming shared objects of this process.
std::string UniqueToken();

// Binds `socket` to tcp://host:port (port 0: any free port) and returns the endpoint to
// advertise, e.g. "tcp://10.0.0.2:43125". InvalidArgument for a wildcard host.
[[nodiscard]] absl::StatusOr<std::string> BindTcp(zmq::socket_t& socket, absl::string_view host,
                                                  int port);

// vLLM's VLLM_PORT: when set, an internal TCP port chosen automatically (port 0, an endpoint
// ending ":*") is the first free one from VLLM_PORT upward (vLLM's get_open_port: at most
// kVllmPortAttempts tried), not the kernel's pick. nullopt when unset or not a port number
// (the launcher refuses such a value at start-up, before any process binds).
inline constexpr int kVllmPortAttempts = 1000;
std::optional<int> VllmPortBase();
// Binds `socket` to `endpoint` (any ZMQ endpoint); a "tcp://...:*" endpoint follows
// VllmPortBase(). Returns the bound endpoint (ZMQ_LAST_ENDPOINT). Unavailable when it cannot
// bind (for VLLM_PORT: no free port among the attempts, naming the variable).
[[nodiscard]] absl::StatusOr<std::string> BindEndpoint(zmq::socket_t& socket,
                                                       const std::string& endpoint);

// The numeric address to bind a TCP socket at for `host`: an address as it is, a name resolved
// (IPv4 first; ZMQ binds only addresses and interfaces). InvalidArgument when it does not
// resolve.
[[nodiscard]] absl::StatusOr<std::string> NumericHost(absl::string_view host);

// zmq::poll over `items` for up to `timeout` (negative: no limit). A signal interrupting the
// wait (EINTR) is not an error: it returns 0 with every revents cleared, as a timeout would.
// Throws only what zmq::poll throws for other errors (ETERM, EFAULT).
int PollItems(zmq::pollitem_t* items, size_t n, absl::Duration timeout);

// Receives one frame without waiting: false when none is there (EAGAIN) or a signal
// interrupted the call (EINTR).
bool TryRecv(zmq::socket_t& socket, zmq::message_t& message);

// Receives one whole multi-part message without waiting: false when none is there. Keeps its
// first `max_parts` parts in `parts` (cleared first) and reads and drops the rest, so a caller
// expecting n parts passes n + 1 and sees a longer message as parts.size() > n.
bool TryRecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, size_t max_parts);

// Polls one socket for `events` until ready or deadline, calling check() every `slice`;
// returns check()'s error, DeadlineExceeded (with `what`), or OK when ready.
[[nodiscard]] absl::Status PollUntil(zmq::socket_t& socket, short events, int64_t deadline_ns,
                                     absl::Duration slice,
                                     const std::function<absl::Status()>& check,
                                     absl::string_view what);

// Receives one multipart message into `parts` (cleared first) within the deadline. At most
// `max_parts` parts; more is DataLoss.
[[nodiscard]] absl::Status RecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                                         size_t max_parts, int64_t deadline_ns,
                                         absl::Duration slice,
                                         const std::function<absl::Status()>& check,
                                         absl::string_view what);

// Sends `parts` as one multipart message within the deadline (for sockets that refuse with
// EAGAIN at their high-water mark, e.g. XPUB with XPUB_NODROP).
[[nodiscard]] absl::Status SendMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                                         int64_t deadline_ns, absl::Duration slice,
                                         const std::function<absl::Status()>& check,
                                         absl::string_view what);

// Counts the connections a bound socket has accepted (ZMQ_EVENT_ACCEPTED on a socket monitor),
// so that its owner knows when every peer is connected and the ipc:// name can be released even
// where no message proves it (a PULL whose peers have nothing to send yet). Start it after
// bind() and before the address is handed out. Not thread-safe: use it from the thread that
// owns the socket; destroy it before the socket.
class AcceptCounter {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AcceptCounter>> Start(zmq::socket_t& socket);
  ~AcceptCounter();  // stops the monitor
  AcceptCounter(const AcceptCounter&) = delete;
  AcceptCounter& operator=(const AcceptCounter&) = delete;

  // Returns once `n` connections in all have been accepted; check()'s error, or
  // DeadlineExceeded naming `what` and the count so far.
  [[nodiscard]] absl::Status WaitForAccepted(int n, int64_t deadline_ns, absl::Duration slice,
                                             const std::function<absl::Status()>& check,
                                             absl::string_view what);
  int accepted() const { return accepted_; }

 private:
  AcceptCounter(zmq::socket_t& socket, zmq::socket_t events)
      : socket_(socket), events_(std::move(events)) {}
  void Drain();

  zmq::socket_t& socket_;
  zmq::socket_t events_;  // PAIR connected to the monitor
  int accepted_ = 0;
};

}  // namespace vllm::ipc

#endif  // VLLM_IPC_ZMQ_UTIL_H_
