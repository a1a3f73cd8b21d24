#include "bench/ipc/iceoryx_roudi.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace vllm::bench::iceoryx_internal {
namespace {

constexpr char kDirPrefix[] = "vllm-ipc-bench-iox-";
constexpr char kReadyLine[] = "RouDi is ready for clients";
constexpr absl::Duration kStartTimeout = absl::Seconds(20);
constexpr absl::Duration kStopTimeout = absl::Seconds(15);

// RouDi's mempools (TOML, RouDi 2.0 format). `size` is the chunk's user payload; the 256 bytes
// on top leave room for iceoryx's chunk header and alignment. Counts cover the deepest stream
// (256 queued chunks, or 64 at 1 MiB) plus one chunk held by each of up to 64 readers and the
// writer's loans, with room to spare: 1 MiB pool 160 MiB, the others under 20 MiB.
constexpr char kConfig[] = R"([general]
version = 1

[[segment]]

[[segment.mempool]]
size = 128
count = 20000

[[segment.mempool]]
size = 4352
count = 2000

[[segment.mempool]]
size = 65792
count = 200

[[segment.mempool]]
size = 1048832
count = 160
)";

// What the signal handler needs: plain data, read without locks.
volatile sig_atomic_t g_roudi_pid = 0;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];
bool g_handlers_installed = false;

// Stops RouDi (it shuts down cleanly on SIGTERM), restores the previous action and re-raises,
// so the process ends as it would have without us. Only async-signal-safe calls.
extern "C" void OnTerminatingSignal(int sig) {
  const pid_t pid = g_roudi_pid;
  if (pid > 0) kill(pid, SIGTERM);
  for (int i = 0; i < 3; ++i) {
    if (kSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  }
  raise(sig);
}

void InstallSignalHandlers() {
  if (g_handlers_installed) return;
  struct sigaction action {};
  action.sa_handler = OnTerminatingSignal;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) {
    sigaction(kSignals[i], nullptr, &g_previous[i]);
    // A signal this process ignores (SIGINT in a background job, nohup's SIGHUP) stays ignored.
    if (g_previous[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &action, nullptr);
  }
  g_handlers_installed = true;
}

void RestoreSignalHandlers() {
  if (!g_handlers_installed) return;
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_handlers_installed = false;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

// The NUL-separated command line of process `pid` ("" if it is gone).
std::vector<std::string> CommandLine(pid_t pid) {
  const std::string raw = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\0') {
      args.push_back(raw.substr(start, i - start));
      start = i + 1;
    }
  }
  return args;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// Process ids of RouDis that runs of this benchmark started: `iox-roudi` with a config under a
// /tmp/vllm-ipc-bench-iox-* directory.
std::vector<pid_t> OurRouDis() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid == getpid()) continue;
    const std::vector<std::string> args = CommandLine(pid);
    if (args.empty() || std::filesystem::path(args[0]).filename() != "iox-roudi") continue;
    for (const std::string& a : args) {
      if (a.find(kDirPrefix) != std::string::npos) {
        pids.push_back(pid);
        break;
      }
    }
  }
  closedir(proc);
  return pids;
}

// Stops RouDis left by earlier runs (SIGTERM, SIGKILL after kStopTimeout) and removes the
// directories of runs whose process is gone.
void CleanUpStaleRuns() {
  const std::vector<pid_t> stale = OurRouDis();
  for (const pid_t pid : stale) {
    std::fprintf(stderr, "ipc_bench: stopping iox-roudi (pid %d) left by an earlier run\n", pid);
    kill(pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + kStopTimeout;
  for (const pid_t pid : stale) {
    while (Alive(pid) && CommandLine(pid).size() > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (Alive(pid) && !CommandLine(pid).empty()) kill(pid, SIGKILL);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/tmp", ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (name.rfind(kDirPrefix, 0) != 0 ||
        !absl::SimpleAtoi(name.substr(sizeof(kDirPrefix) - 1), &pid) || pid == getpid()) {
      continue;
    }
    if (!Alive(pid)) std::filesystem::remove_all(entry.path(), ec);
  }
}

class RouDi {
 public:
  absl::StatusOr<std::string> Ensure() {
    if (pid_ > 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == 0) return dir_;
      std::fprintf(stderr, "ipc_bench: iox-roudi (pid %d) exited; starting another\n", pid_);
      pid_ = 0;
      g_roudi_pid = 0;
    }
    CleanUpStaleRuns();
    dir_ = absl::StrCat("/tmp/", kDirPrefix, getpid());
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir_, ": ", ec.message()));
    const std::string config = dir_ + "/roudi.toml";
    const std::string log = dir_ + "/roudi.log";
    std::ofstream(config) << kConfig;
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot create ", log));
    // Built before fork: the child only calls async-signal-safe functions, then exec.
    std::vector<std::string> args = {"iox-roudi", "-c", config, "-m",  "on",
                                     "-k",        "2",  "-l",   "info"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // Dies with us (SIGTERM: RouDi then cleans up its shared memory), even if we are killed.
      if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(124);
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execvp("iox-roudi", argv.data());
      _exit(127);
    }
    close(log_fd);
    if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
    pid_ = pid;
    g_roudi_pid = pid;
    InstallSignalHandlers();
    static const bool kAtExitRegistered = [] { return std::atexit(StopRouDi) == 0; }();
    (void)kAtExitRegistered;
    return AwaitReady(log);
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      const absl::Time deadline = absl::Now() + kStopTimeout;
      int status = 0;
      while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (absl::Now() > deadline) {
          std::fprintf(stderr,
                       "ipc_bench: iox-roudi did not stop in %s; killing it. Its log ends: %s\n",
                       absl::FormatDuration(kStopTimeout).c_str(),
                       Tail(ReadFile(dir_ + "/roudi.log"), 600).c_str());
          kill(pid_, SIGKILL);
          waitpid(pid_, &status, 0);
          break;
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
      pid_ = 0;
      g_roudi_pid = 0;
      RestoreSignalHandlers();
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

 private:
  // Polls RouDi's log for its ready line until kStartTimeout; fails early if it exits.
  absl::StatusOr<std::string> AwaitReady(const std::string& log) {
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (true) {
      const std::string text = ReadFile(log);
      if (text.find(kReadyLine) != std::string::npos) return dir_;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        g_roudi_pid = 0;
        std::string why =
            absl::StrCat("iox-roudi exited (status ", status, ") before it was ready");
        if (text.find("Could not acquire lock") != std::string::npos) {
          why += "; another RouDi, not started by ipc_bench, is running: stop it first";
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
          why += "; is it installed (Debian package iceoryx)?";
        }
        return absl::UnavailableError(absl::StrCat(why, ". Its log ends: ", Tail(text, 400)));
      }
      if (absl::Now() > deadline) {
        Stop();
        return absl::DeadlineExceededError(absl::StrCat("iox-roudi not ready after ",
                                                        absl::FormatDuration(kStartTimeout), ": ",
                                                        Tail(text, 400)));
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  pid_t pid_ = 0;
  std::string dir_;
};

RouDi& Instance() {
  static RouDi* roudi = new RouDi();
  return *roudi;
}

}  // namespace

absl::StatusOr<std::string> EnsureRouDi() { return Instance().Ensure(); }

void StopRouDi() { Instance().Stop(); }

}  // namespace vllm::bench::iceoryx_internal
