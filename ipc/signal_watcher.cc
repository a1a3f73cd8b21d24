#include "ipc/signal_watcher.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace vllm::ipc {
namespace {

// The pipe the handlers write to; -1 when no watcher exists.
std::atomic<int> g_write_fd{-1};
int g_read_fd = -1;

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int fd = g_write_fd.load();
  if (fd >= 0) (void)!write(fd, &byte, 1);
  errno = saved;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SignalWatcher>> SignalWatcher::Start(
    std::initializer_list<int> signals, std::function<void(int)> on_signal) {
  if (g_write_fd.load() >= 0) return absl::FailedPreconditionError("a SignalWatcher exists");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  g_read_fd = fds[0];
  g_write_fd.store(fds[1]);
  std::unique_ptr<SignalWatcher> w(new SignalWatcher());
  for (int sig : signals) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("sigaction(", sig, "): ", strerror(errno)));
    }
    w->signals_.push_back(sig);
  }
  w->thread_ = std::thread([on_signal = std::move(on_signal)] {
    pthread_setname_np(pthread_self(), "vllm-signals");  // runs on_signal for each signal
    while (true) {
      unsigned char byte = 0;
      const ssize_t n = read(g_read_fd, &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == 0) return;  // 0: the watcher is being destroyed
      on_signal(byte);
    }
  });
  return w;
}

SignalWatcher::~SignalWatcher() {
  for (int sig : signals_) signal(sig, SIG_DFL);
  const unsigned char stop = 0;
  const int fd = g_write_fd.exchange(-1);
  if (fd >= 0) (void)!write(fd, &stop, 1);
  if (thread_.joinable()) thread_.join();
  if (fd >= 0) close(fd);
  if (g_read_fd >= 0) close(g_read_fd);
  g_read_fd = -1;
}

}  // namespace vllm::ipc
