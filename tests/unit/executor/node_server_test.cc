// NodeServer (the head's side of one engine across nodes) against hand-driven worker nodes:
// DEALER sockets on 127.0.0.1 speaking node_protocol.h. A node with the right flags gets
// CONFIG; one with another --nnodes, size, --model, a rank out of range or a rank already taken
// gets REJECT naming the flag while the head keeps waiting; garbage is ignored. After start-up,
// a node's WORKER_EXITED report, its silence past the heartbeat timeout and its HELLO from a
// new process each become an event naming the rank or node; the head heartbeats and STOPs.
#include "executor/node_server.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "config/config_codec.h"
#include "executor/node_protocol.h"
#include "gtest/gtest.h"
#include "ipc/zmq_util.h"
#include "tests/support/process.h"

namespace vllm::executor {
namespace {
// A worker node's socket, driven by hand.
class FakeNode {
 public:
  explicit FakeNode(const std::string& address)
      : socket_(ipc::ZmqContext(), zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(address);
  }
  void Send(const NodeMessage& m) {
    const std::string bytes = EncodeNodeMessage(m);
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  void SendRaw(const std::string& bytes) { socket_.send(zmq::buffer(bytes)); }
  // The next frame within `timeout`, decoded; nullopt when none came.
  std::optional<NodeMessage> Receive(absl::Duration timeout) {
    zmq::pollitem_t item = {socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (ipc::PollItems(&item, 1, timeout) <= 0) return std::nullopt;
    zmq::message_t frame;
    if (!ipc::TryRecv(socket_, frame)) return std::nullopt;
    auto m = DecodeNodeMessage(frame.to_string_view());
    if (!m.ok()) return std::nullopt;
    return *m;
  }

 private:
  zmq::socket_t socket_;
};

class NodeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.config.model.model = "/models/m";
    options_.config.parallel.pipeline_parallel_size = 4;
    options_.config.parallel.nnodes = 4;
    options_.config.parallel.master_addr = "127.0.0.1";
    options_.config.parallel.master_port = testing::FreePort();
    options_.heartbeat_interval = absl::Milliseconds(50);
    options_.heartbeat_timeout = absl::Milliseconds(400);
    auto server = NodeServer::Bind(options_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = absl::StrCat("tcp://127.0.0.1:", options_.config.parallel.master_port);
  }

  NodeHello Hello(int32_t rank) const {
    NodeHello h;
    h.node_rank = rank;
    h.nnodes = 4;
    h.tensor_parallel_size = 1;
    h.pipeline_parallel_size = 4;
    h.data_parallel_size = 1;
    h.model = "/models/m";
    h.node_address = absl::StrCat("10.0.0.", rank + 1);
    h.pid = 100 + rank;
    return h;
  }

  NodeConfig Config() const {
    NodeConfig c;
    c.engine_config = config::EncodeVllmConfig(options_.config);
    c.broadcast_handle = "handle";
    c.ready_address = "tcp://127.0.0.1:1";
    c.comm_specs = {"", "", "", ""};
    c.startup_timeout_ms = 1000;
    return c;
  }

  // The REJECT `node` gets for `hello`, its flag and message.
  static NodeReject ExpectReject(FakeNode& node, const NodeHello& hello) {
    node.Send(hello);
    std::optional<NodeMessage> m = node.Receive(absl::Seconds(10));
    EXPECT_TRUE(m.has_value() && std::holds_alternative<NodeReject>(*m))
        << "no REJECT for node rank " << hello.node_rank;
    if (!m.has_value() || !std::holds_alternative<NodeReject>(*m)) return {};
    return std::get<NodeReject>(*m);
  }

  NodeServerOptions options_;
  std::unique_ptr<NodeServer> server_;
  std::string address_;
};

TEST_F(NodeServerTest, JoinsMatchingNodesAndRefusesTheOthersByFlag) {
  absl::Status joined;
  std::thread head([&] {
    joined = server_->AwaitNodes(Config(), absl::Now() + absl::Seconds(20),
                                 [] { return absl::OkStatus(); });
  });
  FakeNode stranger(address_);
  stranger.SendRaw("not msgpack at all");  // ignored
  NodeHello h = Hello(1);
  h.nnodes = 3;
  NodeReject r = ExpectReject(stranger, h);
  EXPECT_EQ(r.flag, "--nnodes");
  EXPECT_TRUE(absl::StrContains(r.message, "--nnodes 3, the head with --nnodes 4")) << r.message;
  h = Hello(1);
  h.pipeline_parallel_size = 2;
  EXPECT_EQ(ExpectReject(stranger, h).flag, "--pipeline-parallel-size");
  h = Hello(1);
  h.model = "/models/other";
  EXPECT_EQ(ExpectReject(stranger, h).flag, "--model");
  EXPECT_EQ(ExpectReject(stranger, Hello(4)).flag, "--node-rank");

  std::vector<std::unique_ptr<FakeNode>> nodes;
  for (int32_t rank = 1; rank <= 3; ++rank) {
    nodes.push_back(std::make_unique<FakeNode>(address_));
    nodes.back()->Send(Hello(rank));
    std::optional<NodeMessage> m = nodes.back()->Receive(absl::Seconds(10));
    ASSERT_TRUE(m.has_value() && std::holds_alternative<NodeConfig>(*m)) << "rank " << rank;
    const NodeConfig& c = std::get<NodeConfig>(*m);
    EXPECT_EQ(c.broadcast_handle, "handle");
    EXPECT_EQ(c.heartbeat_interval_ms, 50);
    EXPECT_EQ(c.heartbeat_timeout_ms, 400);
    if (rank == 1) {
      // A second process claiming rank 1 is refused by flag.
      NodeReject taken = ExpectReject(stranger, Hello(1));
      EXPECT_EQ(taken.flag, "--node-rank");
      EXPECT_TRUE(absl::StrContains(taken.message, "has joined already (from 10.0.0.2"))
          << taken.message;
    }
  }
  head.join();
  ASSERT_TRUE(joined.ok()) << joined;
  EXPECT_EQ(server_->DescribeNodeOf(2), "node 2 (10.0.0.3)");
  EXPECT_EQ(server_->DescribeNodeOf(0), "node 0 (the head)");

  // A report of node 2's rank becomes an event naming it; a rank of another node is ignored.
  nodes[1]->Send(NodeWorkerExited{1, "exited with status 3"});  // not node 2's
  nodes[1]->Send(NodeWorkerExited{2, "was killed by signal 9 (Killed)"});
  std::vector<NodeServer::Event> events;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (events.empty() && absl::Now() < until) {
    for (auto& n : nodes) n->Send(NodeHeartbeat{});
    zmq::pollitem_t item = {server_->socket().handle(), 0, ZMQ_POLLIN, 0};
    ipc::PollItems(&item, 1, server_->poll_interval());
    events = server_->Service();
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rank, 2);
  EXPECT_TRUE(absl::StrContains(events[0].status.message(),
                                "worker rank 2 (pipeline stage 2) on node 2 (10.0.0.3) was killed"))
      << events[0].status;

  // Nodes 1 and 3 go quiet; node 2 keeps beating: two "sent nothing" events, for 1 and 3.
  // The server heartbeats every node meanwhile.
  std::vector<int> lost;
  const absl::Time silence_until = absl::Now() + absl::Seconds(10);
  while (lost.size() < 2 && absl::Now() < silence_until) {
    nodes[1]->Send(NodeHeartbeat{});
    zmq::pollitem_t item = {server_->socket().handle(), 0, ZMQ_POLLIN, 0};
    ipc::PollItems(&item, 1, server_->poll_interval());
    for (const NodeServer::Event& e : server_->Service()) {
      EXPECT_EQ(e.rank, -1);
      EXPECT_TRUE(absl::StrContains(e.status.message(), "sent nothing for")) << e.status;
      lost.push_back(absl::StrContains(e.status.message(), "node 1 (") ? 1 : 3);
    }
  }
  EXPECT_EQ(lost.size(), 2u);
  std::optional<NodeMessage> beat = nodes[0]->Receive(absl::Seconds(5));
  ASSERT_TRUE(beat.has_value());
  EXPECT_TRUE(std::holds_alternative<NodeHeartbeat>(*beat));

  server_->StopAll("the engine shut down");
  bool stopped = false;
  while (!stopped) {
    std::optional<NodeMessage> m = nodes[1]->Receive(absl::Seconds(5));
    if (!m.has_value()) break;
    stopped = std::holds_alternative<NodeStop>(*m);
  }
  EXPECT_TRUE(stopped);
}

TEST_F(NodeServerTest, NodesThatNeverComeAreNamedAtTheDeadline) {
  FakeNode one(address_);
  bool heard = false;  // a joined node hears heartbeats while the head waits for the others
  std::thread joiner([&] {
    one.Send(Hello(2));
    std::optional<NodeMessage> config = one.Receive(absl::Seconds(5));
    if (!config.has_value() || !std::holds_alternative<NodeConfig>(*config)) return;
    std::optional<NodeMessage> beat = one.Receive(absl::Milliseconds(700));
    heard = beat.has_value() && std::holds_alternative<NodeHeartbeat>(*beat);
  });
  const absl::Status s = server_->AwaitNodes(Config(), absl::Now() + absl::Milliseconds(800),
                                             [] { return absl::OkStatus(); });
  joiner.join();
  EXPECT_TRUE(heard) << "no heartbeat to the node that joined";
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "node rank(s) 1, 3 did not join")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--master-addr")) << s;
}

TEST_F(NodeServerTest, APortInUseNamesBothFlags) {
  NodeServerOptions again = options_;
  again.bind_retry = absl::Milliseconds(100);
  auto second = NodeServer::Bind(again);  // the port is the first server's
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), "--master-addr 127.0.0.1 --master-port"))
      << second.status();
}

}  // namespace
}  // namespace vllm::executor
