#include "launcher/worker_node.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "executor/child_process.h"
#include "executor/node_protocol.h"
#include "ipc/curve.h"
#include "ipc/message_queue.h"
#include "ipc/signal_watcher.h"
#include "ipc/zmq_util.h"
#include "kernels/comm/group_spec.h"
#include "spdlog/spdlog.h"
#include "worker/worker_proc.h"

namespace vllm::launcher {
namespace {

using executor::NodeMessage;

// One node's worker processes for one engine, and the TP groups that lie on this node.
struct Session {
  std::vector<std::unique_ptr<kernels::comm::CommGroup>> groups;
  std::vector<std::unique_ptr<executor::ChildProcess>> workers;
  std::vector<int32_t> ranks;  // workers[i] is rank ranks[i]

  ~Session() {
    for (auto& w : workers) w->Terminate();
    for (auto& w : workers) w->Stop(executor::ChildProcess::kDefaultGrace, /*terminate=*/false);
    workers.clear();
    groups.clear();  // after the ranks: removes what the collectives left behind
    ipc::MessageQueueWriter::RemoveSegmentsOfDeadWriters();
  }
};

class WorkerNode {
 public:
  WorkerNode(const ServeArgs& args, int stop_fd) : args_(args), stop_fd_(stop_fd) {
    const config::ParallelConfig& p = args.config.parallel;
    head_ = absl::StrCat("tcp://", p.master_addr, ":", p.master_port);
  }

  absl::Status Init() {
    if (!args_.cluster_key_file.empty()) {
      VLLM_ASSIGN_OR_RETURN(curve_, ipc::LoadCurveKeyFile(args_.cluster_key_file));
    }
    const config::ParallelConfig& p = args_.config.parallel;
    // VLLM_HOST_IP, as vLLM's get_ip(): this node's address for the others; else the one on
    // the route to the head.
    const char* host_ip = std::getenv("VLLM_HOST_IP");
    if (host_ip != nullptr && *host_ip != '\0') {
      address_ = host_ip;
    } else {
      VLLM_ASSIGN_OR_RETURN(address_, LocalAddressTowards(p.master_addr, p.master_port));
    }
    VLLM_ASSIGN_OR_RETURN(binary_, executor::SelfExecutable());
    VLLM_ASSIGN_OR_RETURN(ready_timeout_, EngineReadyTimeout());
    return absl::OkStatus();
  }

  const std::string& head() const { return head_; }
  const std::string& address() const { return address_; }
  bool joined_once() const { return joined_once_; }
  // The last session ended because the head sent nothing for the heartbeat timeout.
  bool head_went_silent() const { return head_went_silent_; }

  // One engine, from HELLO to its end: OK when it ended normally (every rank exited 0, or the
  // head said STOP). InvalidArgument: a REJECT naming a flag (fatal); FailedPrecondition: the
  // head refused us for now; DeadlineExceeded: no head answered; Cancelled: a signal; other
  // errors (a rank died, the head went silent): join again.
  absl::Status RunSession() {
    head_went_silent_ = false;
    zmq::socket_t socket(ipc::ZmqContext(), zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 500);  // a last WORKER_EXITED still leaves
    socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(executor::kMaxNodeFrameBytes));
    // Dropped SYNs (a partition): a new try every second, not the kernel's SYN back-off.
    socket.set(zmq::sockopt::connect_timeout, 1000);
    if (curve_.has_value()) VLLM_RETURN_IF_ERROR(ipc::MakeCurveClient(socket, *curve_));
    socket.connect(head_);
    const config::ParallelConfig& p = args_.config.parallel;
    executor::NodeHello hello;
    hello.node_rank = p.node_rank;
    hello.nnodes = p.nnodes;
    hello.tensor_parallel_size = p.tensor_parallel_size;
    hello.pipeline_parallel_size = p.pipeline_parallel_size;
    hello.data_parallel_size = p.data_parallel_size;
    hello.model = args_.config.model.model;
    hello.node_address = address_;
    hello.pid = getpid();
    VLLM_ASSIGN_OR_RETURN(executor::NodeConfig config, AwaitConfig(socket, hello));
    joined_once_ = true;
    Session session;
    if (absl::Status s = StartRanks(config, session); !s.ok()) {
      // The head waits for these ranks: tell it they will not come (it fails the engine).
      const int32_t local = p.local_world_size();
      const int32_t first = p.node_rank_within_dp() * local;
      Send(socket, executor::NodeWorkerExited{first, absl::StrCat("did not start on node rank ",
                                                                  p.node_rank, ": ", s.message())});
      return s;
    }
    return Supervise(socket, config, session);
  }

