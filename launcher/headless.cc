#include "launcher/headless.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ipc/signal_watcher.h"
#include "launcher/engine_process_manager.h"
#include "launcher/worker_node.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {

absl::Status ServeHeadless(const ServeArgs& args) {
  // A node of a multi-node engine (its rank within the engine > 0) runs workers only.
  if (IsWorkerNode(args)) return ServeWorkerNode(args);
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
  EngineProcessManager engines(args);
  engines.set_rejoin(args.rejoin_head);
  VLLM_RETURN_IF_ERROR(engines.Start({head}));  // the destructor stops the ones started
  std::printf("vllm-launch: headless: data-parallel engines %d..%d joining the head at %s%s\n",
              parallel.data_parallel_start_rank,
              parallel.data_parallel_start_rank + parallel.data_parallel_size_local - 1,
              head.c_str(), args.rejoin_head ? " (and again whenever it goes silent)" : "");
  std::fflush(stdout);
  const bool stopped = engines.Supervise(stop_pipe[0], args.restart_dead_engines,
                                         [](int32_t, const absl::Status&) {}) ==
                       EngineProcessManager::SuperviseEnd::kStopRequested;
  engines.Stop();
  if (stopped) return absl::OkStatus();
  return absl::UnavailableError("every engine core of this node ended");
}

}  // namespace vllm::launcher
