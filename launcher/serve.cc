#include "launcher/serve.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "config/vllm_envs.h"
#include "frontend/engine/async_llm.h"
#include "frontend/engine/engine_core_client.h"
#include "frontend/openai/api_server.h"
#include "frontend/openai/request_limits.h"
#include "ipc/curve.h"
#include "ipc/signal_watcher.h"
#include "launcher/engine_process_manager.h"
#include "launcher/serve_args_frontend.h"
#include "launcher/spec/frames.h"
#include "spdlog/spdlog.h"
#include "worker/hf_config.h"
#include "worker/worker.h"

namespace vllm::launcher {
namespace {

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

// Which engines this server's client talks to: all of them, or with hybrid / external load
// balancing this node's only (ranks -dpr ..).
struct EngineRange {
  int32_t num_engines = 1;
  int32_t first_rank = 0;
};

EngineRange ServedEngines(const ServeArgs& args) {
  const config::ParallelConfig& parallel = args.config.parallel;
  if (args.dp_load_balancing != DpLoadBalancing::kInternal) {
    return {parallel.data_parallel_size_local, parallel.data_parallel_start_rank};
  }
  return {parallel.data_parallel_size, 0};
}

// The client's options but the coordinator's addresses.
absl::StatusOr<frontend::EngineCoreClientOptions> ClientOptions(const ServeArgs& args,
                                                                const ApiServerRole& role) {
  const config::ParallelConfig& parallel = args.config.parallel;
  const EngineRange engines = ServedEngines(args);
  frontend::EngineCoreClientOptions client_options;
  client_options.num_engines = engines.num_engines;
  client_options.first_rank = engines.first_rank;
  client_options.client_count = role.count;
  client_options.client_index = role.index;
  if (!args.multi_node) return client_options;
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
  return client_options;
}

// How the server is asked to stop. SIGTERM: drain (stop accepting, let requests in flight
// finish for --shutdown-timeout), then stop. Ctrl-C (SIGINT) or a second signal: stop at once.
struct StopRequest {
  absl::Notification stop;
  std::atomic<int> num_signals{0};
  std::atomic<bool> immediate{false};

  void Request(bool at_once) {
    if (at_once) immediate.store(true);
    if (!stop.HasBeenNotified()) stop.Notify();
  }
};

// VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=0 (vLLM's default): once every engine is dead and none can
// come back (no --restart-dead-engines), the server stops at once and exits with an error
// (vLLM's API server shuts down when its engine is dead). With data parallelism the server
// goes on while any engine lives (docs/DECISIONS.md).
struct EnginesGone {
  std::atomic<bool> serving{false};  // deaths during start-up are start-up errors instead
  absl::Mutex mu;
  absl::Status failure ABSL_GUARDED_BY(mu);

  // Unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH or --restart-dead-engines: the client stops the
  // server through Stop() when its last engine dies (this and `stop` must outlive the client).
  void Arm(const ServeArgs& args, frontend::EngineCoreClientOptions& options, StopRequest& stop) {
    if (config::ProcessVllmEnv().keep_alive_on_engine_death || args.restart_dead_engines) return;
    options.on_every_engine_dead = [this, &stop](const absl::Status& why) { Stop(why, stop); };
  }
  void Stop(const absl::Status& why, StopRequest& stop) {
    if (!serving.load()) return;
    {
      absl::MutexLock lock(&mu);
      if (!failure.ok()) return;
      failure = absl::UnavailableError(absl::StrCat(
          "no engine is left to serve (", why.message(),
          "): the API server stops (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 keeps it up, answering "
          "503)"));
      spdlog::error("{}", std::string(failure.message()));
    }
    stop.Request(/*at_once=*/true);
  }
  absl::Status Failure() {
    absl::MutexLock lock(&mu);
    return failure;
  }
};

// An API server of the launcher's: the launcher reports its engines' deaths; its end (EOF)
// stops this process at once.
std::thread StartControlReader(const ApiServerRole& role, EngineRange engines,
                               frontend::EngineCoreClient* client, StopRequest* stop) {
  return std::thread([role, engines, client, stop] {
    FrameReader reader(role.control_fd);
    while (std::optional<std::vector<std::string>> frames = reader.Read()) {
      for (const std::string& frame : *frames) {
        absl::StatusOr<ApiServerMessage> m = DecodeApiServerMessage(frame);
        if (!m.ok()) {
          spdlog::error("API server {}: from the launcher: {}", role.index, m.status().ToString());
          continue;
        }
        const int32_t rank = m->number;
        if (m->kind == ApiServerMessage::Kind::kEngineDead && rank >= engines.first_rank &&
            rank < engines.first_rank + engines.num_engines) {
          client->MarkEngineDead(rank - engines.first_rank, absl::UnavailableError(m->text));
        }
      }
    }
    stop->immediate.store(true);
    if (!stop->stop.HasBeenNotified()) {
      spdlog::error("API server {}: the launcher is gone: stopping", role.index);
      stop->stop.Notify();
    }
  });
}

// The frontend over a client whose engines have all joined: AsyncLLM and the HTTP server,
// listening; prints the ready line (or tells the launcher).
struct Frontend {
  std::unique_ptr<frontend::AsyncLLM> llm;
  std::unique_ptr<frontend::ApiServer> server;
};

absl::StatusOr<Frontend> StartFrontend(const ServeArgs& args, const ApiServerRole& role,
                                       const worker::HfConfig& model_config,
                                       std::unique_ptr<frontend::EngineCoreClient> client,
                                       std::unique_ptr<frontend::Tokenizer> tokenizer,
                                       std::optional<frontend::ChatTemplate> chat_template) {
  const EngineRange engines = ServedEngines(args);
  // Every engine resolved the same config; the frontend uses the smallest limits.
  frontend::EngineCoreClient::EngineInfo info = client->engines()[0];
  for (const auto& e : client->engines()) {
    info.max_model_len = std::min(info.max_model_len, e.max_model_len);
    info.num_gpu_blocks = std::min(info.num_gpu_blocks, e.num_gpu_blocks);
  }
  frontend::AsyncLLMConfig config;
  config.vllm = args.config;
  config.model_name = args.served_model_names.front();
  config.max_model_len = info.max_model_len;
  config.vocab_size = model_config.vocab_size;
  config.eos_token_ids = model_config.eos_token_ids;
  config.first_engine_rank = engines.first_rank;
  // vLLM's default_sampling_params and content format, read before the template moves.
  VLLM_ASSIGN_OR_RETURN(
      frontend::RequestDefaults request_defaults,
      frontend::ResolveRequestDefaults(
          args.config.model.model, args.serving,
          chat_template.has_value() ? std::string_view(chat_template->source()) : ""));
  request_defaults.log_max_len = args.http.max_log_len;  // the output log's cut
  Frontend f;
  VLLM_ASSIGN_OR_RETURN(f.llm, frontend::AsyncLLM::Create(std::move(client), std::move(tokenizer),
                                                          std::move(chat_template), config));
  frontend::ApiServerOptions server_options;
  server_options.host = args.host;
  server_options.port = static_cast<uint16_t>(args.port);
  server_options.http = args.http;
  // vLLM's stats line names the KV cache's device: GPU for cuda (auto: as the engines resolve
  // it, on this node), else the device.
  const absl::StatusOr<config::Device> device = worker::ResolveDevice(args.config.device.device);
  server_options.http.kv_cache_device =
      device.ok() && *device == config::Device::kCpu ? "CPU" : "GPU";
  // vLLM's HTTP variables (checked at start-up; this process inherits the environment).
  VLLM_ASSIGN_OR_RETURN(const config::VllmEnv env, config::ReadVllmEnv());
  frontend::SetRequestLimits({.max_n = static_cast<int32_t>(env.max_n_sequences),
                              .max_prompts = static_cast<int32_t>(env.max_completion_prompts),
                              .max_stop_strings = static_cast<int32_t>(env.max_stop_strings)});
  server_options.keep_alive_timeout = std::chrono::seconds(env.http_timeout_keep_alive_s);
  server_options.http.log_stats_interval_s = LogStatsIntervalSeconds();
  // 0: no limit (vLLM); kept far below overflow in the session's buffer arithmetic.
  server_options.max_body_bytes = env.http_max_request_body_size == 0
                                      ? std::numeric_limits<size_t>::max() / 4
                                      : static_cast<size_t>(env.http_max_request_body_size);
  server_options.max_connections = args.max_connections;
  server_options.tool_call_parser = args.config.tool_calling.tool_call_parser;
  server_options.enable_auto_tool_choice = args.config.tool_calling.enable_auto_tool_choice;
  server_options.exclude_tools_when_tool_choice_none =
      args.config.tool_calling.exclude_tools_when_tool_choice_none;
  server_options.request_defaults = std::move(request_defaults);
  server_options.reasoning_parser = args.config.structured_outputs.reasoning_parser;
  server_options.stream_interval = args.config.scheduler.stream_interval;
  if (role.count > 1) {
    server_options.reuse_port = true;
    server_options.server_name = absl::StrCat("vllm-launch api-server/", role.index);
  }
  VLLM_ASSIGN_OR_RETURN(f.server, frontend::ApiServer::Create(f.llm.get(), server_options));
  if (role.control_fd >= 0) {
    if (!SendApiServerMessage(role.control_fd,
                              {ApiServerMessage::Kind::kReady, "", f.server->port()})) {
      return absl::UnavailableError("the launcher is gone");
    }
    return f;
  }
  spdlog::info(
      "serving {} at http://{}:{} ({} KV-cache blocks{}, max_model_len {})", config.model_name,
      args.host, f.server->port(), info.num_gpu_blocks,
      engines.num_engines > 1 ? absl::StrCat(" on each of ", engines.num_engines, " engines") : "",
      info.max_model_len);
  std::printf("vllm-launch: ready at http://%s:%d/v1\n", args.host.c_str(), f.server->port());
  std::fflush(stdout);
  return f;
}

// The coordinator's death stops the server with an error naming it, as vLLM's does (no
// balancing figures, no waves: the head cannot serve as configured). `failure` is written by
// the supervisor loop's thread.
EngineProcessManager::Watch CoordinatorWatch(DpCoordinatorProcess* coordinator, StopRequest* stop,
                                             absl::Status* failure) {
  return {coordinator->exit_fd(), [coordinator, stop, failure] {
            *failure = coordinator->Check();
            if (failure->ok()) *failure = absl::UnavailableError("the DP coordinator ended");
            spdlog::error("{}: stopping the server", failure->ToString());
            stop->Request(/*at_once=*/true);
            return true;
          }};
}

// After the stop request: SIGTERM drains for --shutdown-timeout (Ctrl-C ends the wait), then
// the server stops; requests still in flight end with an error.
void DrainAndStop(const ServeArgs& args, frontend::ApiServer& server, StopRequest& stop) {
  if (!stop.immediate.load() && args.shutdown_timeout_s > 0) {
    server.Drain();
    const absl::Time deadline = absl::Now() + absl::Seconds(args.shutdown_timeout_s);
    spdlog::info("draining {} request(s) in flight for up to {} s (Ctrl-C to stop at once)",
                 server.num_in_flight(), args.shutdown_timeout_s);
    while (!stop.immediate.load() && absl::Now() < deadline &&
           !server.WaitForIdle(std::min(deadline, absl::Now() + absl::Milliseconds(100)))) {
    }
    if (server.num_in_flight() > 0) {
      spdlog::warn("{} request(s) still in flight: aborting them", server.num_in_flight());
    }
  }
  server.Stop();
}

}  // namespace

bool NeedsCoordinator(const ServeArgs& args) {
  return !args.headless && args.config.parallel.data_parallel_size > 1 &&
         args.dp_load_balancing == DpLoadBalancing::kInternal;
}

absl::StatusOr<std::unique_ptr<DpCoordinatorProcess>> StartCoordinator(const ServeArgs& args,
                                                                       int32_t api_servers) {
  DpCoordinatorProcessOptions o;
  o.spec.num_engines = args.config.parallel.data_parallel_size;
  o.spec.api_servers = api_servers;
  o.spec.waves = args.data_parallel_lockstep;
  if (args.multi_node) {
    // Engines of other nodes report to it: the head's address, free ports (told in CONFIG).
    VLLM_ASSIGN_OR_RETURN(o.spec.tcp_host, frontend::ResolveListenAddress(
                                               args.config.parallel.data_parallel_address));
    o.spec.cluster_key_file = args.cluster_key_file;
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<DpCoordinatorProcess> c, DpCoordinatorProcess::Start(o));
  spdlog::info("started the DP coordinator (pid {}): reports at {}, publications at {}{}", c->pid(),
               c->addresses().stats, c->addresses().publish,
               o.spec.waves ? absl::StrCat(", waves at ", c->addresses().waves) : "");
  return c;
}

absl::Status Serve(const ServeArgs& args, const ApiServerRole& role) {
  const bool launched = role.control_fd >= 0;  // an API server process of the launcher's
  // A --host/--port that cannot be served, or bad model files, fail here, before any process
  // starts.
  if (!launched) {
    VLLM_RETURN_IF_ERROR(frontend::CheckListenAddress(args.host, static_cast<uint16_t>(args.port)));
  }
  VLLM_ASSIGN_OR_RETURN(worker::HfConfig model_config,
                        worker::LoadHfConfig(args.config.model.model));
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::Tokenizer> tokenizer,
                        frontend::Tokenizer::Load(args.config.model.model));
  VLLM_ASSIGN_OR_RETURN(std::optional<frontend::ChatTemplate> chat_template,
                        LoadChatTemplate(args, *tokenizer));
  // One engine core per data-parallel rank: this node's (ranks 0 .. -dpl - 1) are started
  // here (or by the launcher, for its API servers), the others join from their --headless
  // nodes over TCP.
  const EngineRange served = ServedEngines(args);
  VLLM_ASSIGN_OR_RETURN(const absl::Duration ready_timeout, EngineReadyTimeout());
  VLLM_ASSIGN_OR_RETURN(frontend::EngineCoreClientOptions client_options,
                        ClientOptions(args, role));
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
  // Stopping ends requests still in flight with an error and takes at most ~5 s (the engine
  // gets 4).
  StopRequest stop;
  EnginesGone gone;
  gone.Arm(args, client_options, stop);
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<frontend::EngineCoreClient> client,
                        frontend::EngineCoreClient::Create(client_options));
  EngineProcessManager engines(args);  // its destructor stops the ones started on an error
  if (launched) {
    if (!SendApiServerMessage(role.control_fd, {ApiServerMessage::Kind::kHandshake,
                                                client->handshake_address(), 0})) {
      return absl::UnavailableError("the launcher is gone");
    }
  } else {
    VLLM_RETURN_IF_ERROR(engines.Start({client->handshake_address()}));
  }
  if (args.multi_node && role.index == 0) {
    spdlog::info("waiting for {} data-parallel engine(s) to join at {}", served.num_engines,
                 client->handshake_address());
  }
  int stop_pipe[2];
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  absl::Cleanup close_pipe = [&] {
    close(stop_pipe[0]);
    close(stop_pipe[1]);
  };
  VLLM_ASSIGN_OR_RETURN(auto watcher, ipc::SignalWatcher::Start({SIGINT, SIGTERM}, [&](int sig) {
                          const bool first = stop.num_signals.fetch_add(1) == 0;
                          if (sig == SIGINT || !first) stop.immediate.store(true);
                          spdlog::info("signal {}: {}", sig,
                                       stop.immediate.load() ? "shutting down" : "draining");
                          stop.Request(/*at_once=*/false);
                        }));
  frontend::EngineCoreClient* raw_client = client.get();
  std::thread control;
  if (launched) control = StartControlReader(role, served, raw_client, &stop);
  absl::Cleanup join_control = [&] {
    if (control.joinable()) {
      shutdown(role.control_fd, SHUT_RDWR);  // ends the reader's read()
      control.join();
    }
  };
  VLLM_RETURN_IF_ERROR(client->WaitForEngines(absl::Now() + ready_timeout, [&]() {
    if (stop.stop.HasBeenNotified()) return absl::CancelledError("interrupted during start-up");
    VLLM_RETURN_IF_ERROR(engines.Check());
    if (coordinator != nullptr) VLLM_RETURN_IF_ERROR(coordinator->Check());
    return absl::OkStatus();
  }));
  gone.serving.store(true);
  VLLM_ASSIGN_OR_RETURN(Frontend frontend,
                        StartFrontend(args, role, model_config, std::move(client),
                                      std::move(tokenizer), std::move(chat_template)));
  // Watch the engines: when one dies, its requests fail and the others go on; once none is
  // left the server stops (EnginesGone) or stays up answering 503 (/health too).
  // With --restart-dead-engines (TCP only) a dead local engine is started again and joins.
  // The coordinator's death stops the server (see CoordinatorWatch); `coordinator_failure` is
  // written by the monitor, read after it is joined.
  absl::Status coordinator_failure;
  std::vector<EngineProcessManager::Watch> watches;
  if (coordinator != nullptr) {
    watches.push_back(CoordinatorWatch(coordinator.get(), &stop, &coordinator_failure));
  }
  std::thread monitor([&] {
    const EngineProcessManager::SuperviseEnd end = engines.Supervise(
        stop_pipe[0], args.restart_dead_engines,
        [&](int32_t rank, const absl::Status& why) {
          raw_client->MarkEngineDead(rank - served.first_rank, why);
        },
        watches);
    if (end == EngineProcessManager::SuperviseEnd::kEnginesEnded) {
      // Every local engine ended (or there are none here): wait for the stop (remote engines
      // may still serve).
      pollfd fd = {stop_pipe[0], POLLIN, 0};
      while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
      }
    }
  });
  stop.stop.WaitForNotification();
  DrainAndStop(args, *frontend.server, stop);
  (void)!write(stop_pipe[1], "x", 1);  // ends the monitor's wait
  monitor.join();
  engines.Stop();
  coordinator.reset();
  frontend.server.reset();
  frontend.llm.reset();
  VLLM_RETURN_IF_ERROR(coordinator_failure);
  return gone.Failure();
}

}  // namespace vllm::launcher
