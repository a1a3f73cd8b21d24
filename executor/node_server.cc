#include "executor/node_server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "ipc/zmq_util.h"
#include "spdlog/spdlog.h"

namespace vllm::executor {
namespace {

std::string Ranks(int32_t node, int32_t local) {
  return local == 1 ? absl::StrCat("rank ", node * local)
                    : absl::StrCat("ranks ", node * local, "..", node * local + local - 1);
}

}  // namespace

NodeServer::NodeServer(const NodeServerOptions& options)
    : options_(options), socket_(ipc::ZmqContext(), zmq::socket_type::router) {}

NodeServer::~NodeServer() {
  try {
    socket_.unbind(address_);  // frees the port now, not when the socket's linger ends
  } catch (const zmq::error_t&) {
  }
}

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Bind(const NodeServerOptions& options) {
  const config::ParallelConfig& p = options.config.parallel;
  std::unique_ptr<NodeServer> server(new NodeServer(options));
  server->nodes_.resize(p.nnodes_within_dp());
  const std::string& host = options.bind_host.empty() ? p.master_addr : options.bind_host;
  server->address_ = host.find(':') == std::string::npos
                         ? absl::StrCat("tcp://", host, ":", p.master_port)
                         : absl::StrCat("tcp://[", host, "]:", p.master_port);
  zmq::socket_t& s = server->socket_;
  s.set(zmq::sockopt::linger, 1000);  // a STOP at shutdown still leaves
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxNodeFrameBytes));
  if (host.find(':') != std::string::npos) s.set(zmq::sockopt::ipv6, 1);
  if (options.curve.has_value()) {
    VLLM_RETURN_IF_ERROR(ipc::MakeCurveServer(s, *options.curve));
  } else {
    spdlog::warn(
        "the sockets between the nodes ({} and the queues' TCP ports) admit anyone who can "
        "reach them: pass --cluster-key-file on every node to require the cluster key (CURVE)",
        server->address_);
  }
  // The previous engine of this process may have closed its server on the same port an
  // instant ago: ZMQ releases a listener asynchronously, so EADDRINUSE is retried briefly.
  const absl::Time until = absl::Now() + options.bind_retry;
  while (true) {
    try {
      s.bind(server->address_);
      break;
    } catch (const zmq::error_t& e) {
      if (e.num() == EADDRINUSE && absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      return absl::UnavailableError(absl::StrFormat(
          "--master-addr %s --master-port %d: the head (node rank 0) cannot listen there for the "
          "other nodes (%s); give an address of this node and a free port",
          p.master_addr, p.master_port, e.what()));
    }
  }
  return server;
}

NodeReject NodeServer::Check(const NodeHello& h, const std::string& identity) const {
  const config::ParallelConfig& p = options_.config.parallel;
  const int32_t n = static_cast<int32_t>(nodes_.size());
  auto differs = [&](const char* flag, int64_t theirs, int64_t ours) {
    return NodeReject{flag, absl::StrFormat("node rank %d runs with %s %d, the head with %s %d: "
                                            "give every node the same %s",
                                            h.node_rank, flag, theirs, flag, ours, flag)};
  };
  if (h.nnodes != p.nnodes) return differs("--nnodes", h.nnodes, p.nnodes);
  if (h.node_rank < 1 || h.node_rank >= n) {
    return NodeReject{"--node-rank",
                      absl::StrFormat("--node-rank %d: the head expects node ranks 1..%d to join "
                                      "it (node rank 0 is the head)",
                                      h.node_rank, n - 1)};
  }
  if (h.tensor_parallel_size != p.tensor_parallel_size) {
    return differs("--tensor-parallel-size", h.tensor_parallel_size, p.tensor_parallel_size);
  }
  if (h.pipeline_parallel_size != p.pipeline_parallel_size) {
    return differs("--pipeline-parallel-size", h.pipeline_parallel_size, p.pipeline_parallel_size);
  }
  if (h.data_parallel_size != p.data_parallel_size) {
    return differs("--data-parallel-size", h.data_parallel_size, p.data_parallel_size);
  }
  if (h.model != options_.config.model.model) {
    return NodeReject{"--model",
                      absl::StrFormat("node rank %d serves '%s', the head '%s': give "
                                      "every node the same model",
                                      h.node_rank, h.model, options_.config.model.model)};
  }
  const Node& node = nodes_[h.node_rank];
  if (!node.identity.empty() && node.identity != identity) {
    return NodeReject{"--node-rank",
                      absl::StrFormat("node rank %d has joined already (from %s, pid %d): give "
                                      "each node its own --node-rank",
                                      h.node_rank, node.address, node.pid)};
  }
  return {};
}

