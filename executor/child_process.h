// ChildProcess: one child of ours (an engine core, a worker, an API server, the DP
// coordinator) from spawn to reap: posix_spawn of argv with this process's environment and
// optionally one descriptor passed as fd 3, a pidfd that polls readable once it has ended, a
// non-blocking check that reaps it and describes how it ended, signals sent through the pidfd
// (never to a reused pid), and Stop(grace): SIGTERM, wait up to `grace` on the pidfd, SIGKILL,
// reap. The destructor stops it (default grace) so no child outlives its owner unreaped.
//
// SpawnProcess / ReapProcess / DescribeExit / SelfExecutable are the pieces it is made of,
// for callers that keep their own bookkeeping (executor/process_launcher.cc's real launcher).
//
// Thread-safety: pid(), exit_fd() and Signal() may be called from any thread while the object
// lives; everything else from one thread at a time.
#ifndef VLLM_EXECUTOR_CHILD_PROCESS_H_
#define VLLM_EXECUTOR_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::executor {

// A started process: its pid and its pidfd (readable once it has ended; the caller closes it).
struct SpawnedProcess {
  pid_t pid = -1;
  int exit_fd = -1;
};

// Starts argv[0] with `argv` and this process's environment. `pass_fd` (when >= 0; the caller
// keeps and closes it) becomes descriptor 3 in the child. On an error no process is left
// running (InvalidArgument for an empty argv, Internal naming the failed call otherwise).
[[nodiscard]] absl::StatusOr<SpawnedProcess> SpawnProcess(const std::vector<std::string>& argv,
                                                          int pass_fd);

// Waits for our child `pid` to end and returns its wait status; Internal when it is not our
// child or was already reaped.
[[nodiscard]] absl::StatusOr<int> ReapProcess(pid_t pid);

// "exited with status N", "was killed by signal S (Name)", or "ended with wait status W".
std::string DescribeExit(int wait_status);

// The path of this process's own binary (/proc/self/exe), to start our subcommands with.
[[nodiscard]] absl::StatusOr<std::string> SelfExecutable();

class ChildProcess {
 public:
  // The grace the destructor gives a child that still runs.
  static constexpr absl::Duration kDefaultGrace = absl::Seconds(4);

  // Starts argv (see SpawnProcess). `name` ("the engine core of data-parallel rank 1", "API
  // server 0") names it in Check()'s errors; a spawn error is prefixed "cannot start <name>: ".
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(
      const std::vector<std::string>& argv, int pass_fd, std::string name);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();  // Stop(kDefaultGrace), then closes the pidfd

  pid_t pid() const { return pid_; }
  // Readable once the process has ended (stays valid until destruction).
  int exit_fd() const { return exit_fd_; }
  const std::string& name() const { return name_; }

  // OK while it runs; once it has ended it is reaped (never blocks) and every later call
  // returns Unavailable "<name> (pid P) exited with status N" (or "was killed by signal S").
  absl::Status Check();
  // True once Check() saw it end (or Stop reaped it).
  bool exited() const { return wait_status_.has_value(); }
  // Its wait status once exited.
  std::optional<int> wait_status() const { return wait_status_; }

  // Sends `sig` through the pidfd (a process that has ended is not an error; never reaches
  // another process that took its pid).
  void Signal(int sig) const;
  // Sends SIGTERM once (later calls do nothing).
  void Terminate();
  // Ends it: Terminate() when `terminate` (else the caller already asked it to stop, e.g. by
  // closing its control socket), waits on the pidfd up to `grace`, then SIGKILL and reaps.
  // Idempotent.
  void Stop(absl::Duration grace, bool terminate = true);
  // Waits up to `timeout` on the pidfd; true when it has ended (then it is reaped).
  bool WaitForExit(absl::Duration timeout);

 private:
  ChildProcess(pid_t pid, int exit_fd, std::string name)
      : pid_(pid), exit_fd_(exit_fd), name_(std::move(name)) {}

  const pid_t pid_;
  const int exit_fd_;
  const std::string name_;
  bool terminated_ = false;  // SIGTERM sent
  std::optional<int> wait_status_;
};

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_CHILD_PROCESS_H_
