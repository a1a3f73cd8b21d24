// The DP coordinator process (vLLM's DPCoordinator / DPCoordinatorProc, which
// launch_core_engines starts on the head when data parallelism needs one): core::DpCoordinator
// in its own process, started and supervised by the head's launcher.
//
// `vllm-launch dp-coordinator --parent-pid P` (internal): reads its DpCoordinatorSpec (number
// of engines and API servers, TCP host, waves, cluster key file) from descriptor 3 (a
// socketpair to the launcher; launcher/spec/coordinator_spec.h), binds its sockets (ipc:// in
// a private directory; or with a TCP host, tcp://IP at free ports, CURVE with the cluster key,
// and the reports at udp://IP:port sealed with a report key it makes), writes its
// DpCoordinatorAddresses back on descriptor 3, then runs until EOF on descriptor 3 (the
// launcher stops it, or is gone) or its parent's death (PR_SET_PDEATHSIG); it ignores SIGTERM
// and SIGINT, so that a signal to the whole process group leaves its end to the launcher.
// Exits 0 on an orderly stop, 1 on a failure, 2 on bad flags or a bad spec.
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
#include "executor/child_process.h"
#include "launcher/spec/coordinator_spec.h"

namespace vllm::launcher {

inline constexpr char kDpCoordinatorSubcommand[] = "dp-coordinator";

int RunDpCoordinator(const std::vector<std::string>& flags);

struct DpCoordinatorProcessOptions {
  DpCoordinatorSpec spec;
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
  pid_t pid() const { return process_->pid(); }
  // Readable once the process has exited.
  int exit_fd() const { return process_->exit_fd(); }
  // OK while it runs; Unavailable naming it and how it ended, once it has (and was reaped).
  absl::Status Check() { return process_->Check(); }
  // EOF on its control socket, then SIGKILL after `grace`. Idempotent.
  void Stop(absl::Duration grace);

 private:
  explicit DpCoordinatorProcess(std::unique_ptr<executor::ChildProcess> process, int control_fd)
      : process_(std::move(process)), control_fd_(control_fd) {}
  // Reads its one start-up line ("addresses ...") into addresses_.
  absl::Status ReadAddresses(absl::Duration timeout);

  std::unique_ptr<executor::ChildProcess> process_;
  int control_fd_ = -1;
  DpCoordinatorAddresses addresses_;
};

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_DP_COORDINATOR_MAIN_H_
