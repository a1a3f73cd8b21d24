#include "launcher/dp_coordinator_main.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "core/dp_coordinator.h"
#include "executor/process_launcher.h"
#include "ipc/curve.h"
#include "ipc/ipc_address.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {
namespace {

constexpr int kControlFd = 3;

struct Flags {
  int64_t parent_pid = 0;
  int64_t num_engines = 0;
  int64_t api_servers = 1;
  std::string host;
  bool waves = false;
  std::string cluster_key_file;
};

absl::StatusOr<Flags> Parse(const std::vector<std::string>& args) {
  Flags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--waves") {
      f.waves = true;
      continue;
    }
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(flag, ": no value"));
    const std::string& v = args[++i];
    int64_t* number = flag == "--parent-pid"    ? &f.parent_pid
                      : flag == "--num-engines" ? &f.num_engines
                      : flag == "--api-servers" ? &f.api_servers
                                                : nullptr;
    if (number != nullptr) {
      if (!absl::SimpleAtoi(v, number)) {
        return absl::InvalidArgumentError(absl::StrCat(flag, ": not a number"));
      }
    } else if (flag == "--host") {
      f.host = v;
    } else if (flag == "--cluster-key-file") {
      f.cluster_key_file = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
  }
  if (f.parent_pid <= 0 || f.num_engines < 1 || f.num_engines > core::kMaxDpEngines ||
      f.api_servers < 1 || f.api_servers > 1024) {
    return absl::InvalidArgumentError(
        "dp-coordinator needs --parent-pid, --num-engines (1..4096) and --api-servers");
  }
  return f;
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

