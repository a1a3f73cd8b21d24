#include "executor/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

extern char** environ;

namespace vllm::executor {
namespace {

// The descriptor a child receives `pass_fd` as (config::kConfigFd; executor/ does not need
// config/ for this one number).
constexpr int kPassedFd = 3;

}  // namespace

absl::StatusOr<SpawnedProcess> SpawnProcess(const std::vector<std::string>& argv, int pass_fd) {
  if (argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");
  // dup2 onto the same number would keep close-on-exec: move it out of the way first.
  int source_fd = pass_fd;
  if (pass_fd == kPassedFd) {
    source_fd = fcntl(pass_fd, F_DUPFD_CLOEXEC, kPassedFd + 1);
    if (source_fd < 0) return absl::InternalError(absl::StrCat("fcntl: ", strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (source_fd >= 0) posix_spawn_file_actions_adddup2(&actions, source_fd, kPassedFd);
  std::vector<std::string> args = argv;
  std::vector<char*> c_argv;
  c_argv.reserve(args.size() + 1);
  for (std::string& a : args) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (source_fd != pass_fd) close(source_fd);
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
  return SpawnedProcess{pid, fd};
}

absl::StatusOr<int> ReapProcess(pid_t pid) {
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, 0);
    if (r == pid) return status;
    if (r < 0 && errno == EINTR) continue;
    return absl::InternalError(absl::StrCat("waitpid(", pid, "): ", strerror(errno)));
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

absl::StatusOr<std::string> SelfExecutable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return absl::InternalError("cannot read /proc/self/exe: " + ec.message());
  return self.string();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, int pass_fd, std::string name) {
  absl::StatusOr<SpawnedProcess> spawned = SpawnProcess(argv, pass_fd);
  if (!spawned.ok()) {
    return absl::Status(spawned.status().code(),
                        absl::StrCat("cannot start ", name, ": ", spawned.status().message()));
  }
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(spawned->pid, spawned->exit_fd, std::move(name)));
}

ChildProcess::~ChildProcess() {
  Stop(kDefaultGrace);
  close(exit_fd_);
}

absl::Status ChildProcess::Check() {
  if (!wait_status_.has_value()) {
    int status = 0;
    pid_t r;
    do {
      r = waitpid(pid_, &status, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r != pid_) return absl::OkStatus();
    wait_status_ = status;
  }
  return absl::UnavailableError(
      absl::StrCat(name_, " (pid ", pid_, ") ", DescribeExit(*wait_status_)));
}

void ChildProcess::Signal(int sig) const {
  (void)syscall(SYS_pidfd_send_signal, exit_fd_, sig, nullptr, 0);
}

void ChildProcess::Terminate() {
  if (!terminated_ && Check().ok()) Signal(SIGTERM);
  terminated_ = true;
}

bool ChildProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Check().ok()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    // Rounded up: never give up before the deadline.
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    pollfd fd = {exit_fd_, POLLIN, 0};
    poll(&fd, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
  }
  return true;
}

void ChildProcess::Stop(absl::Duration grace, bool terminate) {
  if (!Check().ok()) return;
  if (terminate) Terminate();
  if (WaitForExit(grace)) return;
  Signal(SIGKILL);
  if (absl::StatusOr<int> status = ReapProcess(pid_); status.ok()) {
    wait_status_ = *status;
  } else {
    wait_status_ = SIGKILL;  // not ours to reap any more: count it as killed
  }
}

}  // namespace vllm::executor
