#include "executor/process_launcher.h"

#include <signal.h>
#include <unistd.h>

#include "executor/child_process.h"

namespace vllm::executor {
namespace {

// The real calls, made of ChildProcess's pieces (executor/child_process.h).
class SystemProcessLauncher final : public ProcessLauncher {
 public:
  bool IsExecutable(const std::string& path) override { return access(path.c_str(), X_OK) == 0; }

  absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, int inherit_fd) override {
    absl::StatusOr<SpawnedProcess> spawned = SpawnProcess(argv, inherit_fd);
    if (!spawned.ok()) return spawned.status();
    return Child{spawned->pid, spawned->exit_fd};
  }

  void Kill(pid_t pid, int signal) override { kill(pid, signal); }

  absl::StatusOr<int> Reap(pid_t pid) override { return ReapProcess(pid); }
};

}  // namespace

ProcessLauncher& RealProcessLauncher() {
  static SystemProcessLauncher* const kLauncher = new SystemProcessLauncher;
  return *kLauncher;
}

}  // namespace vllm::executor
