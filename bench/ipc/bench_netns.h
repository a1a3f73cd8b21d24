// Two "nodes" for a benchmark that crosses a network: network namespaces `vbench-a-<pid>` (the
// head, where the writer runs) and `vbench-b-<pid>` (the remote reader's node), joined by a veth
// pair with private addresses 10.215.0.1 and 10.215.0.2 that exist only inside them
// (TOOLCHAIN.md, "Multi-host tests on one machine"). Needs root and iproute2's `ip`.
//
// Clean-up: Remove() (also run by the destructor) deletes both namespaces, and with them the
// veth pair; it is idempotent and safe to call from a signal-watching thread while the owner's
// thread also tears down (the second caller waits for the first). Processes still running in a
// namespace keep it alive, nameless, until they exit: the benchmark's readers die with their
// parent (PR_SET_PDEATHSIG), so nothing outlives the run. RemoveStale() deletes pairs left by
// runs that were killed outright (SIGKILL), judged by their pid suffix.
//
// Thread-safety: Remove() is thread-safe; everything else belongs to one thread.
#ifndef VLLM_BENCH_IPC_BENCH_NETNS_H_
#define VLLM_BENCH_IPC_BENCH_NETNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace vllm::bench {

class BenchNetns {
 public:
  // Creates both namespaces (loopback up in each), the veth pair and the addresses.
  // FailedPrecondition when not root or `ip` is missing; Internal naming the `ip` command that
  // failed (whatever was made is removed again).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BenchNetns>> Create();
  ~BenchNetns();
  BenchNetns(const BenchNetns&) = delete;
  BenchNetns& operator=(const BenchNetns&) = delete;

  // Deletes both namespaces. Idempotent; thread-safe.
  void Remove() ABSL_LOCKS_EXCLUDED(remove_mutex_);
  // Deletes `vbench-{a,b}-<pid>` namespaces whose process is gone. Best effort.
  static void RemoveStale();

  // Moves the calling thread into the head namespace (setns). Threads it creates afterwards,
  // and processes it forks, start there too. Internal when setns fails.
  [[nodiscard]] absl::Status EnterHead() const;

  const std::string& head() const { return head_; }
  const std::string& remote() const { return remote_; }
  const std::string& head_address() const { return head_address_; }
  const std::string& remote_address() const { return remote_address_; }

  // `argv` run inside the remote namespace: `ip netns exec <remote> argv...` (ip execs the
  // command in place, keeping inherited file descriptors and the parent-death signal).
  std::vector<std::string> InRemote(const std::vector<std::string>& argv) const;

 private:
  BenchNetns() = default;

  std::string head_, remote_, head_address_, remote_address_;
  absl::Mutex remove_mutex_;
  bool removed_ ABSL_GUARDED_BY(remove_mutex_) = false;
};

}  // namespace vllm::bench

#endif  // VLLM_BENCH_IPC_BENCH_NETNS_H_
