// NodeServer: the head's side of a multi-node engine (`--nnodes N`, node_protocol.h). Node 0's
// MultiprocExecutor binds it on --master-addr:--master-port before it spawns any worker, waits
// until every other node has said HELLO with matching flags (refusing, by flag, those that do
// not), and sends each the CONFIG its workers start from. From then on the executor's monitor
// thread services it: heartbeats both ways, a node's report that one of its ranks exited, a node
// that goes silent for the heartbeat timeout (dead, or the link is down), a node that joins
// again (it restarted: its old ranks are gone); each becomes an Event that fails the engine.
// At shutdown the executor sends every node STOP.
//
// Thread-safety: one thread at a time (start-up on the engine's thread, then the monitor's, then
// the engine's again after the monitor has been joined).
#ifndef VLLM_EXECUTOR_NODE_SERVER_H_
#define VLLM_EXECUTOR_NODE_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"
#include "executor/node_protocol.h"
#include "ipc/curve.h"

namespace vllm::executor {

struct NodeServerOptions {
  // The engine's resolved config: its parallel sizes and nodes are what HELLOs must match.
  config::VllmConfig config;
  std::optional<ipc::CurveKeys> curve;  // the cluster key: only its holders get in
  // The numeric address of --master-addr to bind (empty: --master-addr as given).
  std::string bind_host;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // How long Bind retries a port still held by this process's previous server (ZMQ releases a
  // closed listener asynchronously).
  absl::Duration bind_retry = absl::Seconds(3);
};

class NodeServer {
 public:
  // Binds the ROUTER on tcp://master_addr:master_port. Unavailable naming both flags when the
  // address is not this node's or the port is taken.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeServer>> Bind(
      const NodeServerOptions& options);
  ~NodeServer();

  // Waits until nodes 1 .. N-1 have joined and been sent `config` (its heartbeat fields are
  // filled in here). A HELLO that does not fit is answered with REJECT naming the flag and
  // logged, and the wait goes on. `check` is polled (a local worker may die meanwhile).
  // DeadlineExceeded names the missing node ranks and the flags to check.
  [[nodiscard]] absl::Status AwaitNodes(NodeConfig config, absl::Time deadline,
                                        const std::function<absl::Status()>& check);

  // Something that fails the engine: a rank that exited (rank >= 0) or a node lost (rank -1).
  struct Event {
    int32_t rank = -1;
    absl::Status status;
  };
  // The socket to poll for input (ZMQ_POLLIN) and how long to wait at most.
  zmq::socket_t& socket() { return socket_; }
  absl::Duration poll_interval() const { return options_.heartbeat_interval; }
  // Reads what arrived, sends heartbeats when due, checks for silent nodes.
  std::vector<Event> Service();
  // Tells every node that the engine ended (it stops its ranks). Idempotent.
  void StopAll(const std::string& reason);

  // "node 1 (10.0.0.2)" for rank `rank`'s node; "node 0 (the head)" for the head's ranks.
  std::string DescribeNodeOf(int32_t rank) const;

 private:
  struct Node {
    std::string identity;  // the DEALER's routing id; empty until joined
    std::string address;
    int64_t pid = 0;
    absl::Time last_seen;
    bool lost = false;
  };
  explicit NodeServer(const NodeServerOptions& options);
  // The flag and message when `hello` does not fit this engine (flag empty when it fits).
  NodeReject Check(const NodeHello& hello, const std::string& identity) const;
  void Send(const std::string& identity, const NodeMessage& message);
  // The next frame that decodes, and its sender; false when none is waiting. Frames that do not
  // decode are skipped; during the handshake they are logged, and a frame of another protocol
  // version is answered with a REJECT saying so.
  bool NextFrame(bool handshake, std::string& identity, NodeMessage& message);

  const NodeServerOptions options_;
  zmq::socket_t socket_;
  std::string address_;
  std::vector<Node> nodes_;  // by node rank; [0] is the head
  absl::Time next_heartbeat_;
  bool stopped_ = false;
};

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_NODE_SERVER_H_
