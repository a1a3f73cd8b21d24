#include "launcher/serve_main.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "core/dp_coordinator.h"
#include "executor/process_launcher.h"
#include "frontend/engine/async_llm.h"
#include "frontend/engine/engine_core_client.h"
#include "frontend/openai/api_server.h"
#include "ipc/curve.h"
#include "ipc/signal_watcher.h"
#include "launcher/dp_coordinator_main.h"
#include "launcher/engine_core_main.h"
#include "launcher/serve_args.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/model_config.h"

namespace vllm::launcher {
namespace {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return absl::StrCat("ended with wait status ", status);
}

// The engine-core process: started, watched through a pidfd, stopped in order.
class EngineProcess {
 public:
  ~EngineProcess() { Stop(absl::Seconds(4)); }

  // Starts the engine core of data-parallel rank `config.parallel.data_parallel_rank`.
  // `handshake_addresses`: every API server's (the first: API server 0's).
  // `engine_index`: its index at the API servers (its rank, unless they serve only this
  // node's engines).
  absl::Status Start(const config::VllmConfig& config,
                     const std::vector<std::string>& handshake_addresses,
                     const std::string& cluster_key_file, int32_t engine_index) {
    rank_ = config.parallel.data_parallel_rank;
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) return absl::InternalError("cannot read /proc/self/exe: " + ec.message());
    std::vector<std::string> argv = {self,           kEngineCoreSubcommand,
                                     "--parent-pid", absl::StrCat(getpid()),
                                     "--config-fd",  absl::StrCat(config::kConfigFd)};
    for (const std::string& address : handshake_addresses) {
      argv.push_back("--handshake-address");
      argv.push_back(address);
    }
    if (engine_index != rank_) {
      argv.push_back("--engine-index");
      argv.push_back(absl::StrCat(engine_index));
    }
    if (!cluster_key_file.empty()) {
      argv.push_back("--cluster-key-file");
      argv.push_back(cluster_key_file);
    }
    // The config travels whole on a pipe the engine core inherits as descriptor 3.
    VLLM_ASSIGN_OR_RETURN(const int config_fd, config::MakeConfigPipe(config));
    absl::StatusOr<executor::ProcessLauncher::Child> child =
        executor::RealProcessLauncher().Spawn(argv, config_fd);
    close(config_fd);
    if (!child.ok()) {
      return absl::Status(child.status().code(),
                          absl::StrCat("cannot start the engine core of data-parallel rank ", rank_,
                                       ": ", child.status().message()));
    }
    pid_ = child->pid;
    pidfd_ = child->exit_fd;
    return absl::OkStatus();
  }

  // OK while running; the exit description once it ended (and was reaped).
  absl::Status Check() {
    if (pid_ <= 0) return absl::UnavailableError("the engine core is not running");
    int status = 0;
    if (!exited_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_ =
          absl::UnavailableError(absl::StrCat("the engine core of data-parallel rank ", rank_,
                                              " (pid ", pid_, ") ", DescribeWaitStatus(status)));
    }
    return exited_ ? exit_ : absl::OkStatus();
  }

  // Readable once the process has exited.
  int exit_fd() const { return pidfd_; }
  int32_t rank() const { return rank_; }

  // Sends SIGTERM (the engine stops its workers and exits); Stop() waits.
  void Terminate() {
    if (pid_ > 0 && !terminated_ && Check().ok()) kill(pid_, SIGTERM);
    terminated_ = true;
  }

  void Stop(absl::Duration grace) {
    if (pid_ <= 0 || !Check().ok()) return;
    Terminate();
    const absl::Time deadline = absl::Now() + grace;
    while (Check().ok() && absl::Now() < deadline) {
      pollfd fd = {pidfd_, POLLIN, 0};
      poll(&fd, 1, 20);
    }
    if (Check().ok()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      exited_ = true;
    }
  }

  pid_t pid() const { return pid_; }

 private:
  int32_t rank_ = 0;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool exited_ = false;
  bool terminated_ = false;  // SIGTERM sent
  absl::Status exit_;
};

absl::StatusOr<std::optional<frontend::ChatTemplate>> LoadChatTemplate(
    const ServeArgs& args, const frontend::Tokenizer& tokenizer) {
  std::string source = tokenizer.chat_template();
  if (args.chat_template.has_value()) {
    source = *args.chat_template;
    if (std::filesystem::is_regular_file(source)) {
      std::ifstream in(source);
      std::stringstream text;
      text << in.rdbuf();
      source = text.str();
    }
  }
  if (source.empty()) return std::optional<frontend::ChatTemplate>();
  auto parsed = frontend::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat-template / tokenizer_config.json: ", parsed.status().message()));
  }
  return std::optional<frontend::ChatTemplate>(std::move(*parsed));
}

// vLLM's set_ulimit: raise the soft open-file limit towards 65535 (within the hard limit), so
// the default --max-connections is not the distribution's 1024.
void RaiseOpenFileLimit() {
  constexpr rlim_t kTarget = 65535;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= kTarget) return;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? kTarget : std::min(kTarget, limit.rlim_max);
  if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    spdlog::warn("could not raise the open-file limit from {} to {}: {}", limit.rlim_cur,
                 raised.rlim_cur, strerror(errno));
  }
}

// The head of -dp > 1 with internal load balancing runs a DP coordinator (vLLM:
// launch_core_engines starts one whenever the API servers balance over several engines).
bool NeedsCoordinator(const ServeArgs& args) {
  return !args.headless && args.config.parallel.data_parallel_size > 1 &&
         args.dp_load_balancing == DpLoadBalancing::kInternal;
}

