#include "launcher/serve_main.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
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
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "executor/process_launcher.h"
#include "frontend/api_server.h"
#include "frontend/async_llm.h"
#include "frontend/engine_core_client.h"
#include "ipc/curve.h"
#include "ipc/signal_watcher.h"
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
  absl::Status Start(const config::VllmConfig& config, const std::string& handshake_address,
                     const std::string& cluster_key_file) {
    rank_ = config.parallel.data_parallel_rank;
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) return absl::InternalError("cannot read /proc/self/exe: " + ec.message());
    std::vector<std::string> argv = {self,
                                     kEngineCoreSubcommand,
                                     "--handshake-address",
                                     handshake_address,
                                     "--parent-pid",
                                     absl::StrCat(getpid()),
                                     "--config-fd",
                                     absl::StrCat(config::kConfigFd)};
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

// Starts the engine core of data-parallel rank `rank` of this node (again).
absl::Status StartEngine(const ServeArgs& args, const std::string& handshake_address, int32_t rank,
                         EngineProcess* engine) {
  config::VllmConfig engine_config = args.config;
  engine_config.parallel.data_parallel_rank = rank;
  VLLM_RETURN_IF_ERROR(engine->Start(engine_config, handshake_address, args.cluster_key_file));
  spdlog::info("starting the engine core of data-parallel rank {} for {} (pid {})", rank,
               args.config.model.model.string(), engine->pid());
  return absl::OkStatus();
}

// This node's engine cores: ranks -dpr .. -dpr + -dpl - 1, each with its own workers.
absl::Status StartLocalEngines(const ServeArgs& args, const std::string& handshake_address,
                               std::vector<std::unique_ptr<EngineProcess>>* engines) {
  const config::ParallelConfig& parallel = args.config.parallel;
  for (int32_t i = 0; i < parallel.data_parallel_size_local; ++i) {
    engines->push_back(std::make_unique<EngineProcess>());
    VLLM_RETURN_IF_ERROR(StartEngine(args, handshake_address, parallel.data_parallel_start_rank + i,
                                     engines->back().get()));
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
bool SuperviseEngines(const ServeArgs& args, const std::string& handshake_address,
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
        if (absl::Status s = StartEngine(args, handshake_address, rank, engines[i].get());
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
  absl::Status started = StartLocalEngines(args, head, &engines);
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
      SuperviseEngines(args, head, engines, stop_pipe[0], args.restart_dead_engines,
                       [](int32_t, const absl::Status&) {});
  StopEngines(engines);
  if (stopped) return absl::OkStatus();
  return absl::UnavailableError("every engine core of this node ended");
}

absl::Status Serve(const ServeArgs& args) {
  if (args.headless) return ServeHeadless(args);
  // A --host/--port that cannot be served fails here, before any process starts.
  VLLM_RETURN_IF_ERROR(frontend::CheckListenAddress(args.host, static_cast<uint16_t>(args.port)));
  // Bad model files fail here, before any process starts.
  VLLM_ASSIGN_OR_RETURN(worker::ModelConfig model_config,
                        worker::LoadModelConfig(args.config.model.model));
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::Tokenizer> tokenizer,
                        frontend::Tokenizer::Load(args.config.model.model));
  VLLM_ASSIGN_OR_RETURN(std::optional<frontend::ChatTemplate> chat_template,
                        LoadChatTemplate(args, *tokenizer));

  // One engine core per data-parallel rank: this node's (ranks 0 .. -dpl - 1) are started
  // here, the others join from their --headless nodes over TCP.
  const config::ParallelConfig& parallel = args.config.parallel;
  const int32_t num_engines = parallel.data_parallel_size;
  VLLM_ASSIGN_OR_RETURN(const absl::Duration ready_timeout, EngineReadyTimeout());
  frontend::EngineCoreClientOptions client_options;
  client_options.num_engines = num_engines;
  if (args.multi_node) {
    client_options.tcp_address = parallel.data_parallel_address;
    client_options.handshake_port = parallel.data_parallel_rpc_port;
    VLLM_ASSIGN_OR_RETURN(client_options.heartbeat_timeout, EngineHeartbeatTimeout());
    if (!args.cluster_key_file.empty()) {
      VLLM_ASSIGN_OR_RETURN(client_options.curve, ipc::LoadCurveKeyFile(args.cluster_key_file));
    } else {
      spdlog::warn(
          "the data-parallel sockets at {} admit anyone who can reach them: pass "
          "--cluster-key-file on every node to require the cluster key (CURVE)",
          parallel.data_parallel_address);
    }
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::EngineCoreClient> client,
                        frontend::EngineCoreClient::Create(client_options));
  std::vector<std::unique_ptr<EngineProcess>> engines;
  if (absl::Status s = StartLocalEngines(args, client->handshake_address(), &engines); !s.ok()) {
    StopEngines(engines);
    return s;
  }
  if (args.multi_node) {
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
  if (absl::Status started =
          client->WaitForEngines(absl::Now() + ready_timeout,
                                 [&]() {
                                   if (stop.HasBeenNotified()) {
                                     return absl::CancelledError("interrupted during start-up");
                                   }
                                   for (auto& e : engines) {
                                     VLLM_RETURN_IF_ERROR(e->Check());
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
  frontend::EngineCoreClient* raw_client = client.get();
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::AsyncLLM> llm,
                        frontend::AsyncLLM::Create(std::move(client), std::move(tokenizer),
                                                   std::move(chat_template), config));
  frontend::ApiServerOptions server_options;
  server_options.host = args.host;
  server_options.port = static_cast<uint16_t>(args.port);
  server_options.api_key = args.api_key;
  server_options.max_connections = args.max_connections;
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::ApiServer> server,
                        frontend::ApiServer::Create(llm.get(), server_options));
  spdlog::info("serving {} at http://{}:{} ({} KV-cache blocks{}, max_model_len {})",
               config.model_name, args.host, server->port(), info.num_gpu_blocks,
               num_engines > 1 ? absl::StrCat(" on each of ", num_engines, " engines") : "",
               info.max_model_len);
  std::printf("vllm-launch: ready at http://%s:%d/v1\n", args.host.c_str(), server->port());
  std::fflush(stdout);

  // Watch the engines: when one dies, its requests fail and the others go on; /health says
  // 503 once none is left (the server stays up).
  // With --restart-dead-engines (TCP only) a dead local engine is started again and joins.
  const std::string handshake_address = raw_client->handshake_address();
  std::thread monitor([&] {
    if (!SuperviseEngines(args, handshake_address, engines, stop_pipe[0], args.restart_dead_engines,
                          [&](int32_t rank, const absl::Status& why) {
                            raw_client->MarkEngineDead(rank, why);
                          })) {
      // Every local engine ended: wait for the stop (remote engines may still serve).
      pollfd fd = {stop_pipe[0], POLLIN, 0};
      while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
      }
    }
  });
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
  (void)!write(stop_pipe[1], "x", 1);  // ends the monitor's wait
  monitor.join();
  StopEngines(engines);
  server.reset();
  llm.reset();
  close(stop_pipe[0]);
  close(stop_pipe[1]);
  return absl::OkStatus();
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

}  // namespace vllm::launcher