void NodeServer::Send(const std::string& identity, const NodeMessage& message) {
  const std::string bytes = EncodeNodeMessage(message);
  try {
    // Never blocks: a node that is gone loses the message (ROUTER drops it).
    if (socket_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      (void)socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t& e) {
    spdlog::warn("node handshake: cannot send {}: {}", NodeMessageKind(message), e.what());
  }
}

bool NodeServer::NextFrame(bool handshake, std::string& identity, NodeMessage& message) {
  std::vector<zmq::message_t> parts;
  while (ipc::TryRecvMultipart(socket_, parts, 3)) {
    if (parts.size() != 2) continue;
    identity = parts[0].to_string();
    absl::StatusOr<NodeMessage> m = DecodeNodeMessage(parts[1].to_string_view());
    if (m.ok()) {
      message = std::move(*m);
      return true;
    }
    if (!handshake) continue;
    spdlog::warn("node handshake: a frame refused: {}", m.status().ToString());
    if (absl::IsFailedPrecondition(m.status())) {
      Send(identity, NodeReject{"", std::string(m.status().message())});
    }
  }
  return false;
}

absl::Status NodeServer::AwaitNodes(NodeConfig config, absl::Time deadline,
                                    const std::function<absl::Status()>& check) {
  config.heartbeat_interval_ms = absl::ToInt64Milliseconds(options_.heartbeat_interval);
  config.heartbeat_timeout_ms = absl::ToInt64Milliseconds(options_.heartbeat_timeout);
  const int32_t n = static_cast<int32_t>(nodes_.size());
  const int32_t local = options_.config.parallel.local_world_size();
  spdlog::info("waiting for node ranks 1..{} to join at {} (--nnodes {})", n - 1, address_,
               options_.config.parallel.nnodes);
  auto joined = [&] {
    return std::count_if(nodes_.begin() + 1, nodes_.end(),
                         [](const Node& node) { return !node.identity.empty(); });
  };
  absl::Time next_beat = absl::Now();
  while (joined() < n - 1) {
    VLLM_RETURN_IF_ERROR(check());
    if (absl::Now() >= next_beat) {
      // The nodes that joined already wait for the others too, and take a silent head as gone.
      for (int32_t r = 1; r < n; ++r) {
        if (!nodes_[r].identity.empty()) Send(nodes_[r].identity, NodeHeartbeat{});
      }
      next_beat = absl::Now() + options_.heartbeat_interval;
    }
    if (absl::Now() >= deadline) {
      std::vector<int32_t> missing;
      for (int32_t r = 1; r < n; ++r) {
        if (nodes_[r].identity.empty()) missing.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrFormat(
          "node rank(s) %s did not join the head at %s in time: start them with the same flags "
          "plus --node-rank R --headless, --master-addr / --master-port naming this node (and "
          "the same --cluster-key-file)",
          absl::StrJoin(missing, ", "), address_));
    }
    zmq::pollitem_t item = {socket_.handle(), 0, ZMQ_POLLIN, 0};
    ipc::PollItems(&item, 1, absl::Milliseconds(50));
    std::string identity;
    NodeMessage m;
    while (NextFrame(/*handshake=*/true, identity, m)) {
      const NodeHello* hello = std::get_if<NodeHello>(&m);
      if (hello == nullptr) {
        // A joined node's heartbeat (or a frame of some node's earlier session).
        for (Node& node : nodes_) {
          if (node.identity == identity) node.last_seen = absl::Now();
        }
        continue;
      }
      NodeReject reject = Check(*hello, identity);
      if (!reject.flag.empty()) {
        spdlog::warn("node handshake: refused node rank {} at {}: {}", hello->node_rank,
                     hello->node_address, reject.message);
        Send(identity, reject);
        continue;
      }
      Node& node = nodes_[hello->node_rank];
      if (node.identity == identity) {
        Send(identity, config);  // its HELLO again: the CONFIG may have crossed it
        continue;
      }
      node.identity = identity;
      node.address = hello->node_address;
      node.pid = hello->pid;
      node.last_seen = absl::Now();
      Send(identity, config);
      spdlog::info("node rank {} joined from {} (pid {}): worker {}", hello->node_rank,
                   node.address, node.pid, Ranks(hello->node_rank, local));
    }
  }
  next_heartbeat_ = absl::Now();
  return absl::OkStatus();
}

std::string NodeServer::DescribeNodeOf(int32_t rank) const {
  const int32_t node = options_.config.parallel.node_of_rank(rank);
  if (node == 0) return "node 0 (the head)";
  if (node < 0 || node >= static_cast<int32_t>(nodes_.size())) return absl::StrCat("node ", node);
  return absl::StrCat("node ", node, " (", nodes_[node].address, ")");
}

std::vector<NodeServer::Event> NodeServer::Service() {
  std::vector<Event> events;
  const absl::Time now = absl::Now();
  const config::ParallelConfig& p = options_.config.parallel;
  std::string identity;
  NodeMessage m;
  while (NextFrame(/*handshake=*/false, identity, m)) {
    auto it = std::find_if(nodes_.begin() + 1, nodes_.end(),
                           [&](const Node& node) { return node.identity == identity; });
    if (const NodeHello* hello = std::get_if<NodeHello>(&m)) {
      if (it != nodes_.end()) continue;  // a joined node's HELLO, sent again before CONFIG came
      // A node that started again (its ranks of this engine died with it), or a stranger.
      const bool ours =
          hello->node_rank >= 1 && hello->node_rank < static_cast<int32_t>(nodes_.size());
      Send(identity, NodeReject{"", "this engine is running already; it is not joined again"});
      if (ours && !nodes_[hello->node_rank].lost) {
        nodes_[hello->node_rank].lost = true;
        events.push_back({-1, absl::UnavailableError(absl::StrFormat(
                                  "node %d (%s) joined again: its workers of this engine are gone",
                                  hello->node_rank, hello->node_address))});
      }
      continue;
    }
    if (it == nodes_.end()) continue;  // not a node of this engine
    it->last_seen = now;
    if (const NodeWorkerExited* exited = std::get_if<NodeWorkerExited>(&m)) {
      const int32_t node = static_cast<int32_t>(it - nodes_.begin());
      if (exited->rank < 0 || exited->rank >= p.world_size() ||
          p.node_of_rank(exited->rank) != node) {
        continue;  // not one of that node's ranks
      }
      events.push_back({exited->rank, absl::UnavailableError(absl::StrFormat(
                                          "worker rank %d (pipeline stage %d) on %s %s",
                                          exited->rank, exited->rank / p.tensor_parallel_size,
                                          DescribeNodeOf(exited->rank), exited->how))});
    }
  }
  for (size_t r = 1; r < nodes_.size(); ++r) {
    Node& node = nodes_[r];
    if (node.lost || node.identity.empty() || now - node.last_seen <= options_.heartbeat_timeout) {
      continue;
    }
    node.lost = true;
    events.push_back({-1, absl::UnavailableError(absl::StrFormat(
                              "node %d (%s, worker %s) sent nothing for %s: the node or the link "
                              "to it is down",
                              r, node.address, Ranks(static_cast<int32_t>(r), p.local_world_size()),
                              absl::FormatDuration(options_.heartbeat_timeout)))});
  }
  if (!stopped_ && now >= next_heartbeat_) {
    for (size_t r = 1; r < nodes_.size(); ++r) {
      if (!nodes_[r].identity.empty()) Send(nodes_[r].identity, NodeHeartbeat{});
    }
    next_heartbeat_ = now + options_.heartbeat_interval;
  }
  return events;
}

void NodeServer::StopAll(const std::string& reason) {
  if (stopped_) return;
  stopped_ = true;
  for (size_t r = 1; r < nodes_.size(); ++r) {
    if (!nodes_[r].identity.empty()) Send(nodes_[r].identity, NodeStop{reason});
  }
}

}  // namespace vllm::executor