absl::StatusOr<std::unique_ptr<DpCoordinatorProcess>> StartCoordinator(const ServeArgs& args,
                                                                       int32_t api_servers) {
  DpCoordinatorProcessOptions o;
  o.num_engines = args.config.parallel.data_parallel_size;
  o.api_servers = api_servers;
  o.waves = args.data_parallel_lockstep;
  if (args.multi_node) {
    // Engines of other nodes report to it: the head's address, free ports (told in CONFIG).
    VLLM_ASSIGN_OR_RETURN(
        o.tcp_host, frontend::ResolveListenAddress(args.config.parallel.data_parallel_address));
    o.cluster_key_file = args.cluster_key_file;
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<DpCoordinatorProcess> c, DpCoordinatorProcess::Start(o));
  spdlog::info("started the DP coordinator (pid {}): reports at {}, publications at {}{}", c->pid(),
               c->addresses().stats, c->addresses().publish,
               o.waves ? absl::StrCat(", waves at ", c->addresses().waves) : "");
  return c;
}

// Starts the engine core of data-parallel rank `rank` of this node (again).
absl::Status StartEngine(const ServeArgs& args, const std::vector<std::string>& handshake_addresses,
                         int32_t rank, EngineProcess* engine) {
  config::VllmConfig engine_config = args.config;
  engine_config.parallel.data_parallel_rank = rank;
  // Hybrid / external load balancing: this node's API servers know its engines as 0 ..
  const int32_t engine_index = args.dp_load_balancing == DpLoadBalancing::kInternal
                                   ? rank
                                   : rank - args.config.parallel.data_parallel_start_rank;
  VLLM_RETURN_IF_ERROR(
      engine->Start(engine_config, handshake_addresses, args.cluster_key_file, engine_index));
  spdlog::info("starting the engine core of data-parallel rank {} for {} (pid {})", rank,
               args.config.model.model.string(), engine->pid());
  return absl::OkStatus();
}

// This node's engine cores: ranks -dpr .. -dpr + -dpl - 1, each with its own workers.
absl::Status StartLocalEngines(const ServeArgs& args,
                               const std::vector<std::string>& handshake_addresses,
                               std::vector<std::unique_ptr<EngineProcess>>* engines) {
  const config::ParallelConfig& parallel = args.config.parallel;
  for (int32_t i = 0; i < parallel.data_parallel_size_local; ++i) {
    engines->push_back(std::make_unique<EngineProcess>());
    VLLM_RETURN_IF_ERROR(StartEngine(args, handshake_addresses,
                                     parallel.data_parallel_start_rank + i, engines->back().get()));
  }
  return absl::OkStatus();
}

void StopEngines(std::vector<std::unique_ptr<EngineProcess>>& engines) {
  // SIGTERM to all first, so they shut down side by side.
  for (auto& e : engines) e->Terminate();
  for (auto& e : engines) e->Stop(absl::Seconds(4));
}

