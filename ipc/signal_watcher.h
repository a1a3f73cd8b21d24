// SignalWatcher: turns termination signals into a callback on a thread of its own.
//
// sigaction handlers (which run in whichever thread the kernel picks — including threads that
// libraries such as OpenBLAS start before main(), so blocking the signal and sigwait()ing is
// not enough) write the signal number to a pipe; the watcher thread reads it and calls
// `on_signal`. Only write(2) runs in signal context.
//
// At most one watcher per process. Thread-safety: Start/destructor from one thread.
#ifndef VLLM_IPC_SIGNAL_WATCHER_H_
#define VLLM_IPC_SIGNAL_WATCHER_H_

#include <functional>
#include <initializer_list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::ipc {

class SignalWatcher {
 public:
  // Installs handlers for `signals` and starts the thread. FailedPrecondition if a watcher
  // already exists; Internal if the pipe or a handler cannot be set up.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SignalWatcher>> Start(
      std::initializer_list<int> signals, std::function<void(int)> on_signal);
  // Restores the default actions and stops the thread.
  ~SignalWatcher();

 private:
  SignalWatcher() = default;
  std::vector<int> signals_;
  std::thread thread_;
};

}  // namespace vllm::ipc

#endif  // VLLM_IPC_SIGNAL_WATCHER_H_
