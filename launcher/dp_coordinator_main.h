// The DP coordinator process (vLLM's DPCoordinator / DPCoordinatorProc, which
// launch_core_engines starts on the head when data parallelism needs one): core::DpCoordinator
// in its own process, started and supervised by the head's launcher.
//
// `vllm-launch dp-coordinator FLAGS` (internal): --parent-pid P --num-engines N
// --api-servers K [--host IP] [--waves] [--cluster-key-file F]. Binds its sockets (ipc:// in
// a private directory; or with --host, tcp://IP at free ports, CURVE with the cluster key, and
// the reports at udp://IP:port sealed with a report key it makes), writes one line
// "addresses <stats> <publish> <waves or -> <report key in hex or ->" on descriptor 3 (a
// socketpair to the launcher), then runs until EOF on descriptor 3 (the launcher stops it, or is
// gone) or its parent's death (PR_SET_PDEATHSIG); it ignores SIGTERM and SIGINT, so that a signal
// to the whole process group leaves its end to the launcher. Exits 0 on an orderly stop, 1 on a
// failure, 2 on bad flags.
//
// DpCoordinatorProcess is the launcher's handle on it: start, addresses, a pidfd for
// supervision, stop. When the coordinator dies the head stops with an error naming it, as
// vLLM's launcher does (its wait_for_completion_or_failure watches the coordinator's
// process as it does the API servers'); it is not restarted (see docs/DECISIONS.md).
#ifndef VLLM_LAUNCHER_DP_COORDINATOR_MAIN_H_
#define VLLM_LAUNCHER_DP_COORDINATOR_MAIN_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::launcher {

inline constexpr char kDpCoordinatorSubcommand[] = "dp-coordinator";

int RunDpCoordinator(const std::vector<std::string>& flags);

// Where engines and API servers reach a running coordinator.
struct DpCoordinatorAddresses {
  // Engines' load reports: ipc:// (one node; ZMQ PUSH → PULL) or udp:// (several nodes: sealed
  // datagrams, core::SealReportDatagram with report_key).
  std::string stats;
  std::string publish;     // publications to the API servers (XPUB → SUB)
  std::string waves;       // lockstep waves to the engines (XPUB → SUB); empty: no lockstep
  std::string report_key;  // udp:// stats: core::kReportKeyBytes bytes; else empty
};

struct DpCoordinatorProcessOptions {
  int32_t num_engines = 2;
  int32_t api_servers = 1;  // subscribers to wait for before unlinking ipc:// files
  std::string tcp_host;     // an IP: TCP at free ports there (several nodes); empty: ipc://
  bool waves = false;       // --data-parallel-lockstep
  std::string cluster_key_file;
  absl::Duration start_timeout = absl::Seconds(30);
};

// Not thread-safe, except exit_fd() (an int read by a watcher thread).
class DpCoordinatorProcess {
 public:
  // Spawns the coordinator and waits for its addresses. Errors: it could not be spawned, it
  // exited or said nothing within start_timeout (its own error is in the log).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DpCoordinatorProcess>> Start(
      const DpCoordinatorProcessOptions& options);
  ~DpCoordinatorProcess();  // Stop(4 s)

  const DpCoordinatorAddresses& addresses() const { return addresses_; }
  pid_t pid() const { return pid_; }
  // Readable once the process has exited.
  int exit_fd() const { return exit_fd_; }
  // OK while it runs; Unavailable naming it and how it ended, once it has (and was reaped).
  absl::Status Check();
  // EOF on its control socket, then SIGKILL after `grace`. Idempotent.
  void Stop(absl::Duration grace);

 private:
  DpCoordinatorProcess() = default;
  pid_t pid_ = -1;
  int exit_fd_ = -1, control_fd_ = -1;
  bool exited_ = false;
  absl::Status exit_;
  DpCoordinatorAddresses addresses_;
};

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_DP_COORDINATOR_MAIN_H_