// Watches this node's engines until `stop_fd` becomes readable (returns true) or, without
// restarts, every engine has ended (returns false). Each death goes to on_death(rank, why).
// With `restart` (--restart-dead-engines) a dead engine is started again after a back-off:
// 1 s, doubled (up to 30 s) each time it dies within a minute of its start; the new process
// joins the head again.
bool SuperviseEngines(const ServeArgs& args, const std::vector<std::string>& handshake_addresses,
                      std::vector<std::unique_ptr<EngineProcess>>& engines, int stop_fd,
                      bool restart,
                      const std::function<void(int32_t, const absl::Status&)>& on_death) {
  struct State {
    bool dead = false;
    absl::Time started = absl::Now();
    absl::Time restart_at = absl::InfiniteFuture();
    absl::Duration backoff = absl::ZeroDuration();
  };
  std::vector<State> state(engines.size());
  while (true) {
    std::vector<pollfd> fds;
    for (size_t i = 0; i < engines.size(); ++i) {
      fds.push_back({state[i].dead ? -1 : engines[i]->exit_fd(), POLLIN, 0});
    }
    fds.push_back({stop_fd, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const State& st : state) {
      if (st.dead) next = std::min(next, st.restart_at);
    }
    const int timeout_ms = next == absl::InfiniteFuture()
                               ? -1
                               : static_cast<int>(std::clamp<int64_t>(
                                     absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 60'000));
    while (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno == EINTR) {
    }
    if (fds.back().revents != 0) return true;
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < engines.size(); ++i) {
      State& st = state[i];
      const int32_t rank = args.config.parallel.data_parallel_start_rank + static_cast<int32_t>(i);
      if (!st.dead && fds[i].revents != 0) {
        st.dead = true;
        absl::Status why = engines[i]->Check();
        if (why.ok()) why = absl::UnavailableError("the engine core ended");
        spdlog::error("{}", why.ToString());
        on_death(rank, why);
        if (restart) {
          st.backoff = now - st.started < absl::Minutes(1)
                           ? std::clamp(st.backoff * 2, absl::Seconds(1), absl::Seconds(30))
                           : absl::Seconds(1);
          st.restart_at = now + st.backoff;
          spdlog::info("restarting the engine core of data-parallel rank {} in {}", rank,
                       absl::FormatDuration(st.backoff));
        }
      } else if (st.dead && now >= st.restart_at) {
        engines[i] = std::make_unique<EngineProcess>();
        st.started = now;
        if (absl::Status s = StartEngine(args, handshake_addresses, rank, engines[i].get());
            !s.ok()) {
          spdlog::error("{}", s.ToString());
          st.backoff = std::clamp(st.backoff * 2, absl::Seconds(1), absl::Seconds(30));
          st.restart_at = now + st.backoff;
          continue;
        }
        st.dead = false;
        st.restart_at = absl::InfiniteFuture();
      }
    }
    if (!restart &&
        std::all_of(state.begin(), state.end(), [](const State& st) { return st.dead; })) {
      return false;
    }
  }
}

// --headless: this node's engines join the head and serve it; no API server here. One that
// ends is reported (the head takes it as dead; its requests fail) and, with
// --restart-dead-engines, started again (it joins again); the others go on. Returns when a
// signal stops the node (OK) or every engine has ended without restarts (an error).
absl::Status ServeHeadless(const ServeArgs& args) {
  const config::ParallelConfig& parallel = args.config.parallel;
  const std::string head =
      absl::StrCat("tcp://", parallel.data_parallel_address, ":", parallel.data_parallel_rpc_port);
  int stop_pipe[2];
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  absl::Cleanup close_pipe = [&] {
    close(stop_pipe[0]);
    close(stop_pipe[1]);
  };
  std::atomic<bool> stopping{false};
  VLLM_ASSIGN_OR_RETURN(auto watcher, ipc::SignalWatcher::Start({SIGINT, SIGTERM}, [&](int sig) {
                          spdlog::info("signal {}: stopping this node's engines", sig);
                          stopping.store(true);
                          (void)!write(stop_pipe[1], "x", 1);
                        }));
  std::vector<std::unique_ptr<EngineProcess>> engines;
  absl::Status started = StartLocalEngines(args, {head}, &engines);
  if (!started.ok()) {
    StopEngines(engines);
    return started;
  }
  std::printf("vllm-launch: headless: data-parallel engines %d..%d joining the head at %s\n",
              parallel.data_parallel_start_rank,
              parallel.data_parallel_start_rank + parallel.data_parallel_size_local - 1,
              head.c_str());
  std::fflush(stdout);
  const bool stopped =
      SuperviseEngines(args, {head}, engines, stop_pipe[0], args.restart_dead_engines,
                       [](int32_t, const absl::Status&) {});
  StopEngines(engines);
  if (stopped) return absl::OkStatus();
  return absl::UnavailableError("every engine core of this node ended");
}

// With --api-server-count N the launcher runs no API server itself: it starts N API server
// processes (`vllm-launch api-server`, the same serve flags) and talks to each over a
// socketpair (descriptor 3 there), one line per message:
//   API server → launcher   "handshake <address>"  its client's handshake socket (first)
//                           "ready <port>"          it serves HTTP
//   launcher → API server   "report-key <hex>"     the coordinator's report key (first, only
//                                                   when the engines report as datagrams:
//                                                   kept off the command line)
//                           "dead <rank> <why>"    a local engine core ended
// EOF on either side: the other is gone.
struct ApiServerRole {
  int32_t index = 0;
  int32_t count = 1;
  int control_fd = -1;                 // >= 0: an API server process started by the launcher
  DpCoordinatorAddresses coordinator;  // the launcher's coordinator (publish empty: none)
};

// Writes one line (newlines in `text` become spaces); false when the peer is gone.
bool WriteLine(int fd, std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  text.push_back('\n');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads lines from a control socket; each call returns the complete lines received so far
// (at most 64 KiB pending), or nullopt at EOF or an error.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  std::optional<std::vector<std::string>> Read() {
    char buf[4096];
    ssize_t n;
    do {
      n = read(fd_, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return std::nullopt;
    pending_.append(buf, static_cast<size_t>(n));
    std::vector<std::string> lines;
    size_t pos;
    while ((pos = pending_.find('\n')) != std::string::npos) {
      lines.push_back(pending_.substr(0, pos));
      pending_.erase(0, pos + 1);
    }
    if (pending_.size() > (size_t{64} << 10)) return std::nullopt;  // not our peer
    return lines;
  }

 private:
  int fd_;
  std::string pending_;
};

absl::Status ServeApiServers(const ServeArgs& args);

absl::Status Serve(const ServeArgs& args, const ApiServerRole& role = {}) {
  if (args.headless) return ServeHeadless(args);
  const bool launched = role.control_fd >= 0;  // an API server process of the launcher's
  if (!launched && args.api_server_count > 1) return ServeApiServers(args);
  // A --host/--port that cannot be served fails here, before any process starts.
  if (!launched) {
    VLLM_RETURN_IF_ERROR(frontend::CheckListenAddress(args.host, static_cast<uint16_t>(args.port)));
  }
  // Bad model files fail here, before any process starts.
  VLLM_ASSIGN_OR_RETURN(worker::ModelConfig model_config,
                        worker::LoadModelConfig(args.config.model.model));
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::Tokenizer> tokenizer,
                        frontend::Tokenizer::Load(args.config.model.model));
  VLLM_ASSIGN_OR_RETURN(std::optional<frontend::ChatTemplate> chat_template,
                        LoadChatTemplate(args, *tokenizer));

  // One engine core per data-parallel rank: this node's (ranks 0 .. -dpl - 1) are started
  // here (or by the launcher, for its API servers), the others join from their --headless
  // nodes over TCP.
  const config::ParallelConfig& parallel = args.config.parallel;
  // Hybrid / external load balancing: this node's engines only (ranks -dpr ..).
  const bool local_lb = args.dp_load_balancing != DpLoadBalancing::kInternal;
  const int32_t num_engines =
      local_lb ? parallel.data_parallel_size_local : parallel.data_parallel_size;
  const int32_t first_rank = local_lb ? parallel.data_parallel_start_rank : 0;
  VLLM_ASSIGN_OR_RETURN(const absl::Duration ready_timeout, EngineReadyTimeout());
  frontend::EngineCoreClientOptions client_options;
  client_options.num_engines = num_engines;
  client_options.first_rank = first_rank;
  client_options.client_count = role.count;
  client_options.client_index = role.index;
  if (args.multi_node) {
    client_options.tcp_address = parallel.data_parallel_address;
    client_options.handshake_port = parallel.data_parallel_rpc_port + role.index;
    if (role.index == 0) {
      for (int32_t i = 1; i < role.count; ++i) {
        client_options.peer_handshake_ports.push_back(parallel.data_parallel_rpc_port + i);
      }
    }
    VLLM_ASSIGN_OR_RETURN(client_options.heartbeat_timeout, EngineHeartbeatTimeout());
    if (!args.cluster_key_file.empty()) {
      VLLM_ASSIGN_OR_RETURN(client_options.curve, ipc::LoadCurveKeyFile(args.cluster_key_file));
    } else if (role.index == 0) {
      spdlog::warn(
          "the data-parallel sockets at {} admit anyone who can reach them: pass "
          "--cluster-key-file on every node to require the cluster key (CURVE)",
          parallel.data_parallel_address);
    }
  }
  // The DP coordinator: this process's own (one API server), or the launcher's.
  std::unique_ptr<DpCoordinatorProcess> coordinator;
  DpCoordinatorAddresses coordinator_addresses = role.coordinator;
  if (!launched && NeedsCoordinator(args)) {
    VLLM_ASSIGN_OR_RETURN(coordinator, StartCoordinator(args, 1));
    coordinator_addresses = coordinator->addresses();
  }
  client_options.coordinator_publish = coordinator_addresses.publish;
  client_options.coordinator_stats = coordinator_addresses.stats;
  client_options.coordinator_waves = coordinator_addresses.waves;
  client_options.coordinator_report_key = coordinator_addresses.report_key;
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::EngineCoreClient> client,
                        frontend::EngineCoreClient::Create(client_options));
  std::vector<std::unique_ptr<EngineProcess>> engines;
  if (launched) {
    if (!WriteLine(role.control_fd, absl::StrCat("handshake ", client->handshake_address()))) {
      return absl::UnavailableError("the launcher is gone");
    }
  } else if (absl::Status s = StartLocalEngines(args, {client->handshake_address()}, &engines);
             !s.ok()) {
    StopEngines(engines);
    return s;
  }
  if (args.multi_node && role.index == 0) {
    spdlog::info("waiting for {} data-parallel engine(s) to join at {}", num_engines,
                 client->handshake_address());
  }

  // SIGTERM: drain (stop accepting, let requests in flight finish for --shutdown-timeout),
  // then stop. Ctrl-C (SIGINT) or a second signal: stop at once. Stopping ends requests still
  // in flight with an error and takes at most ~5 s (the engine gets 4).
  absl::Notification stop;
  std::atomic<int> num_signals{0};
  std::atomic<bool> immediate{false};
  int stop_pipe[2];
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  VLLM_ASSIGN_OR_RETURN(auto watcher, ipc::SignalWatcher::Start({SIGINT, SIGTERM}, [&](int sig) {
                          const bool first = num_signals.fetch_add(1) == 0;
                          if (sig == SIGINT || !first) immediate.store(true);
                          spdlog::info("signal {}: {}", sig,
                                       immediate.load() ? "shutting down" : "draining");
                          if (!stop.HasBeenNotified()) stop.Notify();
                        }));
  // An API server of the launcher's: the launcher reports its engines' deaths; its end (EOF)
  // stops this process at once.
  frontend::EngineCoreClient* raw_client = client.get();
  std::thread control;
  if (launched) {
    control = std::thread([&, fd = role.control_fd] {
      LineReader reader(fd);
      while (std::optional<std::vector<std::string>> lines = reader.Read()) {
        for (const std::string& line : *lines) {
          std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 2));
          int32_t rank = -1;
          if (f.size() == 3 && f[0] == "dead" && absl::SimpleAtoi(f[1], &rank) &&
              rank >= first_rank && rank < first_rank + num_engines) {
            raw_client->MarkEngineDead(rank - first_rank, absl::UnavailableError(f[2]));
          }
        }
      }
      immediate.store(true);
      if (!stop.HasBeenNotified()) {
        spdlog::error("API server {}: the launcher is gone: stopping", role.index);
        stop.Notify();
      }
    });
  }
  absl::Cleanup join_control = [&] {
    if (control.joinable()) {
      shutdown(role.control_fd, SHUT_RDWR);  // ends the reader's read()
      control.join();
    }
  };
  if (absl::Status started =
          client->WaitForEngines(absl::Now() + ready_timeout,
                                 [&]() {
                                   if (stop.HasBeenNotified()) {
                                     return absl::CancelledError("interrupted during start-up");
                                   }
                                   for (auto& e : engines) {
                                     VLLM_RETURN_IF_ERROR(e->Check());
                                   }
                                   if (coordinator != nullptr) {
                                     VLLM_RETURN_IF_ERROR(coordinator->Check());
                                   }
                                   return absl::OkStatus();
                                 });
      !started.ok()) {
    StopEngines(engines);
    return started;
  }
  // Every engine resolved the same config; the frontend uses the smallest limits.
  frontend::EngineCoreClient::EngineInfo info = client->engines()[0];
  for (const auto& e : client->engines()) {
    info.max_model_len = std::min(info.max_model_len, e.max_model_len);
    info.num_gpu_blocks = std::min(info.num_gpu_blocks, e.num_gpu_blocks);
  }

  frontend::AsyncLLMConfig config;
  config.model_name = args.served_model_names.front();
  config.max_model_len = info.max_model_len;
  config.vocab_size = model_config.vocab_size;
  config.eos_token_ids = model_config.eos_token_ids;
  config.first_engine_rank = first_rank;
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::AsyncLLM> llm,
                        frontend::AsyncLLM::Create(std::move(client), std::move(tokenizer),
                                                   std::move(chat_template), config));
  frontend::ApiServerOptions server_options;
  server_options.host = args.host;
  server_options.port = static_cast<uint16_t>(args.port);
  server_options.api_key = args.api_key;
  server_options.max_connections = args.max_connections;
  if (role.count > 1) {
    server_options.reuse_port = true;
    server_options.server_name = absl::StrCat("vllm-launch api-server/", role.index);
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::ApiServer> server,
                        frontend::ApiServer::Create(llm.get(), server_options));
  if (launched) {
    if (!WriteLine(role.control_fd, absl::StrCat("ready ", server->port()))) {
      return absl::UnavailableError("the launcher is gone");
    }
  } else {
    spdlog::info("serving {} at http://{}:{} ({} KV-cache blocks{}, max_model_len {})",
                 config.model_name, args.host, server->port(), info.num_gpu_blocks,
                 num_engines > 1 ? absl::StrCat(" on each of ", num_engines, " engines") : "",
                 info.max_model_len);
    std::printf("vllm-launch: ready at http://%s:%d/v1\n", args.host.c_str(), server->port());
    std::fflush(stdout);
  }

  // Watch the engines: when one dies, its requests fail and the others go on; /health says
  // 503 once none is left (the server stays up).
  // With --restart-dead-engines (TCP only) a dead local engine is started again and joins.
  const std::string handshake_address = raw_client->handshake_address();
  std::thread monitor([&] {
    if (!SuperviseEngines(args, {handshake_address}, engines, stop_pipe[0],
                          args.restart_dead_engines, [&](int32_t rank, const absl::Status& why) {
                            raw_client->MarkEngineDead(rank - first_rank, why);
                          })) {
      // Every local engine ended (or there are none here): wait for the stop (remote engines
      // may still serve).
      pollfd fd = {stop_pipe[0], POLLIN, 0};
      while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
      }
    }
  });
  // The coordinator's death stops the server with an error naming it, as vLLM's does (no
  // balancing figures, no waves: the head cannot serve as configured).
  absl::Status coordinator_failure;  // written by the watcher, read after it is joined
  std::thread coordinator_watch;
  if (coordinator != nullptr) {
    coordinator_watch = std::thread([&] {
      pollfd fds[2] = {{coordinator->exit_fd(), POLLIN, 0}, {stop_pipe[0], POLLIN, 0}};
      while (poll(fds, 2, -1) < 0 && errno == EINTR) {
      }
      if (fds[0].revents == 0) return;
      coordinator_failure = coordinator->Check();
      if (coordinator_failure.ok()) {
        coordinator_failure = absl::UnavailableError("the DP coordinator ended");
      }
      spdlog::error("{}: stopping the server", coordinator_failure.ToString());
      immediate.store(true);
      if (!stop.HasBeenNotified()) stop.Notify();
    });
  }
  stop.WaitForNotification();
  if (!immediate.load() && args.shutdown_timeout_s > 0) {
    server->Drain();
    const absl::Time deadline = absl::Now() + absl::Seconds(args.shutdown_timeout_s);
    spdlog::info("draining {} request(s) in flight for up to {} s (Ctrl-C to stop at once)",
                 server->num_in_flight(), args.shutdown_timeout_s);
    while (!immediate.load() && absl::Now() < deadline &&
           !server->WaitForIdle(std::min(deadline, absl::Now() + absl::Milliseconds(100)))) {
    }
    if (server->num_in_flight() > 0) {
      spdlog::warn("{} request(s) still in flight: aborting them", server->num_in_flight());
    }
  }
  server->Stop();
  (void)!write(stop_pipe[1], "x", 1);  // ends the monitor's (and the coordinator watch's) wait
  monitor.join();
  if (coordinator_watch.joinable()) coordinator_watch.join();
  StopEngines(engines);
  coordinator.reset();
  server.reset();
  llm.reset();
  close(stop_pipe[0]);
  close(stop_pipe[1]);
  return coordinator_failure;
}

