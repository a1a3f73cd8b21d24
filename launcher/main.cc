// vllm-launch: the command-line entry point. Today it carries the internal `worker-proc`
// subcommand that MultiprocExecutor starts once per tensor-parallel rank; the server, its
// flags and the other subcommands arrive with issue 6.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
  std::fprintf(stderr,
               "usage: vllm-launch worker-proc FLAGS  (internal: started by the executor)\n"
               "The OpenAI-compatible server and its flags are not built yet.\n");
  return 2;
}
