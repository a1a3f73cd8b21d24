// The per-test watchdog (tests/support/test_watchdog.cc) must end a test that hangs, naming
// it. CTest runs this binary with VLLM_TEST_WATCHDOG_S=1 and passes it only when the output
// carries the watchdog's message (tests/unit/ipc/CMakeLists.txt): without the watchdog, the
// test below blocks until ctest's timeout and the test fails.
#include <future>

#include "gtest/gtest.h"

namespace {

TEST(WatchdogTest, FinishesInTime) { SUCCEED(); }

TEST(WatchdogTest, HangsForEver) {
  std::promise<void> never;
  never.get_future().wait();  // nothing sets it: only the watchdog ends this test
  ADD_FAILURE() << "unreachable";
}

}  // namespace