// --api-server-count N (N > 1): this process starts the API servers, then the engine cores
// (which join every API server), waits for every API server to serve, prints the ready line,
// and supervises: an engine's death goes to every API server; an API server's death stops
// everything (as vLLM does); SIGTERM / SIGINT go to the API servers (they drain), then the
// engines stop.
absl::Status ServeApiServers(const ServeArgs& args) {
  VLLM_RETURN_IF_ERROR(frontend::CheckListenAddress(args.host, static_cast<uint16_t>(args.port)));
  VLLM_RETURN_IF_ERROR(worker::LoadModelConfig(args.config.model.model).status());
  VLLM_RETURN_IF_ERROR(frontend::Tokenizer::Load(args.config.model.model).status());
  VLLM_ASSIGN_OR_RETURN(const absl::Duration ready_timeout, EngineReadyTimeout());
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return absl::InternalError("cannot read /proc/self/exe: " + ec.message());

  // --port 0: one free port for all, held (SO_REUSEPORT, not listening) until they listen.
  int32_t port = args.port;
  int port_holder = -1;
  absl::Cleanup close_holder = [&] {
    if (port_holder >= 0) close(port_holder);
  };
  if (port == 0) {
    VLLM_ASSIGN_OR_RETURN(const std::string ip, frontend::ResolveListenAddress(args.host));
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (inet_pton(AF_INET, ip.c_str(), &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr) == 1) {
      addr.ss_family = AF_INET;
      len = sizeof(sockaddr_in);
    } else if (inet_pton(AF_INET6, ip.c_str(),
                         &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr) == 1) {
      addr.ss_family = AF_INET6;
      len = sizeof(sockaddr_in6);
    }
    port_holder = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (len == 0 || port_holder < 0 ||
        setsockopt(port_holder, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        setsockopt(port_holder, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
        bind(port_holder, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        getsockname(port_holder, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot pick a free port on ", args.host, ": ", strerror(errno)));
    }
    port = ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }

  int stop_pipe[2];
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  absl::Cleanup close_pipe = [&] {
    close(stop_pipe[0]);
    close(stop_pipe[1]);
  };
  // Every signal goes on to the API servers at once (a second SIGTERM stops them without
  // draining, as it does a single server); their pids, for the signal thread.
  std::atomic<int> last_signal{0};
  std::vector<std::atomic<pid_t>> server_pids(args.api_server_count);
  for (auto& pid : server_pids) pid.store(-1);
  VLLM_ASSIGN_OR_RETURN(auto watcher, ipc::SignalWatcher::Start({SIGINT, SIGTERM}, [&](int sig) {
                          last_signal.store(sig);
                          for (const auto& pid : server_pids) {
                            if (const pid_t p = pid.load(); p > 0) kill(p, sig);
                          }
                          (void)!write(stop_pipe[1], "s", 1);
                        }));

  struct ApiProcess {
    pid_t pid = -1;
    int exit_fd = -1, control_fd = -1;
    std::unique_ptr<LineReader> reader;
    std::string handshake;
    bool ready = false, exited = false;
    absl::Status exit;
  };
  // The DP coordinator first: every API server subscribes to it.
  std::unique_ptr<DpCoordinatorProcess> coordinator;
  if (NeedsCoordinator(args)) {
    VLLM_ASSIGN_OR_RETURN(coordinator, StartCoordinator(args, args.api_server_count));
  }
  std::vector<ApiProcess> servers(args.api_server_count);
  std::vector<std::unique_ptr<EngineProcess>> engines;
  absl::Mutex control_mu;  // the control sockets' writers: the engine monitor and this thread
  auto check_exit = [&](ApiProcess& p, int32_t i) {
    int status = 0;
    if (!p.exited && waitpid(p.pid, &status, WNOHANG) == p.pid) {
      server_pids[i].store(-1);  // reaped: the pid may be reused
      p.exited = true;
      p.exit = absl::UnavailableError(
          absl::StrCat("API server ", i, " (pid ", p.pid, ") ", DescribeWaitStatus(status)));
    }
    return p.exited;
  };
  // Ends every API server: `sig` (0: none, they already have one), then SIGKILL after `grace`.
  auto stop_servers = [&](int sig, absl::Duration grace) {
    for (int32_t i = 0; i < args.api_server_count && sig != 0; ++i) {
      if (servers[i].pid > 0 && !check_exit(servers[i], i)) kill(servers[i].pid, sig);
    }
    const absl::Time deadline = absl::Now() + grace;
    for (int32_t i = 0; i < args.api_server_count; ++i) {
      ApiProcess& p = servers[i];
      if (p.pid <= 0) continue;
      while (!check_exit(p, i) && absl::Now() < deadline) {
        pollfd fd = {p.exit_fd, POLLIN, 0};
        poll(&fd, 1, 50);
      }
      if (!check_exit(p, i)) {
        kill(p.pid, SIGKILL);
        waitpid(p.pid, nullptr, 0);
        server_pids[i].store(-1);
        p.exited = true;
      }
    }
  };
  absl::Cleanup cleanup = [&] {
    stop_servers(SIGTERM, absl::Seconds(5));
    StopEngines(engines);
    for (ApiProcess& p : servers) {
      if (p.exit_fd >= 0) close(p.exit_fd);
      if (p.control_fd >= 0) close(p.control_fd);
    }
  };

  for (int32_t i = 0; i < args.api_server_count; ++i) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
    }
    std::vector<std::string> argv = {
        self,           kApiServerSubcommand,  "--api-server-index", absl::StrCat(i),
        "--parent-pid", absl::StrCat(getpid())};
    if (coordinator != nullptr) {
      const DpCoordinatorAddresses& a = coordinator->addresses();
      argv.insert(argv.end(), {"--coordinator-publish", a.publish, "--coordinator-stats", a.stats,
                               "--coordinator-waves", a.waves});
    }
    argv.push_back("--");
    // The serve flags, with --port the one port every API server takes.
    for (size_t j = 0; j < args.argv.size(); ++j) {
      if (args.argv[j] == "--port") {
        ++j;
      } else if (!absl::StartsWith(args.argv[j], "--port=")) {
        argv.push_back(args.argv[j]);
      }
    }
    argv.insert(argv.end(), {"--port", absl::StrCat(port)});
    absl::StatusOr<executor::ProcessLauncher::Child> child =
        executor::RealProcessLauncher().Spawn(argv, pair[1]);
    close(pair[1]);
    if (!child.ok()) {
      close(pair[0]);
      return absl::Status(child.status().code(), absl::StrCat("cannot start API server ", i, ": ",
                                                              child.status().message()));
    }
    servers[i].pid = child->pid;
    server_pids[i].store(child->pid);
    servers[i].exit_fd = child->exit_fd;
    servers[i].control_fd = pair[0];
    if (coordinator != nullptr && !coordinator->addresses().report_key.empty()) {
      // Its first line (a failed write shows as its exit below).
      (void)WriteLine(
          pair[0],
          absl::StrCat("report-key ", absl::BytesToHexString(coordinator->addresses().report_key)));
    }
    servers[i].reader = std::make_unique<LineReader>(pair[0]);
  }

  // Waits until `done()`, reading the API servers' lines; an API server that ends, an engine
  // that ends, a signal or the deadline is an error.
  auto wait_for = [&](const std::function<bool()>& done, absl::Time deadline,
                      const char* what) -> absl::Status {
    while (!done()) {
      std::vector<pollfd> fds;
      for (ApiProcess& p : servers) fds.push_back({p.control_fd, POLLIN, 0});
      for (ApiProcess& p : servers) fds.push_back({p.exit_fd, POLLIN, 0});
      for (auto& e : engines) fds.push_back({e->exit_fd(), POLLIN, 0});
      if (coordinator != nullptr) fds.push_back({coordinator->exit_fd(), POLLIN, 0});
      fds.push_back({stop_pipe[0], POLLIN, 0});
      const int64_t ms =
          std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()) + 1, 0, 1000);
      if (ms <= 0 && absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("API servers: no ", what, " within ",
                                                        absl::FormatDuration(ready_timeout)));
      }
      while (poll(fds.data(), fds.size(), static_cast<int>(ms)) < 0 && errno == EINTR) {
      }
      if (fds.back().revents != 0) return absl::CancelledError("interrupted during start-up");
      for (auto& e : engines) VLLM_RETURN_IF_ERROR(e->Check());
      if (coordinator != nullptr) VLLM_RETURN_IF_ERROR(coordinator->Check());
      for (int32_t i = 0; i < args.api_server_count; ++i) {
        ApiProcess& p = servers[i];
        if (fds[i].revents == 0) continue;
        std::optional<std::vector<std::string>> lines = p.reader->Read();
        if (!lines.has_value()) {
          // Its control socket closed: it ended (its own error is in the log above).
          pollfd fd = {p.exit_fd, POLLIN, 0};
          poll(&fd, 1, 2000);
          check_exit(p, i);
          return p.exited ? p.exit
                          : absl::UnavailableError(absl::StrCat("API server ", i, " hung up"));
        }
        for (const std::string& line : *lines) {
          if (absl::StartsWith(line, "handshake ")) p.handshake = line.substr(10);
          if (absl::StartsWith(line, "ready ")) p.ready = true;
        }
      }
      for (int32_t i = 0; i < args.api_server_count; ++i) {
        if (check_exit(servers[i], i)) return servers[i].exit;
      }
    }
    return absl::OkStatus();
  };
  VLLM_RETURN_IF_ERROR(wait_for(
      [&] {
        return std::all_of(servers.begin(), servers.end(),
                           [](const ApiProcess& p) { return !p.handshake.empty(); });
      },
      absl::Now() + absl::Seconds(120), "handshake address"));
  // Local engines join every API server: over ipc:// each is told every address; over TCP
  // API server 0's CONFIG names the others (as for engines on other nodes).
  std::vector<std::string> handshakes;
  for (const ApiProcess& p : servers) {
    handshakes.push_back(p.handshake);
    if (args.multi_node) break;
  }
  VLLM_RETURN_IF_ERROR(StartLocalEngines(args, handshakes, &engines));
  VLLM_RETURN_IF_ERROR(wait_for(
      [&] {
        return std::all_of(servers.begin(), servers.end(),
                           [](const ApiProcess& p) { return p.ready; });
      },
      absl::Now() + ready_timeout + absl::Seconds(30), "ready line"));
  if (port_holder >= 0) {
    close(port_holder);
    port_holder = -1;
  }
  spdlog::info("serving {} at http://{}:{} with {} API server processes and {} engine(s)",
               args.served_model_names.front(), args.host, port, args.api_server_count,
               args.config.parallel.data_parallel_size);
  std::printf("vllm-launch: ready at http://%s:%d/v1\n", args.host.c_str(), port);
  std::fflush(stdout);

  // The engines' monitor: each death goes to every API server.
  int monitor_stop[2];
  if (pipe2(monitor_stop, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  std::thread monitor([&] {
    SuperviseEngines(args, handshakes, engines, monitor_stop[0], args.restart_dead_engines,
                     [&](int32_t rank, const absl::Status& why) {
                       absl::MutexLock lock(&control_mu);
                       for (ApiProcess& p : servers) {
                         (void)WriteLine(p.control_fd,
                                         absl::StrCat("dead ", rank, " ", why.message()));
                       }
                     });
    pollfd fd = {monitor_stop[0], POLLIN, 0};
    while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
    }
  });
  absl::Cleanup stop_monitor = [&] {
    (void)!write(monitor_stop[1], "x", 1);
    monitor.join();
    close(monitor_stop[0]);
    close(monitor_stop[1]);
  };

  // Until a signal, an API server's end or the coordinator's (vLLM stops everything then too).
  absl::Status result;
  while (true) {
    std::vector<pollfd> fds;
    for (ApiProcess& p : servers) fds.push_back({p.exit_fd, POLLIN, 0});
    fds.push_back({coordinator != nullptr ? coordinator->exit_fd() : -1, POLLIN, 0});
    fds.push_back({stop_pipe[0], POLLIN, 0});
    while (poll(fds.data(), fds.size(), -1) < 0 && errno == EINTR) {
    }
    if (fds.back().revents != 0) break;
    if (fds[fds.size() - 2].revents != 0) {
      result = coordinator->Check();
      if (result.ok()) result = absl::UnavailableError("the DP coordinator ended");
      spdlog::error("{}: stopping the API servers and the engines", result.ToString());
      break;
    }
    bool ended = false;
    for (int32_t i = 0; i < args.api_server_count; ++i) {
      if (fds[i].revents != 0 && check_exit(servers[i], i)) {
        spdlog::error("{}: stopping the other API servers and the engines",
                      servers[i].exit.ToString());
        result = servers[i].exit;
        ended = true;
      }
    }
    if (ended) break;
  }
  // A signal already reached the API servers (SIGTERM: they drain for --shutdown-timeout);
  // after an API server's death the others stop at once (SIGINT).
  const int sig = last_signal.load();
  const absl::Duration grace =
      sig == SIGTERM ? absl::Seconds(args.shutdown_timeout_s) + absl::Seconds(6) : absl::Seconds(6);
  stop_servers(sig == 0 ? SIGINT : 0, grace);
  return result;
}

}  // namespace

