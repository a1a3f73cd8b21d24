#include "launcher/api_server_manager.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "executor/child_process.h"
#include "frontend/openai/api_server.h"
#include "frontend/tokenizer/tokenizer.h"
#include "ipc/signal_watcher.h"
#include "launcher/api_server_control.h"
#include "launcher/engine_process_manager.h"
#include "launcher/serve.h"
#include "launcher/serve_main.h"
#include "launcher/spec/frames.h"
#include "spdlog/spdlog.h"
#include "worker/hf_config.h"

namespace vllm::launcher {
namespace {

// One free port of `host` for every API server (--port 0), held by a bound SO_REUSEPORT
// socket (not listening) until they listen: returns the port and the socket.
absl::Status HoldFreePort(const std::string& host, int32_t* port, int* holder) {
  VLLM_ASSIGN_OR_RETURN(const std::string ip, frontend::ResolveListenAddress(host));
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (inet_pton(AF_INET, ip.c_str(), &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr) == 1) {
    addr.ss_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr) ==
             1) {
    addr.ss_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  }
  *holder = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (len == 0 || *holder < 0 ||
      setsockopt(*holder, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      setsockopt(*holder, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
      bind(*holder, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(*holder, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot pick a free port on ", host, ": ", strerror(errno)));
  }
  *port = ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return absl::OkStatus();
}

class ApiServerManager {
 public:
  explicit ApiServerManager(const ServeArgs& args)
      : args_(args), engines_(args), signal_targets_(args.api_server_count) {
    for (auto& t : signal_targets_) t.store(nullptr);
  }
  ~ApiServerManager();

  absl::Status Run();

 private:
  // An API server process and what it said on its control socket.
  struct ApiProcess {
    std::unique_ptr<executor::ChildProcess> process;
    int control_fd = -1;
    std::unique_ptr<FrameReader> reader;
    std::string handshake;
    bool ready = false;
  };

  absl::Status Start(const std::string& self);
  absl::Status SpawnServer(const std::string& self, int32_t i);
  // Waits until `done()`, reading the API servers' lines; an API server that ends, an engine
  // that ends, a signal or the deadline is an error.
  absl::Status WaitFor(const std::function<bool()>& done, absl::Time deadline, const char* what);
  // Reads API server i's messages; its end (with how) when its control socket closed.
  absl::Status ReadMessages(int32_t i);
  // The supervisor loop: until `stop_fd` is readable (OK) or, `watch_servers`, an API server's
  // end or the coordinator's (its error); each engine death goes to every API server.
  absl::Status Supervise(int stop_fd, bool watch_servers);
  // Ends every API server: `sig` (0: none, they already have one), then SIGKILL after `grace`.
  void StopServers(int sig, absl::Duration grace);

  const ServeArgs& args_;
  absl::Duration ready_timeout_;
  int32_t port_ = 0;
  int port_holder_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::unique_ptr<DpCoordinatorProcess> coordinator_;
  EngineProcessManager engines_;
  std::vector<ApiProcess> servers_;
  // The API servers the signal thread forwards signals to (null: not started).
  std::vector<std::atomic<executor::ChildProcess*>> signal_targets_;
  std::atomic<int> last_signal_{0};
  std::unique_ptr<ipc::SignalWatcher> watcher_;
};

ApiServerManager::~ApiServerManager() {
  StopServers(SIGTERM, absl::Seconds(5));
  engines_.Stop();
  watcher_.reset();
  for (auto& t : signal_targets_) t.store(nullptr);
  coordinator_.reset();
  for (ApiProcess& p : servers_) {
    if (p.control_fd >= 0) close(p.control_fd);
  }
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
  if (port_holder_ >= 0) close(port_holder_);
}

absl::Status ApiServerManager::SpawnServer(const std::string& self, int32_t i) {
  VLLM_ASSIGN_OR_RETURN(const std::string spec,
                        EncodeSpecFor(args_, i, port_,
                                      coordinator_ != nullptr ? coordinator_->addresses()
                                                              : DpCoordinatorAddresses{}));
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  // Everything else is in its spec; these two say who it is (and show in ps).
  const std::vector<std::string> argv = {
      self,           kApiServerSubcommand,  "--api-server-index", absl::StrCat(i),
      "--parent-pid", absl::StrCat(getpid())};
  absl::StatusOr<std::unique_ptr<executor::ChildProcess>> child =
      executor::ChildProcess::Spawn(argv, pair[1], absl::StrCat("API server ", i));
  close(pair[1]);
  if (!child.ok()) {
    close(pair[0]);
    return child.status();
  }
  ApiProcess& p = servers_[i];
  p.process = *std::move(child);
  signal_targets_[i].store(p.process.get());
  p.control_fd = pair[0];
  // Its first frame (a failed write shows as its exit later).
  (void)WriteFrame(pair[0], spec);
  p.reader = std::make_unique<FrameReader>(pair[0]);
  return absl::OkStatus();
}

absl::Status ApiServerManager::ReadMessages(int32_t i) {
  ApiProcess& p = servers_[i];
  std::optional<std::vector<std::string>> frames = p.reader->Read();
  if (!frames.has_value()) {
    // Its control socket closed: it ended (its own error is in the log above).
    p.process->WaitForExit(absl::Seconds(2));
    absl::Status exit = p.process->Check();
    return !exit.ok() ? exit : absl::UnavailableError(absl::StrCat("API server ", i, " hung up"));
  }
  for (const std::string& frame : *frames) {
    absl::StatusOr<ApiServerMessage> m = DecodeApiServerMessage(frame);
    if (!m.ok()) {
      return absl::InternalError(absl::StrCat("API server ", i, ": ", m.status().message()));
    }
    if (m->kind == ApiServerMessage::Kind::kHandshake) p.handshake = m->text;
    if (m->kind == ApiServerMessage::Kind::kReady) p.ready = true;
  }
  return absl::OkStatus();
}

absl::Status ApiServerManager::WaitFor(const std::function<bool()>& done, absl::Time deadline,
                                       const char* what) {
  while (!done()) {
    std::vector<pollfd> fds;
    for (ApiProcess& p : servers_) fds.push_back({p.control_fd, POLLIN, 0});
    for (ApiProcess& p : servers_) fds.push_back({p.process->exit_fd(), POLLIN, 0});
    for (int fd : engines_.exit_fds()) fds.push_back({fd, POLLIN, 0});
    if (coordinator_ != nullptr) fds.push_back({coordinator_->exit_fd(), POLLIN, 0});
    fds.push_back({stop_pipe_[0], POLLIN, 0});
    const int64_t ms =
        std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()) + 1, 0, 1000);
    if (ms <= 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("API servers: no ", what, " within ", absl::FormatDuration(ready_timeout_)));
    }
    while (poll(fds.data(), fds.size(), static_cast<int>(ms)) < 0 && errno == EINTR) {
    }
    if (fds.back().revents != 0) return absl::CancelledError("interrupted during start-up");
    VLLM_RETURN_IF_ERROR(engines_.Check());
    if (coordinator_ != nullptr) VLLM_RETURN_IF_ERROR(coordinator_->Check());
    for (int32_t i = 0; i < args_.api_server_count; ++i) {
      if (fds[i].revents != 0) VLLM_RETURN_IF_ERROR(ReadMessages(i));
    }
    for (ApiProcess& p : servers_) VLLM_RETURN_IF_ERROR(p.process->Check());
  }
  return absl::OkStatus();
}

absl::Status ApiServerManager::Start(const std::string& self) {
  // --port 0: one free port for all, held (SO_REUSEPORT, not listening) until they listen.
  port_ = args_.port;
  if (port_ == 0) VLLM_RETURN_IF_ERROR(HoldFreePort(args_.host, &port_, &port_holder_));
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  // Every signal goes on to the API servers at once (a second SIGTERM stops them without
  // draining, as it does a single server).
  VLLM_ASSIGN_OR_RETURN(watcher_, ipc::SignalWatcher::Start({SIGINT, SIGTERM}, [this](int sig) {
                          last_signal_.store(sig);
                          for (const auto& target : signal_targets_) {
                            if (executor::ChildProcess* p = target.load()) p->Signal(sig);
                          }
                          (void)!write(stop_pipe_[1], "s", 1);
                        }));
  // The DP coordinator first: every API server subscribes to it.
  if (NeedsCoordinator(args_)) {
    VLLM_ASSIGN_OR_RETURN(coordinator_, StartCoordinator(args_, args_.api_server_count));
  }
  servers_.resize(args_.api_server_count);
  for (int32_t i = 0; i < args_.api_server_count; ++i) VLLM_RETURN_IF_ERROR(SpawnServer(self, i));
  VLLM_RETURN_IF_ERROR(WaitFor(
      [&] {
        return std::all_of(servers_.begin(), servers_.end(),
                           [](const ApiProcess& p) { return !p.handshake.empty(); });
      },
      absl::Now() + absl::Seconds(120), "handshake address"));
  // Local engines join every API server: over ipc:// each is told every address; over TCP
  // API server 0's CONFIG names the others (as for engines on other nodes).
  std::vector<std::string> handshakes;
  for (const ApiProcess& p : servers_) {
    handshakes.push_back(p.handshake);
    if (args_.multi_node) break;
  }
  VLLM_RETURN_IF_ERROR(engines_.Start(handshakes));
  return WaitFor(
      [&] {
        return std::all_of(servers_.begin(), servers_.end(),
                           [](const ApiProcess& p) { return p.ready; });
      },
      absl::Now() + ready_timeout_ + absl::Seconds(30), "ready line");
}

absl::Status ApiServerManager::Supervise(int stop_fd, bool watch_servers) {
  absl::Status result;
  std::vector<EngineProcessManager::Watch> watches;
  for (int32_t i = 0; i < args_.api_server_count && watch_servers; ++i) {
    executor::ChildProcess* server = servers_[i].process.get();
    watches.push_back({server->exit_fd(), [server, &result] {
                         result = server->Check();
                         if (result.ok()) return false;  // not ended after all
                         spdlog::error("{}: stopping the other API servers and the engines",
                                       result.ToString());
                         return true;
                       }});
  }
  if (coordinator_ != nullptr && watch_servers) {
    watches.push_back({coordinator_->exit_fd(), [this, &result] {
                         result = coordinator_->Check();
                         if (result.ok())
                           result = absl::UnavailableError("the DP coordinator ended");
                         spdlog::error("{}: stopping the API servers and the engines",
                                       result.ToString());
                         return true;
                       }});
  }
  engines_.Supervise(
      stop_fd, args_.restart_dead_engines,
      [&](int32_t rank, const absl::Status& why) {
        for (ApiProcess& p : servers_) {
          (void)SendApiServerMessage(p.control_fd, {ApiServerMessage::Kind::kEngineDead,
                                                    std::string(why.message()), rank});
        }
      },
      watches);
  return result;
}

void ApiServerManager::StopServers(int sig, absl::Duration grace) {
  for (ApiProcess& p : servers_) {
    if (sig != 0 && p.process != nullptr && p.process->Check().ok()) p.process->Signal(sig);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (ApiProcess& p : servers_) {
    if (p.process == nullptr) continue;
    p.process->Stop(std::max(deadline - absl::Now(), absl::ZeroDuration()), /*terminate=*/false);
  }
}

absl::Status ApiServerManager::Run() {
  VLLM_RETURN_IF_ERROR(frontend::CheckListenAddress(args_.host, static_cast<uint16_t>(args_.port)));
  VLLM_RETURN_IF_ERROR(worker::LoadHfConfig(args_.config.model.model).status());
  VLLM_RETURN_IF_ERROR(frontend::Tokenizer::Load(args_.config.model.model).status());
  VLLM_ASSIGN_OR_RETURN(ready_timeout_, EngineReadyTimeout());
  VLLM_ASSIGN_OR_RETURN(const std::string self, executor::SelfExecutable());
  VLLM_RETURN_IF_ERROR(Start(self));
  if (port_holder_ >= 0) {
    close(port_holder_);
    port_holder_ = -1;
  }
  spdlog::info("serving {} at http://{}:{} with {} API server processes and {} engine(s)",
               args_.served_model_names.front(), args_.host, port_, args_.api_server_count,
               args_.config.parallel.data_parallel_size);
  std::printf("vllm-launch: ready at http://%s:%d/v1\n", args_.host.c_str(), port_);
  std::fflush(stdout);

  // Until a signal, an API server's end or the coordinator's (vLLM stops everything then too);
  // meanwhile each engine's death goes to every API server.
  absl::Status result = Supervise(stop_pipe_[0], /*watch_servers=*/true);
  // A signal already reached the API servers (SIGTERM: they drain for --shutdown-timeout);
  // after an API server's death the others stop at once (SIGINT). While they drain, engine
  // deaths still reach them.
  int drained[2];
  if (pipe2(drained, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  std::thread engine_watch([&] { (void)Supervise(drained[0], /*watch_servers=*/false); });
  const int sig = last_signal_.load();
  const absl::Duration grace = sig == SIGTERM
                                   ? absl::Seconds(args_.shutdown_timeout_s) + absl::Seconds(6)
                                   : absl::Seconds(6);
  StopServers(sig == 0 ? SIGINT : 0, grace);
  (void)!write(drained[1], "x", 1);
  engine_watch.join();
  close(drained[0]);
  close(drained[1]);
  return result;
}

}  // namespace

absl::Status ServeApiServers(const ServeArgs& args) { return ApiServerManager(args).Run(); }

}  // namespace vllm::launcher
