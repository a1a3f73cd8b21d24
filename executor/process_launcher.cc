#include "executor/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "config/config_codec.h"

extern char** environ;

namespace vllm::executor {
namespace {

class SystemProcessLauncher final : public ProcessLauncher {
 public:
  bool IsExecutable(const std::string& path) override { return access(path.c_str(), X_OK) == 0; }

  absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, int inherit_fd) override {
    if (argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");
    // dup2 onto the same number would keep close-on-exec: move it out of the way first.
    int source_fd = inherit_fd;
    if (inherit_fd == config::kConfigFd) {
      source_fd = fcntl(inherit_fd, F_DUPFD_CLOEXEC, config::kConfigFd + 1);
      if (source_fd < 0) return absl::InternalError(absl::StrCat("fcntl: ", strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (source_fd >= 0) posix_spawn_file_actions_adddup2(&actions, source_fd, config::kConfigFd);
    std::vector<std::string> args = argv;
    std::vector<char*> c_argv;
    c_argv.reserve(args.size() + 1);
    for (std::string& a : args) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, c_argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (source_fd != inherit_fd) close(source_fd);
    if (err != 0) {
      return absl::InternalError(absl::StrCat("posix_spawn ", args[0], ": ", strerror(err)));
    }
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
      const int pidfd_errno = errno;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return absl::InternalError(absl::StrCat("pidfd_open(", pid, "): ", strerror(pidfd_errno)));
    }
    return Child{pid, fd};
  }

  void Kill(pid_t pid, int signal) override { kill(pid, signal); }

  absl::StatusOr<int> Reap(pid_t pid) override {
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(pid, &status, 0);
      if (r == pid) return status;
      if (r < 0 && errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("waitpid(", pid, "): ", strerror(errno)));
    }
  }
};

}  // namespace

ProcessLauncher& RealProcessLauncher() {
  static SystemProcessLauncher* const launcher = new SystemProcessLauncher;
  return *launcher;
}

}  // namespace vllm::executor
