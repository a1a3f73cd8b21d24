// SignalWatcher: a raised SIGTERM reaches the callback on the watcher's thread (the process
// survives it), one watcher at a time, and the destructor restores the default action.
#include "ipc/signal_watcher.h"

#include <signal.h>

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace vllm::ipc {
namespace {

TEST(SignalWatcherTest, DeliversSignalsToTheCallback) {
  absl::Mutex mu;
  int received = 0;
  {
    auto watcher = SignalWatcher::Start({SIGTERM, SIGUSR1}, [&](int sig) {
      absl::MutexLock lock(&mu);
      received = sig;
    });
    ASSERT_TRUE(watcher.ok()) << watcher.status();
    EXPECT_TRUE(absl::IsFailedPrecondition(SignalWatcher::Start({SIGTERM}, [](int) {}).status()));
    ASSERT_EQ(raise(SIGTERM), 0);
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* r) { return *r == SIGTERM; }, &received),
                                    absl::Seconds(5)));
  }
  struct sigaction current {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
  // A new watcher may start once the old one is gone.
  EXPECT_TRUE(SignalWatcher::Start({SIGUSR1}, [](int) {}).ok());
}

}  // namespace
}  // namespace vllm::ipc
