// SignalWatcher: a raised SIGTERM reaches the callback on the watcher's thread (the process
// survives it), one watcher at a time, and the destructor restores the default action.
#include "ipc/signal_watcher.h"

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "gtest/gtest.h"

namespace vllm::ipc {
namespace {

TEST(SignalWatcherTest, DeliversSignalsToTheCallback) {
  // std::mutex, not absl::Mutex: TSan sees libstdc++'s pthread calls, not the uninstrumented
  // Abseil library's.
  std::mutex mu;
  std::condition_variable cv;
  int received = 0;
  {
    auto watcher = SignalWatcher::Start({SIGTERM, SIGUSR1}, [&](int sig) {
      std::lock_guard<std::mutex> lock(mu);
      received = sig;
      cv.notify_all();
    });
    ASSERT_TRUE(watcher.ok()) << watcher.status();
    EXPECT_TRUE(absl::IsFailedPrecondition(SignalWatcher::Start({SIGTERM}, [](int) {}).status()));
    ASSERT_EQ(raise(SIGTERM), 0);
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return received == SIGTERM; }));
  }
  struct sigaction current {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
  // A new watcher may start once the old one is gone.
  EXPECT_TRUE(SignalWatcher::Start({SIGUSR1}, [](int) {}).ok());
}

}  // namespace
}  // namespace vllm::ipc
