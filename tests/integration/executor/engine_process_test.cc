// The engine process and its workers as a whole: SIGTERM or SIGINT to the engine stops
// everything in order (exit 0, workers gone, nothing in /dev/shm); kill -9 of the engine takes
// the workers down within 2 s (PR_SET_PDEATHSIG) — no process keeps holding a device.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace vllm::executor {
namespace {

const std::string kModel = std::string(VLLM_SOURCE_DIR) + "/tests/fixtures/models/llama_mha";

class EngineProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Orphaned workers are re-parented to us, so the test can reap (and count) them.
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    shm_before_ = testing::ShmEntries();
  }
  void TearDown() override {
    const absl::Time deadline = absl::Now() + absl::Seconds(3);
    while (testing::ShmEntries() != shm_before_ && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
    }
    EXPECT_EQ(testing::ShmEntries(), shm_before_) << "shared memory left behind";
  }

  // Starts the engine and returns its workers' pids.
  std::vector<pid_t> Start(std::optional<testing::Subprocess>* engine) {
    auto p = testing::Subprocess::Spawn(
        {testing::BinDir() + "/engine_test_helper", kModel, testing::BinDir() + "/vllm-launch"});
    EXPECT_TRUE(p.ok()) << p.status();
    engine->emplace(std::move(*p));
    auto line = (*engine)->ReadLine(absl::Seconds(30));
    EXPECT_TRUE(line.ok()) << line.status();
    std::istringstream in(line.value_or(""));
    std::string word;
    pid_t a = 0, b = 0;
    in >> word >> a >> b;
    EXPECT_EQ(word, "ready");
    return {a, b};
  }

  // True once `pid` has exited (reaped by its parent or, as an orphan, by us).
  static bool Gone(pid_t pid) {
    waitpid(pid, nullptr, WNOHANG);  // reaps it if it was re-parented to us
    return kill(pid, 0) != 0;
  }
  static bool AllGoneWithin(const std::vector<pid_t>& pids, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      bool all = true;
      for (pid_t p : pids) all &= Gone(p);
      if (all) return true;
      absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
    }
    return false;
  }
  std::set<std::string> shm_before_;
};

TEST_F(EngineProcessTest, SigtermStopsEngineAndWorkersInOrder) {
  std::optional<testing::Subprocess> engine;
  const std::vector<pid_t> workers = Start(&engine);
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_GT(workers[1], 0);
  engine->Kill(SIGTERM);
  auto status = engine->Wait(absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
  EXPECT_TRUE(AllGoneWithin(workers, absl::Seconds(1))) << "workers outlived the engine";
}

TEST_F(EngineProcessTest, SigintStopsEngineAndWorkersInOrder) {
  std::optional<testing::Subprocess> engine;
  const std::vector<pid_t> workers = Start(&engine);
  engine->Kill(SIGINT);
  auto status = engine->Wait(absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
  EXPECT_TRUE(AllGoneWithin(workers, absl::Seconds(1))) << "workers outlived the engine";
}

TEST_F(EngineProcessTest, KilledEngineTakesItsWorkersDownWithinTwoSeconds) {
  std::optional<testing::Subprocess> engine;
  const std::vector<pid_t> workers = Start(&engine);
  engine->Kill(SIGKILL);
  ASSERT_TRUE(engine->Wait(absl::Seconds(5)).ok());
  EXPECT_TRUE(AllGoneWithin(workers, absl::Seconds(2))) << "orphaned workers kept running";
}

}  // namespace
}  // namespace vllm::executor
