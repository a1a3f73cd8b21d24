// `vllm-launch engine-core FLAGS`: one engine core in its own process (EngineCoreProc over a
// UniProcExecutor or, with --tensor-parallel-size > 1, a MultiprocExecutor), started by the
// frontend. It dies with its parent (PR_SET_PDEATHSIG), stops in order on SIGTERM (SIGINT is
// left to the parent), and exits 0 on an orderly stop, 1 on a failure, 2 on bad flags.
//
// Flags: --handshake-address ADDR --parent-pid PID --model DIR [--engine-index I]
//   [--tensor-parallel-size N] [--load-format F] [--max-model-len N] [--max-num-seqs N]
//   [--max-num-batched-tokens N] [--block-size N] [--kv-cache-memory BYTES] [--seed S]
//   [--no-enable-prefix-caching] [--comm-backend shm|gloo]
#ifndef VLLM_LAUNCHER_ENGINE_CORE_MAIN_H_
#define VLLM_LAUNCHER_ENGINE_CORE_MAIN_H_

#include <string>
#include <vector>

namespace vllm::launcher {

inline constexpr char kEngineCoreSubcommand[] = "engine-core";

int RunEngineCore(const std::vector<std::string>& flags);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_ENGINE_CORE_MAIN_H_
