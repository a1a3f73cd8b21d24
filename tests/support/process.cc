#include "tests/support/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace vllm::testing {

absl::StatusOr<Subprocess> Subprocess::Spawn(const std::vector<std::string>& argv, int inherit_fd) {
  if (inherit_fd == 3) return absl::InvalidArgumentError("Spawn: inherit_fd is 3 already");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (inherit_fd >= 0) posix_spawn_file_actions_adddup2(&actions, inherit_fd, 3);
  // Nothing else of the test's crosses over: a lock or pipe the test inherited (a `flock`
  // around the test binary) would otherwise stay held by a server that outlives it.
  posix_spawn_file_actions_addclosefrom_np(&actions, inherit_fd >= 0 ? 4 : 3);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
  }
  return Subprocess(pid, fds[0]);
}

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(o.pid_), out_fd_(o.out_fd_), buffer_(std::move(o.buffer_)), status_(o.status_) {
  o.pid_ = -1;
  o.out_fd_ = -1;
}

Subprocess::~Subprocess() {
  if (running()) {
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

void Subprocess::Kill(int sig) {
  if (running()) kill(pid_, sig);
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("no line from pid ", pid_, " in time"));
    }
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, INT_MAX))) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n == 0) return absl::OutOfRangeError(absl::StrCat("pid ", pid_, " closed its stdout"));
    if (n < 0 && errno != EINTR) return absl::InternalError("read failed");
    if (n > 0) buffer_.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (status_) return *status_;
  // A pidfd turns "wait with a deadline" into one poll(), without sleeping in a loop.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout))));
    close(pidfd);
  }
  int st = 0;
  const pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    return st;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
}

std::string BinDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 2 > line.size()) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(pid);
  }
  closedir(dir);
  return out;
}

std::set<std::string> ShmEntries() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}

std::set<std::string> ShmEntriesOf(pid_t creator) {
  std::set<std::string> out;
  const std::string pid = std::to_string(creator) + "-";
  for (const std::string& name : ShmEntries()) {
    if (name.rfind("vllm-", 0) != 0) continue;
    const size_t kind_end = name.find('-', 5);  // "vllm-<kind>-<pid>-..."
    if (kind_end != std::string::npos && name.compare(kind_end + 1, pid.size(), pid) == 0) {
      out.insert(name);
    }
  }
  return out;
}

std::set<std::string> OrphanedIpcDirs() {
  std::set<std::string> out;
  std::set<std::string> bases = {"/tmp"};
  for (const char* var : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
    if (const char* dir = getenv(var); dir != nullptr && dir[0] == '/') bases.insert(dir);
  }
  for (const std::string& base : bases) {
    DIR* d = opendir(base.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("vllm-ipc-", 0) != 0) continue;
      const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + 9));
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) out.insert(base + "/" + name);
    }
    closedir(d);
  }
  return out;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

namespace {

// Whether 127.0.0.1:`port` can be bound right now (with SO_REUSEADDR, as our servers bind).
bool CanBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// The kernel's range for ephemeral (outgoing and port-0) ports: [low, high].
std::pair<int, int> EphemeralRange() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  int high = 60999;
  if (!(in >> low >> high) || low < 1 || high > 65535 || low > high) return {32768, 60999};
  return {low, high};
}

}  // namespace

int FreePort() {
  // Servers take port, port + 1, ... (one per rank), so the whole run must be free, and it must
  // lie outside the ephemeral range: there, any connection this machine opens may take the
  // port between the check and the bind. Start at a random place so that tests running side by
  // side under ctest -j seldom try the same run.
  constexpr int kRun = 8;
  const auto [eph_low, eph_high] = EphemeralRange();
  int lo = 10000;
  int hi = eph_low - kRun;  // the run [port, port + kRun) ends below the ephemeral range
  if (hi - lo < 1000) {     // no room below it: above it
    lo = eph_high + 1;
    hi = 65536 - kRun;
  }
  if (hi <= lo) return 0;
  uint32_t state = static_cast<uint32_t>(getpid()) * 2654435761u ^
                   static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&state)) ^
                   static_cast<uint32_t>(time(nullptr));
  for (int attempt = 0; attempt < 200; ++attempt) {
    state = state * 1664525u + 1013904223u;
    const int port = lo + static_cast<int>((state >> 8) % static_cast<uint32_t>(hi - lo));
    bool free = true;
    for (int i = 0; i < kRun && free; ++i) free = CanBind(port + i);
    if (free) return port;
  }
  return 0;
}

}  // namespace vllm::testing
