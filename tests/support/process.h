// Child processes for integration tests: spawn our own binaries (posix_spawn), read their
// stdout, wait with a deadline, and never leave one behind — the destructor SIGKILLs and reaps
// a child that is still running, so a failing test cleans up too.
#ifndef VLLM_TESTS_SUPPORT_PROCESS_H_
#define VLLM_TESTS_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::testing {

class Subprocess {
 public:
  // Starts `argv` (argv[0] is a path) with stdout on a pipe; stderr is inherited.
  // `inherit_fd` (>= 0, not 3 itself; the caller closes it) becomes the child's descriptor 3.
  static absl::StatusOr<Subprocess> Spawn(const std::vector<std::string>& argv,
                                          int inherit_fd = -1);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Reads one line of the child's stdout (without '\n') within the timeout.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Waits for exit within the timeout; returns the raw wait status.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  void Kill(int sig);
  // True while the child has not been reaped.
  bool running() const { return pid_ > 0 && !status_; }

 private:
  Subprocess(pid_t pid, int out_fd) : pid_(pid), out_fd_(out_fd) {}
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  std::optional<int> status_;
};

// Directory of the running test binary (helpers are built next to it).
std::string BinDir();
// Pids of `parent`'s living children (zombies excluded), read from /proc.
std::vector<pid_t> ChildrenOf(pid_t parent);
// Names in /dev/shm right now.
std::set<std::string> ShmEntries();
// Names in /dev/shm that process `creator` made: ours embed the creator's pid after the kind
// ("vllm-mq-<pid>-...", "vllm-comm-<pid>-..."). For tests whose segments are all made in the
// test process itself: other tests running beside it under ctest -j make and remove their own.
std::set<std::string> ShmEntriesOf(pid_t creator);
// Private ipc:// endpoint directories (ipc/ipc_address.h: <base>/vllm-ipc-<pid>-XXXXXX, <base>
// being $XDG_RUNTIME_DIR, $TMPDIR or /tmp) whose process is gone: what a dead process left.
std::set<std::string> OrphanedIpcDirs();
// A TCP port of 127.0.0.1 that was free a moment ago, with the 7 ports after it (servers that
// take one port per rank: port + rank), for a server the test starts next; 0 when none could be
// had. Chosen below the kernel's ephemeral range, so that no outgoing connection takes it first.
int FreePort();
// "exited 3" / "killed by signal 9" for a wait status.
std::string DescribeWaitStatus(int status);

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_PROCESS_H_