int RunServe(const std::vector<std::string>& argv) {
  // stdout carries only the ready line (scripts wait for it); logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vllm-launch"));
  auto parsed = ParseServeArgs(argv, VLLM_DEFAULT_MODEL);
  if (!parsed.ok()) {
    std::fprintf(stderr, "vllm-launch: error: %s\n(see vllm-launch --help)\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!parsed->args.has_value()) {
    std::fputs(parsed->text.c_str(), stdout);
    return parsed->exit_code;
  }
  RaiseOpenFileLimit();
  if (absl::Status s = Serve(*parsed->args); !s.ok()) {
    std::fprintf(stderr, "vllm-launch: error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

// An API server's first control line, "report-key <hex>", read a byte at a time (the control
// thread reads the rest later).
absl::StatusOr<std::string> ReadReportKey(int fd) {
  std::string line;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (line.size() < 256) {
    pollfd p = {fd, POLLIN, 0};
    const int ms = static_cast<int>(
        std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 1000));
    if (ms <= 0) break;
    if (poll(&p, 1, ms) <= 0) continue;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (c == '\n') {
      std::optional<std::string> key;
      if (absl::StartsWith(line, "report-key ")) key = core::ReportKeyFromHex(line.substr(11));
      if (key.has_value()) return *std::move(key);
      break;
    }
    line.push_back(c);
  }
  return absl::UnavailableError("no report key from the launcher");
}

int RunApiServer(const std::vector<std::string>& argv) {
  // argv: --api-server-index I --parent-pid P [--coordinator-publish A --coordinator-stats B
  //       --coordinator-waves C] -- <serve flags>
  int32_t index = -1;
  int64_t parent = 0;
  DpCoordinatorAddresses coordinator;
  size_t i = 0;
  for (; i + 1 < argv.size() && argv[i] != "--"; i += 2) {
    if (argv[i] == "--api-server-index") (void)absl::SimpleAtoi(argv[i + 1], &index);
    if (argv[i] == "--parent-pid") (void)absl::SimpleAtoi(argv[i + 1], &parent);
    if (argv[i] == "--coordinator-publish") coordinator.publish = argv[i + 1];
    if (argv[i] == "--coordinator-stats") coordinator.stats = argv[i + 1];
    if (argv[i] == "--coordinator-waves") coordinator.waves = argv[i + 1];
  }
  if (index < 0 || parent <= 0 || i >= argv.size() || argv[i] != "--") {
    std::fprintf(stderr, "vllm-launch %s: internal: started by vllm-launch --api-server-count N\n",
                 kApiServerSubcommand);
    return 2;
  }
  if (absl::StartsWith(coordinator.stats, "udp://")) {
    absl::StatusOr<std::string> key = ReadReportKey(config::kConfigFd);
    if (!key.ok()) {
      std::fprintf(stderr, "vllm-launch api-server %d: error: %s\n", index,
                   key.status().ToString().c_str());
      return 1;
    }
    coordinator.report_key = *std::move(key);
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt(absl::StrCat("api-server-", index)));
  // Ends with the launcher (and not at all if it is already gone).
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 1;
  auto parsed = ParseServeArgs(std::vector<std::string>(argv.begin() + i + 1, argv.end()),
                               VLLM_DEFAULT_MODEL);
  if (!parsed.ok() || !parsed->args.has_value()) {
    std::fprintf(stderr, "vllm-launch: error: %s\n",
                 parsed.ok() ? "no arguments" : std::string(parsed.status().message()).c_str());
    return 2;
  }
  RaiseOpenFileLimit();
  ApiServerRole role;
  role.index = index;
  role.count = parsed->args->api_server_count;
  role.control_fd = config::kConfigFd;
  role.coordinator = coordinator;
  if (absl::Status s = Serve(*parsed->args, role); !s.ok()) {
    std::fprintf(stderr, "vllm-launch api-server %d: error: %s\n", index, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace vllm::launcher
