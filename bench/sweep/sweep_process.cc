#include "bench/sweep/sweep_process.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace vllm::bench_sweep {
namespace {

// Polling interval of the waits below (each waits on a condition with a deadline).
constexpr absl::Duration kPoll = absl::Milliseconds(20);

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("return code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("return code -", WTERMSIG(status));
  return "an unknown status";
}

// The environment with VLLM_SERVER_DEV_MODE=1 (replacing any value) when `dev_mode`.
std::vector<std::string> ChildEnvironment(bool dev_mode) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (dev_mode && absl::StartsWith(*e, "VLLM_SERVER_DEV_MODE=")) continue;
    env.emplace_back(*e);
  }
  if (dev_mode) env.emplace_back("VLLM_SERVER_DEV_MODE=1");
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& words) {
  std::vector<char*> out;
  for (std::string& w : words) out.push_back(w.data());
  out.push_back(nullptr);
  return out;
}

absl::StatusOr<pid_t> Spawn(std::vector<std::string> argv, bool show_stdout, bool new_session) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  if (!show_stdout) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (new_session) posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<std::string> env = ChildEnvironment(new_session);
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(env);
  std::fflush(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

// vLLM's _get_vllm_server_address: the value after --host, and after -p or --port.
void ServerAddress(const std::vector<std::string>& argv, std::string* host, int* port) {
  *host = "localhost";
  *port = 8000;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--host") {
      *host = argv[i + 1];
      break;
    }
  }
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "-p" || argv[i] == "--port") {
      (void)absl::SimpleAtoi(argv[i + 1], port);
      break;
    }
  }
}

// The process group of the running server (0: none), for the signal handler.
std::atomic<pid_t> g_server_group{0};

void OnSignal(int sig) {
  const pid_t pgid = g_server_group.load();
  if (pgid > 0) kill(-pgid, SIGKILL);
  _exit(128 + sig);
}

bool GroupGone(pid_t pgid) { return kill(-pgid, 0) == -1 && errno == ESRCH; }

void ReapAnyChildren() {
  int status = 0;
  while (waitpid(-1, &status, WNOHANG) > 0) {
  }
}

}  // namespace

void KillServerOnSignal() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

void BecomeSubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

absl::Status RunCommand(const std::vector<std::string>& argv, bool show_stdout) {
  absl::StatusOr<pid_t> pid = Spawn(argv, show_stdout, /*new_session=*/false);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "Command '", argv[0], " ...' returned non-zero exit status (", DescribeStatus(status), ")"));
}

absl::StatusOr<int> HttpStatus(const std::string& host, int port, const std::string& method,
                               const std::string& path, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  const absl::Time deadline = absl::Now() + timeout;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port));
  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
                   "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  std::string answer;
  bool ok = send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size());
  while (ok && answer.find("\r\n") == std::string::npos && answer.size() < 4096) {
    pollfd p{fd, POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[1024];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // "HTTP/1.1 200 OK"
  int code = 0;
  const size_t sp = answer.find(' ');
  if (sp == std::string::npos || !absl::SimpleAtoi(answer.substr(sp + 1, 3), &code)) {
    return absl::UnavailableError(absl::StrCat("no HTTP answer from ", host, ":", port, path));
  }
  return code;
}

absl::StatusOr<ServerProcess> ServerProcess::Start(const std::vector<std::string>& argv,
                                                   bool show_stdout) {
  absl::StatusOr<pid_t> pid = Spawn(argv, show_stdout, /*new_session=*/true);
  if (!pid.ok()) return pid.status();
  std::string host;
  int port = 8000;
  ServerAddress(argv, &host, &port);
  g_server_group.store(*pid);
  return ServerProcess(*pid, argv, host, port);
}

ServerProcess::ServerProcess(ServerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      reaped_(other.reaped_),
      wait_status_(other.wait_status_),
      argv_(std::move(other.argv_)),
      host_(std::move(other.host_)),
      port_(other.port_) {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) (void)Stop(absl::Seconds(30));
}

bool ServerProcess::Reaped() {
  if (reaped_) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    reaped_ = true;
    wait_status_ = status;
  }
  return reaped_;
}

absl::Status ServerProcess::WaitUntilReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<int> code = HttpStatus(host_, port_, "GET", "/health", absl::Seconds(5));
    if (code.ok() && *code == 200) return absl::OkStatus();
    if (Reaped()) {
      return absl::InternalError(
          absl::StrCat("Server process crashed with ", DescribeStatus(wait_status_)));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("Server failed to become ready within ",
                                                      absl::ToInt64Seconds(timeout), " seconds."));
    }
    absl::SleepFor(kPoll * 5);  // polling /health with a deadline, as vLLM's loop
  }
}

absl::Status ServerProcess::ResetCaches() const {
  const std::string& exe = argv_.empty() ? std::string() : argv_[0];
  std::vector<std::string> routes;
  if (absl::EndsWith(exe, "vllm-launch")) {
    routes = {"/reset_prefix_cache"};
  } else if (absl::EndsWith(exe, "vllm")) {
    routes = {"/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache"};
  } else {
    return absl::UnimplementedError(
        absl::StrCat("No implementation of `reset_caches` for `", exe,
                     "` server. Please specify a custom command via `--after-bench-cmd`."));
  }
  std::printf("Resetting caches at http://%s:%d\n", host_.c_str(), port_);
  for (const std::string& route : routes) {
    absl::StatusOr<int> code = HttpStatus(host_, port_, "POST", route, absl::Seconds(60));
    if (!code.ok()) return code.status();
    if (*code >= 400) {
      return absl::InternalError(absl::StrCat("POST ", route, " answered HTTP ", *code));
    }
  }
  return absl::OkStatus();
}

absl::Status ServerProcess::Stop(absl::Duration grace) {
  if (pid_ <= 0) return absl::OkStatus();
  const pid_t pgid = pid_;  // setsid: the server leads its own group
  if (!Reaped()) kill(pid_, SIGINT);
  const absl::Time grace_end = absl::Now() + grace;
  while (!Reaped() && absl::Now() < grace_end) absl::SleepFor(kPoll);
  // Whatever is left of the group (a server that did not stop, a process it left) is killed.
  kill(-pgid, SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    (void)Reaped();
    ReapAnyChildren();  // orphans of the group that came to us (BecomeSubreaper)
    if (reaped_ && GroupGone(pgid)) break;
    if (absl::Now() > deadline) {
      g_server_group.store(0);
      pid_ = -1;
      return absl::DeadlineExceededError(
          absl::StrCat("processes of the server's group ", pgid, " outlived SIGKILL by 10 s"));
    }
    absl::SleepFor(kPoll);
  }
  g_server_group.store(0);
  pid_ = -1;
  return absl::OkStatus();
}

}  // namespace vllm::bench_sweep
