// vllm-launch: the command-line entry point.
//   vllm-launch [serve] [MODEL] [flags]   the OpenAI-compatible server (launcher/serve_main.h)
//   vllm-launch bench serve [flags]       the serving load generator (bench/serve/bench_serve.h)
//   vllm-launch bench sweep serve|serve_sla  sweeps, SLA search (bench/sweep/sweep.h)
//   vllm-launch bench latency|throughput  the offline engine timed (bench/offline/)
//   vllm-launch router [flags]            the router in front of several servers
//                                         (router/router_main.h)
//   vllm-launch make-cluster-key FILE    writes a new cluster key for --cluster-key-file
//   vllm-launch engine-core / worker-proc / api-server / dp-coordinator
//                                         internal: started by the server / the executor
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/offline/latency.h"
#include "bench/offline/throughput.h"
#include "bench/serve/bench_serve.h"
#include "bench/sweep/sweep.h"
#include "ipc/curve.h"
#include "launcher/dp_coordinator_main.h"
#include "launcher/engine_core_main.h"
#include "launcher/serve_env.h"
#include "launcher/serve_main.h"
#include "router/router_main.h"
#include "worker/worker_proc.h"

int main(int argc, char** argv) {
  // VLLM_LOGGING_LEVEL in every process (children inherit the environment).
  vllm::launcher::ConfigureLoggingFromEnv();
  if (argc >= 2 && std::strcmp(argv[1], vllm::worker::kWorkerProcSubcommand) == 0) {
    const std::vector<std::string> flags(argv + 2, argv + argc);
    auto options = vllm::worker::ParseWorkerProcFlags(flags);
    if (!options.ok()) {
      std::fprintf(stderr, "vllm-launch %s: %s\n", vllm::worker::kWorkerProcSubcommand,
                   std::string(options.status().message()).c_str());
      return 2;
    }
    return vllm::worker::RunWorkerProc(*options);
  }
  if (argc >= 2 && std::strcmp(argv[1], vllm::launcher::kEngineCoreSubcommand) == 0) {
    return vllm::launcher::RunEngineCore(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], vllm::launcher::kDpCoordinatorSubcommand) == 0) {
    return vllm::launcher::RunDpCoordinator(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], vllm::launcher::kApiServerSubcommand) == 0) {
    return vllm::launcher::RunApiServer(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], "make-cluster-key") == 0) {
    // A new CURVE cluster key (mode 0600, never overwriting): copy it to every node.
    if (argc != 3) {
      std::fprintf(stderr, "usage: vllm-launch make-cluster-key FILE\n");
      return 2;
    }
    auto keys = vllm::ipc::CreateCurveKeyFile(argv[2]);
    if (!keys.ok()) {
      std::fprintf(stderr, "vllm-launch make-cluster-key: %s\n", keys.status().ToString().c_str());
      return 1;
    }
    std::printf("wrote %s (copy it to every node, mode 0600; pass --cluster-key-file %s)\n",
                argv[2], argv[2]);
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], vllm::router::kRouterSubcommand) == 0) {
    return vllm::router::RunRouter(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "serve") == 0) {
    return vllm::bench_serve::RunBenchServe(std::vector<std::string>(argv + 3, argv + argc));
  }
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "sweep") == 0) {
    return vllm::bench_sweep::RunBenchSweep(std::vector<std::string>(argv + 3, argv + argc));
  }
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "latency") == 0) {
    return vllm::bench_offline::RunBenchLatency(std::vector<std::string>(argv + 3, argv + argc));
  }
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "throughput") == 0) {
    return vllm::bench_offline::RunBenchThroughput(std::vector<std::string>(argv + 3, argv + argc));
  }
  // `vllm-launch [serve] ...`: the server (the default subcommand, as `vllm serve`).
  int first = 1;
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) first = 2;
  return vllm::launcher::RunServe(std::vector<std::string>(argv + first, argv + argc));
}