absl::Status RunCoordinator(const Flags& flags) {
  core::DpCoordinatorOptions o;
  o.num_engines = static_cast<int32_t>(flags.num_engines);
  if (flags.host.empty()) {
    VLLM_ASSIGN_OR_RETURN(o.stats_address, ipc::UniqueIpcAddress("dpc-stats"));
    VLLM_ASSIGN_OR_RETURN(o.publish_address, ipc::UniqueIpcAddress("dpc-publish"));
    if (flags.waves) {
      VLLM_ASSIGN_OR_RETURN(o.wave_address, ipc::UniqueIpcAddress("dpc-waves"));
    }
    o.expected_subscribers = static_cast<int32_t>(flags.api_servers);
  } else {
    // Several nodes: free ports of the head's address, reported to the engines in CONFIG.
    const std::string host =
        flags.host.find(':') != std::string::npos ? absl::StrCat("[", flags.host, "]") : flags.host;
    // Reports as sealed UDP datagrams (core/dp_coordinator.h): at 1024 engines ZMQ's receive
    // path alone costs more than the coordinator's CPU budget.
    o.udp_stats_address = absl::StrCat(host, ":0");
    VLLM_ASSIGN_OR_RETURN(o.report_key, core::NewReportKey());
    o.publish_address = absl::StrCat("tcp://", host, ":0");
    if (flags.waves) o.wave_address = absl::StrCat("tcp://", host, ":0");
    if (!flags.cluster_key_file.empty()) {
      VLLM_ASSIGN_OR_RETURN(o.curve, ipc::LoadCurveKeyFile(flags.cluster_key_file));
    }
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<core::DpCoordinator> coordinator,
                        core::DpCoordinator::Create(o));
  core::DpCoordinator* raw = coordinator.get();
  // EOF on the control socket: the launcher stops it, or is gone. (SIGTERM and SIGINT are
  // ignored: a signal to the whole process group must not end the coordinator before the
  // launcher, which would take that for a failure.)
  std::thread control([raw] {
    pthread_setname_np(pthread_self(), "vllm-dpc-ctl");  // waits for the launcher's EOF
    char buf[64];
    while (true) {
      const ssize_t n = read(kControlFd, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    raw->Stop();
  });
  const std::string line =
      absl::StrCat("addresses ",
                   o.udp_stats_address.empty() ? coordinator->stats_endpoint()
                                               : coordinator->udp_stats_endpoint(),
                   " ", coordinator->publish_endpoint(), " ",
                   coordinator->wave_endpoint().empty() ? "-" : coordinator->wave_endpoint(), " ",
                   o.report_key.empty() ? "-" : absl::BytesToHexString(o.report_key), "\n");
  absl::Status status = WriteAll(kControlFd, line) ? coordinator->Run()
                                                   : absl::UnavailableError("the launcher is gone");
  raw->Stop();
  shutdown(kControlFd, SHUT_RDWR);  // ends the control thread's read()
  control.join();
  spdlog::info("DP coordinator: {} reports ({} dropped), {} publications, {} waves",
               coordinator->reports_received(), coordinator->reports_dropped(),
               coordinator->publications_sent(), coordinator->waves_completed());
  return status;
}

}  // namespace

int RunDpCoordinator(const std::vector<std::string>& args) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("dp-coordinator"));
  absl::StatusOr<Flags> flags = Parse(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "vllm-launch %s: %s\n", kDpCoordinatorSubcommand,
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != flags->parent_pid) return 1;  // the parent died before we could watch it
  signal(SIGINT, SIG_IGN);  // Ctrl-C or a SIGTERM to the group: the parent stops us (EOF)
  signal(SIGTERM, SIG_IGN);
  if (absl::Status s = RunCoordinator(*flags); !s.ok()) {
    spdlog::error("DP coordinator stopped: {}", s.ToString());
    return 1;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<DpCoordinatorProcess>> DpCoordinatorProcess::Start(
    const DpCoordinatorProcessOptions& options) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return absl::InternalError("cannot read /proc/self/exe: " + ec.message());
  std::vector<std::string> argv = {self,
                                   kDpCoordinatorSubcommand,
                                   "--parent-pid",
                                   absl::StrCat(getpid()),
                                   "--num-engines",
                                   absl::StrCat(options.num_engines),
                                   "--api-servers",
                                   absl::StrCat(options.api_servers)};
  if (!options.tcp_host.empty()) argv.insert(argv.end(), {"--host", options.tcp_host});
  if (options.waves) argv.push_back("--waves");
  if (!options.cluster_key_file.empty()) {
    argv.insert(argv.end(), {"--cluster-key-file", options.cluster_key_file});
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  absl::StatusOr<executor::ProcessLauncher::Child> child =
      executor::RealProcessLauncher().Spawn(argv, pair[1]);
  close(pair[1]);
  if (!child.ok()) {
    close(pair[0]);
    return absl::Status(child.status().code(), absl::StrCat("cannot start the DP coordinator: ",
                                                            child.status().message()));
  }
  std::unique_ptr<DpCoordinatorProcess> p(new DpCoordinatorProcess());
  p->pid_ = child->pid;
  p->exit_fd_ = child->exit_fd;
  p->control_fd_ = pair[0];
  // Its one line, or its end.
  std::string pending;
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (pending.find('\n') == std::string::npos) {
    VLLM_RETURN_IF_ERROR(p->Check());
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("the DP coordinator (pid ", p->pid_,
                                                      ") did not start within ",
                                                      absl::FormatDuration(options.start_timeout)));
    }
    pollfd fds[2] = {{p->control_fd_, POLLIN, 0}, {p->exit_fd_, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(ms, 1000))) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (fds[0].revents != 0) {
      char buf[4096];
      const ssize_t n = read(p->control_fd_, buf, sizeof buf);
      if (n > 0) pending.append(buf, static_cast<size_t>(n));
      if (n == 0 || pending.size() > 16384) {
        // It closed without its line: it is ending; Check() reports how.
        pollfd fd = {p->exit_fd_, POLLIN, 0};
        poll(&fd, 1, 2000);
        VLLM_RETURN_IF_ERROR(p->Check());
        return absl::UnavailableError("the DP coordinator hung up during start-up");
      }
    }
  }
  std::vector<std::string> f = absl::StrSplit(pending.substr(0, pending.find('\n')), ' ');
  if (f.size() != 5 || f[0] != "addresses") {
    return absl::InternalError("the DP coordinator: malformed start-up line");
  }
  p->addresses_ = {f[1], f[2], f[3] == "-" ? "" : f[3], ""};
  if (f[4] != "-") {
    std::optional<std::string> key = core::ReportKeyFromHex(f[4]);
    if (!key.has_value()) return absl::InternalError("the DP coordinator: malformed report key");
    p->addresses_.report_key = *std::move(key);
  }
  return p;
}

DpCoordinatorProcess::~DpCoordinatorProcess() {
  Stop(absl::Seconds(4));
  if (control_fd_ >= 0) close(control_fd_);
  if (exit_fd_ >= 0) close(exit_fd_);
}

absl::Status DpCoordinatorProcess::Check() {
  if (pid_ <= 0) return absl::UnavailableError("the DP coordinator is not running");
  int status = 0;
  if (!exited_ && waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    const std::string how =
        WIFEXITED(status)     ? absl::StrCat("exited with status ", WEXITSTATUS(status))
        : WIFSIGNALED(status) ? absl::StrCat("was killed by signal ", WTERMSIG(status))
                              : absl::StrCat("ended (status ", status, ")");
    exit_ = absl::UnavailableError(absl::StrCat("the DP coordinator (pid ", pid_, ") ", how));
  }
  return exited_ ? exit_ : absl::OkStatus();
}

void DpCoordinatorProcess::Stop(absl::Duration grace) {
  if (pid_ <= 0 || !Check().ok()) return;
  if (control_fd_ >= 0) shutdown(control_fd_, SHUT_RDWR);  // EOF: it stops in order
  const absl::Time deadline = absl::Now() + grace;
  while (Check().ok() && absl::Now() < deadline) {
    pollfd fd = {exit_fd_, POLLIN, 0};
    poll(&fd, 1, 20);
  }
  if (Check().ok()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
    exit_ = absl::UnavailableError("the DP coordinator was killed");
  }
}

}  // namespace vllm::launcher
