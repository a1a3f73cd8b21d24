// `vllm-launch engine-core FLAGS`: one engine core in its own process (EngineCoreProc over a
// UniProcExecutor or, with --tensor-parallel-size > 1, a MultiprocExecutor), started by the
// frontend. It dies with its parent (PR_SET_PDEATHSIG), stops in order on SIGTERM (SIGINT is
// left to the parent), and exits 0 on an orderly stop, 1 on a failure, 2 on bad flags, 3 when
// its head (over TCP) went silent, 4 when the head did not answer its HELLO in time.
//
// Flags: --handshake-address ADDR --parent-pid PID --config-fd FD. Everything else — model,
// parallelism, cache, scheduler, device, and this replica's index (data_parallel_rank) — is
// the VllmConfig the parent wrote to descriptor FD (config/config_codec.h).
#ifndef VLLM_LAUNCHER_ENGINE_CORE_MAIN_H_
#define VLLM_LAUNCHER_ENGINE_CORE_MAIN_H_

#include <string>
#include <vector>

namespace vllm::launcher {

inline constexpr char kEngineCoreSubcommand[] = "engine-core";
// The exit status of an engine core whose head (over TCP) went silent after it had joined, or
// did not answer its HELLO (core::HeadLossOf): a headless launcher may start it again to
// re-join (--rejoin-head).
inline constexpr int kEngineExitHeadSilent = 3;
inline constexpr int kEngineExitHeadUnanswered = 4;

int RunEngineCore(const std::vector<std::string>& flags);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_ENGINE_CORE_MAIN_H_
