// A per-test deadlock watchdog for GoogleTest binaries (as iceoryx's tests arm a Watchdog per
// test): linked into a test binary, it gives every test a deadline — VLLM_TEST_WATCHDOG_S
// seconds (default 60; 0 turns it off) — and when a test passes it, prints the test's name
// and ends the process with exit code 124 (as timeout(1) does). A deadlocked queue then fails
// within a minute, naming the test, instead of at ctest's 300 s timeout with nothing said.
//
// It registers itself with GoogleTest when the binary starts (a static object), so a test
// binary only adds this file to its sources (tests/unit/ipc/CMakeLists.txt). Forked children
// that return from main are safe: the watchdog thread belongs to the process that started it.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace vllm::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::seconds WatchdogLimit() {
  const char* env = std::getenv("VLLM_TEST_WATCHDOG_S");
  if (env == nullptr || *env == '\0') return std::chrono::seconds(60);
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || v < 0) return std::chrono::seconds(60);
  return std::chrono::seconds(v);
}

class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : limit_(limit), pid_(::getpid()), thread_(new std::thread([this] { Run(); })) {}

  ~Watchdog() override {
    if (::getpid() != pid_) return;  // a forked child: the thread does not exist here
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_->join();
    delete thread_;
  }

  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    test_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = Clock::now() + limit_;
    armed_ = true;
    cv_.notify_all();
  }

  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point deadline = deadline_;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && armed_ && !stop_ &&
          deadline_ == deadline) {
        std::fprintf(stderr,
                     "\n[  WATCHDOG ] %s did not finish within %lld s (VLLM_TEST_WATCHDOG_S): "
                     "deadlocked or stuck; exiting with code 124\n",
                     test_.c_str(), static_cast<long long>(limit_.count()));
        std::fflush(stderr);
        // _Exit, not abort: the test fails by its exit code, and ctest can match the message
        // (a death by signal always fails a ctest, whatever its output).
        std::_Exit(124);
      }
    }
  }

  const std::chrono::seconds limit_;
  const pid_t pid_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  Clock::time_point deadline_;
  std::string test_;
  std::thread* thread_;  // not joined in forked children (see the destructor)
};

// Registers the watchdog before main() runs; GoogleTest owns (and at exit deletes) it.
const bool kRegistered = [] {
  const std::chrono::seconds limit = WatchdogLimit();
  if (limit.count() > 0) {
    ::testing::UnitTest::GetInstance()->listeners().Append(new Watchdog(limit));
  }
  return true;
}();

}  // namespace
}  // namespace vllm::testing
