#include "launcher/dp_coordinator_main.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/dp_coordinator.h"
#include "ipc/curve.h"
#include "ipc/ipc_address.h"
#include "launcher/spec/frames.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {
namespace {

constexpr int kControlFd = 3;
static_assert(kSpecMaxDpEngines == core::kMaxDpEngines);
static_assert(kSpecReportKeyBytes == core::kReportKeyBytes);

// --parent-pid P: the one flag (everything else is the spec on descriptor 3).
absl::StatusOr<int64_t> ParseParentPid(const std::vector<std::string>& args) {
  int64_t parent_pid = 0;
  if (args.size() != 2 || args[0] != "--parent-pid" || !absl::SimpleAtoi(args[1], &parent_pid) ||
      parent_pid <= 0) {
    return absl::InvalidArgumentError(
        "dp-coordinator needs --parent-pid (and its spec on descriptor 3)");
  }
  return parent_pid;
}

// The launcher's spec, the first frame on descriptor 3.
absl::StatusOr<DpCoordinatorSpec> ReadSpec() {
  absl::StatusOr<std::string> frame = ReadOneFrame(kControlFd, absl::Seconds(30));
  if (!frame.ok()) {
    return absl::Status(frame.status().code(),
                        absl::StrCat("descriptor 3: ", frame.status().message()));
  }
  return DecodeDpCoordinatorSpec(*frame);
}

absl::Status RunCoordinator(const DpCoordinatorSpec& flags) {
  core::DpCoordinatorOptions o;
  o.num_engines = flags.num_engines;
  if (flags.tcp_host.empty()) {
    VLLM_ASSIGN_OR_RETURN(o.stats_address, ipc::UniqueIpcAddress("dpc-stats"));
    VLLM_ASSIGN_OR_RETURN(o.publish_address, ipc::UniqueIpcAddress("dpc-publish"));
    if (flags.waves) {
      VLLM_ASSIGN_OR_RETURN(o.wave_address, ipc::UniqueIpcAddress("dpc-waves"));
    }
    o.expected_subscribers = flags.api_servers;
  } else {
    // Several nodes: free ports of the head's address, reported to the engines in CONFIG.
    const std::string host = flags.tcp_host.find(':') != std::string::npos
                                 ? absl::StrCat("[", flags.tcp_host, "]")
                                 : flags.tcp_host;
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
  DpCoordinatorAddresses addresses;
  addresses.stats = o.udp_stats_address.empty() ? coordinator->stats_endpoint()
                                                : coordinator->udp_stats_endpoint();
  addresses.publish = coordinator->publish_endpoint();
  addresses.waves = coordinator->wave_endpoint();
  addresses.report_key = o.report_key;
  absl::Status status = WriteFrame(kControlFd, EncodeDpCoordinatorAddresses(addresses))
                            ? coordinator->Run()
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
  absl::StatusOr<int64_t> parent_pid = ParseParentPid(args);
  if (!parent_pid.ok()) {
    std::fprintf(stderr, "vllm-launch %s: %s\n", kDpCoordinatorSubcommand,
                 std::string(parent_pid.status().message()).c_str());
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != *parent_pid) return 1;  // the parent died before we could watch it
  signal(SIGINT, SIG_IGN);  // Ctrl-C or a SIGTERM to the group: the parent stops us (EOF)
  signal(SIGTERM, SIG_IGN);
  absl::StatusOr<DpCoordinatorSpec> spec = ReadSpec();
  if (!spec.ok()) {
    std::fprintf(stderr, "vllm-launch %s: %s\n", kDpCoordinatorSubcommand,
                 spec.status().ToString().c_str());
    return 2;
  }
  if (absl::Status s = RunCoordinator(*spec); !s.ok()) {
    spdlog::error("DP coordinator stopped: {}", s.ToString());
    return 1;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<DpCoordinatorProcess>> DpCoordinatorProcess::Start(
    const DpCoordinatorProcessOptions& options) {
  VLLM_ASSIGN_OR_RETURN(const std::string self, executor::SelfExecutable());
  const std::vector<std::string> argv = {self, kDpCoordinatorSubcommand, "--parent-pid",
                                         absl::StrCat(getpid())};
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  absl::StatusOr<std::unique_ptr<executor::ChildProcess>> child =
      executor::ChildProcess::Spawn(argv, pair[1], "the DP coordinator");
  close(pair[1]);
  if (!child.ok()) {
    close(pair[0]);
    return child.status();
  }
  std::unique_ptr<DpCoordinatorProcess> p(new DpCoordinatorProcess(*std::move(child), pair[0]));
  // Its spec (a failed write shows as its exit below).
  (void)WriteFrame(p->control_fd_, EncodeDpCoordinatorSpec(options.spec));
  VLLM_RETURN_IF_ERROR(p->ReadAddresses(options.start_timeout));
  return p;
}

absl::Status DpCoordinatorProcess::ReadAddresses(absl::Duration timeout) {
  // Its one frame, or its end.
  FrameReader reader(control_fd_);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    VLLM_RETURN_IF_ERROR(Check());
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("the DP coordinator (pid ", pid(),
                                                      ") did not start within ",
                                                      absl::FormatDuration(timeout)));
    }
    pollfd fds[2] = {{control_fd_, POLLIN, 0}, {exit_fd(), POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(ms, 1000))) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    if (fds[0].revents == 0) continue;
    std::optional<std::vector<std::string>> frames = reader.Read();
    if (!frames.has_value()) {
      // It closed without its addresses: it is ending; Check() reports how.
      process_->WaitForExit(absl::Seconds(2));
      VLLM_RETURN_IF_ERROR(Check());
      return absl::UnavailableError("the DP coordinator hung up during start-up");
    }
    if (frames->empty()) continue;
    absl::StatusOr<DpCoordinatorAddresses> addresses =
        DecodeDpCoordinatorAddresses(frames->front());
    if (!addresses.ok()) {
      return absl::InternalError(
          absl::StrCat("the DP coordinator: ", addresses.status().message()));
    }
    addresses_ = *std::move(addresses);
    return absl::OkStatus();
  }
}

DpCoordinatorProcess::~DpCoordinatorProcess() {
  Stop(absl::Seconds(4));
  if (control_fd_ >= 0) close(control_fd_);
}

void DpCoordinatorProcess::Stop(absl::Duration grace) {
  if (!Check().ok()) return;
  if (control_fd_ >= 0) shutdown(control_fd_, SHUT_RDWR);  // EOF: it stops in order
  process_->Stop(grace, /*terminate=*/false);
}

}  // namespace vllm::launcher