 private:
  void Send(zmq::socket_t& socket, const NodeMessage& message) {
    const std::string bytes = executor::EncodeNodeMessage(message);
    try {
      (void)socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("node: cannot send {}: {}", executor::NodeMessageKind(message), e.what());
    }
  }

  // Waits up to `timeout` for a frame on `socket` or the stop pipe. Cancelled on a signal.
  absl::StatusOr<std::optional<NodeMessage>> Receive(zmq::socket_t& socket,
                                                     absl::Duration timeout) {
    zmq::pollitem_t items[2] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, stop_fd_, ZMQ_POLLIN, 0}};
    ipc::PollItems(items, 2, std::max(timeout, absl::ZeroDuration()));
    if (items[1].revents != 0) return absl::CancelledError("stopped by a signal");
    zmq::message_t frame;
    if (!ipc::TryRecv(socket, frame)) return std::nullopt;
    absl::StatusOr<NodeMessage> m = executor::DecodeNodeMessage(frame.to_string_view());
    if (!m.ok()) {
      spdlog::warn("node: a frame from the head refused: {}", m.status().ToString());
      return std::nullopt;
    }
    return std::optional<NodeMessage>(std::move(*m));
  }

  // Sends HELLO, again every 250 ms until an answer comes: a HELLO that reached a head on its
  // way out (the previous engine's, closing) is lost with it, and the DEALER reconnects to the
  // next one by itself.
  absl::StatusOr<executor::NodeConfig> AwaitConfig(zmq::socket_t& socket,
                                                   const executor::NodeHello& hello) {
    const absl::Time deadline = absl::Now() + ready_timeout_;
    absl::Time next_hello = absl::Now();
    while (true) {
      const absl::Time now = absl::Now();
      if (now >= next_hello) {
        Send(socket, hello);
        next_hello = now + absl::Milliseconds(250);
      }
      if (now >= deadline) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "no answer from the head at %s within %s: check --master-addr and --master-port "
            "(the head's address and port), that the head runs with --nnodes %d, and that both "
            "use the same --cluster-key-file",
            head_, absl::FormatDuration(ready_timeout_), args_.config.parallel.nnodes));
      }
      VLLM_ASSIGN_OR_RETURN(std::optional<NodeMessage> m,
                            Receive(socket, std::min(deadline - now, absl::Milliseconds(200))));
      if (!m.has_value()) continue;
      if (auto* config = std::get_if<executor::NodeConfig>(&*m)) return std::move(*config);
      if (auto* reject = std::get_if<executor::NodeReject>(&*m)) {
        // Not now (the head runs an engine without us): FailedPrecondition, try again later.
        if (reject->flag.empty()) return absl::FailedPreconditionError(reject->message);
        return absl::InvalidArgumentError(absl::StrCat(reject->flag, ": ", reject->message));
      }
    }
  }

  absl::Status StartRanks(const executor::NodeConfig& nc, Session& session) {
    VLLM_ASSIGN_OR_RETURN(config::VllmConfig config, config::DecodeVllmConfig(nc.engine_config));
    const config::ParallelConfig& p = config.parallel;
    const int32_t tp = p.tensor_parallel_size;
    if (static_cast<int32_t>(nc.comm_specs.size()) != p.pipeline_parallel_size) {
      return absl::InvalidArgumentError("the head's CONFIG has a group spec count unlike its -pp");
    }
    std::vector<std::string> specs = nc.comm_specs;
    const int32_t local = p.local_world_size();
    const int32_t first = args_.config.parallel.node_rank_within_dp() * local;
    using Backend = kernels::comm::CommGroupSpec::Backend;
    for (int32_t rank = first; rank < first + local; ++rank) {
      const int32_t stage = rank / tp;
      if (tp == 1 || !specs[stage].empty()) continue;
      // The stage's TP group lies wholly on this node: this process makes it.
      VLLM_ASSIGN_OR_RETURN(
          auto group,
          kernels::comm::CommGroup::Create(
              p.comm_backend == config::CommBackend::kGloo ? Backend::kGloo : Backend::kShm, tp));
      specs[stage] = group->spec().Encode();
      session.groups.push_back(std::move(group));
    }
    for (int32_t rank = first; rank < first + local; ++rank) {
      worker::WorkerProcOptions w;
      w.rank = rank;
      w.broadcast_handle = nc.broadcast_handle;
      w.ready_address = nc.ready_address;
      w.comm_spec = specs[rank / tp];
      w.parent_pid = getpid();
      w.startup_timeout = absl::Milliseconds(nc.startup_timeout_ms);
      w.node_address = address_;
      w.cluster_key_file = args_.cluster_key_file;
      std::vector<std::string> argv = {binary_, worker::kWorkerProcSubcommand};
      for (std::string& f : worker::ToWorkerProcFlags(w)) argv.push_back(std::move(f));
      VLLM_ASSIGN_OR_RETURN(const int config_fd, config::MakeConfigPipe(config));
      auto child =
          executor::ChildProcess::Spawn(argv, config_fd, absl::StrCat("worker rank ", rank));
      close(config_fd);
      VLLM_RETURN_IF_ERROR(child.status());
      session.workers.push_back(std::move(*child));
      session.ranks.push_back(rank);
    }
    spdlog::info("node rank {}: worker ranks {}..{} started for the head at {}",
                 args_.config.parallel.node_rank, first, first + local - 1, head_);
    return absl::OkStatus();
  }

  absl::Status Supervise(zmq::socket_t& socket, const executor::NodeConfig& nc, Session& session) {
    const absl::Duration interval = absl::Milliseconds(nc.heartbeat_interval_ms);
    const absl::Duration timeout = absl::Milliseconds(nc.heartbeat_timeout_ms);
    absl::Time last_seen = absl::Now(), next_beat = absl::Now();
    size_t running = session.workers.size();
    std::vector<zmq::pollitem_t> items;
    while (running > 0) {
      items.clear();
      items.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({nullptr, stop_fd_, ZMQ_POLLIN, 0});
      for (auto& w : session.workers) items.push_back({nullptr, w->exit_fd(), ZMQ_POLLIN, 0});
      ipc::PollItems(items.data(), items.size(), interval);
      if (items[1].revents != 0) return absl::CancelledError("stopped by a signal");
      for (size_t i = 0; i < session.workers.size(); ++i) {
        executor::ChildProcess& w = *session.workers[i];
        if (items[i + 2].revents == 0 || w.exited()) continue;
        (void)w.Check();
        if (!w.exited()) continue;
        --running;
        const std::string how = executor::DescribeExit(*w.wait_status());
        spdlog::info("node: worker rank {} (pid {}) {}", session.ranks[i], w.pid(), how);
        Send(socket, executor::NodeWorkerExited{session.ranks[i], how});
      }
      while (true) {
        zmq::message_t frame;
        if (!ipc::TryRecv(socket, frame)) break;
        absl::StatusOr<NodeMessage> m = executor::DecodeNodeMessage(frame.to_string_view());
        if (!m.ok()) continue;
        last_seen = absl::Now();
        if (auto* stop = std::get_if<executor::NodeStop>(&*m)) {
          spdlog::info("node: the head ended the engine: {}", stop->reason);
          return absl::OkStatus();
        }
      }
      const absl::Time now = absl::Now();
      if (now - last_seen > timeout) {
        head_went_silent_ = true;
        return absl::UnavailableError(absl::StrCat("the head at ", head_, " sent nothing for ",
                                                   absl::FormatDuration(timeout)));
      }
      if (now >= next_beat) {
        Send(socket, executor::NodeHeartbeat{});
        next_beat = now + interval;
      }
    }
    for (auto& w : session.workers) {
      if (*w->wait_status() != 0) {
        return absl::UnavailableError("a worker rank of this node ended with an error");
      }
    }
    // The head closed the queue: every rank exited 0. Its STOP follows once it has seen them
    // all; a HELLO sent before would reach the closing engine.
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      VLLM_ASSIGN_OR_RETURN(std::optional<NodeMessage> m,
                            Receive(socket, std::min(until - absl::Now(), interval)));
      if (m.has_value() && std::holds_alternative<executor::NodeStop>(*m)) break;
    }
    return absl::OkStatus();
  }

  const ServeArgs& args_;
  const int stop_fd_;
  std::string head_, address_, binary_;
  std::optional<ipc::CurveKeys> curve_;
  absl::Duration ready_timeout_;
  bool joined_once_ = false;
  bool head_went_silent_ = false;
};

}  // namespace

