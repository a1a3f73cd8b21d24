// ProcessLauncher: the operating-system calls MultiprocExecutor makes about its worker
// processes — start one, know when it ends, signal it, reap it — behind one interface, as
// leveldb's Env seams the OS, so unit tests can make each of them fail
// (tests/unit/executor/). RealProcessLauncher() is what the product uses: posix_spawn with this
// process's environment (and one descriptor passed as fd 3), pidfd_open, kill, waitpid — made
// of executor/child_process.h's pieces (SpawnProcess, ReapProcess).
//
// Thread-safety: the real launcher is stateless and thread-safe; the executor calls Reap from
// its monitor thread and the rest from the engine thread.
#ifndef VLLM_EXECUTOR_PROCESS_LAUNCHER_H_
#define VLLM_EXECUTOR_PROCESS_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::executor {

class ProcessLauncher {
 public:
  // A started process: its pid and a file descriptor (the caller closes it) that polls
  // readable once the process has ended.
  struct Child {
    pid_t pid = -1;
    int exit_fd = -1;
  };

  virtual ~ProcessLauncher() = default;

  // True when `path` can be executed.
  virtual bool IsExecutable(const std::string& path) = 0;
  // Starts argv[0] with `argv`. `inherit_fd` (when >= 0; the caller keeps and closes it) becomes
  // descriptor 3 in the child (config::kConfigFd: where a worker reads its config). On an error
  // no process is left running.
  [[nodiscard]] virtual absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv,
                                                    int inherit_fd) = 0;
  // Sends `signal` to the process (a process already gone is not an error).
  virtual void Kill(pid_t pid, int signal) = 0;
  // Waits for the process to end and returns its wait status (waitpid's), or an error when
  // it is not our child or was already reaped.
  [[nodiscard]] virtual absl::StatusOr<int> Reap(pid_t pid) = 0;
};

// The launcher over the real system calls (one instance for the process).
ProcessLauncher& RealProcessLauncher();

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_PROCESS_LAUNCHER_H_
