// vllm-launch: the command-line entry point. Today it carries the internal subcommands:
// `worker-proc` (MultiprocExecutor starts one per tensor-parallel rank) and `engine-core` (the
// frontend starts one per engine replica); the server, its flags and the other subcommands
// arrive with issue 6.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "launcher/bench_serve.h"
#include "launcher/engine_core_main.h"
#include "worker/worker_proc.h"

int main(int argc, char** argv) {
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
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "serve") == 0) {
    return vllm::launcher::RunBenchServe(std::vector<std::string>(argv + 3, argv + argc));
  }
  std::fprintf(stderr,
               "usage: vllm-launch bench serve FLAGS  (load generator, like vllm bench serve)\n"
               "       vllm-launch worker-proc FLAGS  (internal: started by the executor)\n"
               "       vllm-launch engine-core FLAGS  (internal: started by the frontend)\n"
               "The OpenAI-compatible server and its flags are not built yet.\n");
  return 2;
}