bool IsWorkerNode(const ServeArgs& args) {
  const config::ParallelConfig& p = args.config.parallel;
  return args.headless && p.nnodes > 1 && p.node_rank_within_dp() > 0;
}

absl::StatusOr<std::string> LocalAddressTowards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int e = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); e != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master-addr ", host, ": cannot resolve it (", gai_strerror(e), ")"));
  }
  absl::Cleanup free_found = [found] { freeaddrinfo(found); };
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    return absl::UnavailableError(
        absl::StrCat("--master-addr ", host, ": no route from this node to it (", strerror(errno),
                     "): check --master-addr and --master-port, the head's address and port"));
  }
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return absl::InternalError(absl::StrCat("getsockname: ", strerror(errno)));
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      local.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  if (inet_ntop(local.ss_family, addr, text, sizeof(text)) == nullptr) {
    return absl::InternalError(absl::StrCat("inet_ntop: ", strerror(errno)));
  }
  return std::string(text);
}

absl::Status ServeWorkerNode(const ServeArgs& args) {
  int stop_pipe[2];
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  absl::Cleanup close_pipe = [&] {
    close(stop_pipe[0]);
    close(stop_pipe[1]);
  };
  std::atomic<bool> stopping{false};
  VLLM_ASSIGN_OR_RETURN(auto watcher, ipc::SignalWatcher::Start({SIGINT, SIGTERM}, [&](int sig) {
                          spdlog::info("signal {}: stopping this node's workers", sig);
                          stopping.store(true);
                          (void)!write(stop_pipe[1], "x", 1);
                        }));
  WorkerNode node(args, stop_pipe[0]);
  VLLM_RETURN_IF_ERROR(node.Init());
  const config::ParallelConfig& p = args.config.parallel;
  std::printf("vllm-launch: headless: node rank %d of %d (%s) joining the head at %s\n",
              p.node_rank, p.nnodes, node.address().c_str(), node.head().c_str());
  std::fflush(stdout);
  while (!stopping.load()) {
    const absl::Status s = node.RunSession();
    if (stopping.load() || absl::IsCancelled(s)) break;
    if (absl::IsInvalidArgument(s)) return s;  // refused: a flag to fix
    if (absl::IsDeadlineExceeded(s) && !node.joined_once()) return s;
    if (node.head_went_silent() && !args.rejoin_head) return s;  // --no-rejoin-head
    if (s.ok()) {
      spdlog::info("node rank {}: the engine ended; joining the next one", p.node_rank);
      continue;
    }
    spdlog::warn("node rank {}: {}; joining the head again", p.node_rank, s.ToString());
    if (absl::IsFailedPrecondition(s)) {
      // The head refused us for now: a pause before the next HELLO.
      pollfd pfd = {stop_pipe[0], POLLIN, 0};
      (void)poll(&pfd, 1, 1000);
    }
  }
  return absl::OkStatus();
}

}  // namespace vllm::launcher
