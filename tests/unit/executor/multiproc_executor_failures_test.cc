// MultiprocExecutor's start-up failure paths, driven through its process seam
// (executor/process_launcher.h) with a fake launcher: a spawn that fails, a worker binary that
// is not executable, a worker that exits during start-up, workers that never report ready, a
// process that cannot be reaped. Each must fail Create with a status naming the rank, and kill
// and reap every process that was started. The queues, sockets and shared memory are real.
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "config/config_codec.h"
#include "executor/multiproc_executor.h"
#include "executor/process_launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace vllm::executor {
namespace {

using ::testing::HasSubstr;

// Pretends to start processes: each "process" is an eventfd that becomes readable when it
// "ends" (at once, when killed, or never). Records every call.
class FakeLauncher final : public ProcessLauncher {
 public:
  bool executable = true;
  int fail_spawn_at = -1;     // the spawn with this index fails
  bool exit_at_once = false;  // every process ends right after it starts...
  int exit_status = 0;        // ...with this wait status
  bool reap_fails = false;

  ~FakeLauncher() override {
    for (auto& [pid, p] : procs_) close(p.fd);
  }

  bool IsExecutable(const std::string&) override { return executable; }

  absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, int inherit_fd) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int index = static_cast<int>(spawned_.size());
    spawned_.push_back(argv);
    // What a worker would read on descriptor 3 (a copy: the executor closes its own).
    configs_.push_back(config::ReadVllmConfigFd(dup(inherit_fd), absl::Seconds(5)));
    if (index == fail_spawn_at) return absl::ResourceExhaustedError("fake: fork: EAGAIN");
    const int fd = eventfd(0, EFD_CLOEXEC);
    if (fd < 0) return absl::InternalError("eventfd");
    const pid_t pid = 4000000 + index;
    procs_[pid] = Proc{dup(fd), 0, false};  // our copy: the executor closes the one it gets
    if (exit_at_once) End(pid, exit_status);
    return Child{pid, fd};
  }

  void Kill(pid_t pid, int signal) override {
    std::lock_guard<std::mutex> lock(mu_);
    kills_.emplace_back(pid, signal);
    auto it = procs_.find(pid);
    if (it != procs_.end() && !it->second.ended) End(pid, signal);  // wait status: killed
  }

  absl::StatusOr<int> Reap(pid_t pid) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (reap_fails) return absl::InternalError("fake: waitpid: ECHILD");
    auto it = procs_.find(pid);
    if (it == procs_.end() || !it->second.ended) {
      return absl::FailedPreconditionError(absl::StrCat("fake: ", pid, " has not ended"));
    }
    if (!reaped_.insert(pid).second) {
      return absl::FailedPreconditionError(absl::StrCat("fake: ", pid, " already reaped"));
    }
    return it->second.status;
  }

  std::vector<std::vector<std::string>> spawned() {
    std::lock_guard<std::mutex> lock(mu_);
    return spawned_;
  }
  // The config each spawned process found on its descriptor 3.
  std::vector<absl::StatusOr<config::VllmConfig>> configs() {
    std::lock_guard<std::mutex> lock(mu_);
    return configs_;
  }
  std::vector<std::pair<pid_t, int>> kills() {
    std::lock_guard<std::mutex> lock(mu_);
    return kills_;
  }
  std::set<pid_t> reaped() {
    std::lock_guard<std::mutex> lock(mu_);
    return reaped_;
  }
  // Started processes that never ended (leaked, in a real run).
  std::vector<pid_t> still_running() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<pid_t> out;
    for (auto& [pid, p] : procs_) {
      if (!p.ended) out.push_back(pid);
    }
    return out;
  }

 private:
  struct Proc {
    int fd = -1;
    int status = 0;
    bool ended = false;
  };
  void End(pid_t pid, int status) {  // mu_ held
    Proc& p = procs_[pid];
    p.ended = true;
    p.status = status;
    const uint64_t one = 1;
    (void)!write(p.fd, &one, sizeof(one));
  }

  std::mutex mu_;
  std::vector<std::vector<std::string>> spawned_;
  std::vector<absl::StatusOr<config::VllmConfig>> configs_;
  std::map<pid_t, Proc> procs_;
  std::vector<std::pair<pid_t, int>> kills_;
  std::set<pid_t> reaped_;
};

class MultiprocExecutorFailuresTest : public ::testing::Test {
 protected:
  // Every ring here is made in this process (the spawner is a fake), so only names carrying our
  // pid count: unit tests beside this one under ctest -j make and remove their own.
  void SetUp() override { shm_before_ = testing::ShmEntriesOf(getpid()); }
  void TearDown() override { EXPECT_EQ(testing::ShmEntriesOf(getpid()), shm_before_); }

  MultiprocExecutorOptions Options(int32_t tp) {
    MultiprocExecutorOptions o;
    o.config.model.model = "/models/m";
    o.config.parallel.tensor_parallel_size = tp;
    o.config.device.device = config::Device::kCpu;
    o.worker_binary = "/nonexistent/vllm-launch";  // the fake decides what is executable
    o.startup_timeout = absl::Seconds(60);
    o.launcher = &launcher_;
    return o;
  }

  FakeLauncher launcher_;
  std::set<std::string> shm_before_;
};

TEST_F(MultiprocExecutorFailuresTest, SpawnFailureNamesTheRankAndKillsTheOthers) {
  launcher_.fail_spawn_at = 1;
  auto executor = MultiprocExecutor::Create(Options(2));
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(executor.status().message(), HasSubstr("cannot start worker rank 1"));
  EXPECT_THAT(executor.status().message(), HasSubstr("EAGAIN"));
  // Rank 0 had started: it was killed and reaped.
  const auto spawned = launcher_.spawned();
  ASSERT_EQ(spawned.size(), 2u);
  EXPECT_EQ(spawned[0][0], "/nonexistent/vllm-launch");
  EXPECT_EQ(spawned[0][1], "worker-proc");
  EXPECT_THAT(spawned[0], ::testing::IsSupersetOf({std::string("--rank"), std::string("0")}));
  EXPECT_EQ(launcher_.kills(), (std::vector<std::pair<pid_t, int>>{{4000000, SIGKILL}}));
  EXPECT_EQ(launcher_.reaped(), (std::set<pid_t>{4000000}));
  EXPECT_TRUE(launcher_.still_running().empty());
}

TEST_F(MultiprocExecutorFailuresTest, FirstSpawnFailureLeavesNothingToKill) {
  launcher_.fail_spawn_at = 0;
  auto executor = MultiprocExecutor::Create(Options(1));
  ASSERT_FALSE(executor.ok());
  EXPECT_THAT(executor.status().message(), HasSubstr("cannot start worker rank 0"));
  EXPECT_TRUE(launcher_.kills().empty());
  EXPECT_TRUE(launcher_.reaped().empty());
}

TEST_F(MultiprocExecutorFailuresTest, BinaryNotExecutableStartsNothing) {
  launcher_.executable = false;
  auto executor = MultiprocExecutor::Create(Options(2));
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(executor.status().message(), HasSubstr("is not executable"));
  EXPECT_TRUE(launcher_.spawned().empty());
}

TEST_F(MultiprocExecutorFailuresTest, WorkerExitingDuringStartupFailsAtOnceNamingIt) {
  launcher_.exit_at_once = true;
  launcher_.exit_status = 3 << 8;  // exit(3)
  ASSERT_TRUE(WIFEXITED(launcher_.exit_status) && WEXITSTATUS(launcher_.exit_status) == 3);
  // The start-up deadline is 60 s: only the monitor's report can end Create with Unavailable.
  auto executor = MultiprocExecutor::Create(Options(1));
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kUnavailable) << executor.status();
  EXPECT_THAT(executor.status().message(), HasSubstr("worker rank 0 (pid 4000000)"));
  EXPECT_THAT(executor.status().message(), HasSubstr("exited with status 3"));
  EXPECT_TRUE(launcher_.kills().empty());  // already gone: not killed, reaped once
  EXPECT_EQ(launcher_.reaped(), (std::set<pid_t>{4000000}));
}

TEST_F(MultiprocExecutorFailuresTest, WorkersNeverReadyTimeOutNamingThemAndAreKilled) {
  MultiprocExecutorOptions options = Options(2);
  options.startup_timeout = absl::Milliseconds(300);
  options.config.scheduler.policy = config::SchedulingPolicy::kPriority;
  auto executor = MultiprocExecutor::Create(options);
  // Each worker was handed the whole config on descriptor 3, and only its own flags in argv.
  const auto configs = launcher_.configs();
  ASSERT_EQ(configs.size(), 2u);
  for (const auto& c : configs) {
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*c, options.config);
  }
  EXPECT_THAT(launcher_.spawned()[1],
              ::testing::IsSupersetOf({std::string("--config-fd"), std::string("3")}));
  EXPECT_THAT(launcher_.spawned()[1], ::testing::Not(::testing::Contains("--model")));
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kDeadlineExceeded) << executor.status();
  EXPECT_THAT(executor.status().message(), HasSubstr("worker rank(s) 0, 1 not ready"));
  auto kills = launcher_.kills();
  std::sort(kills.begin(), kills.end());
  EXPECT_EQ(kills, (std::vector<std::pair<pid_t, int>>{{4000000, SIGKILL}, {4000001, SIGKILL}}));
  EXPECT_EQ(launcher_.reaped(), (std::set<pid_t>{4000000, 4000001}));
  EXPECT_TRUE(launcher_.still_running().empty());
}

TEST_F(MultiprocExecutorFailuresTest, UnreapableWorkerStillCountsAsEnded) {
  launcher_.exit_at_once = true;
  launcher_.reap_fails = true;
  auto executor = MultiprocExecutor::Create(Options(1));
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kUnavailable) << executor.status();
  EXPECT_THAT(executor.status().message(), HasSubstr("worker rank 0 (pid 4000000) ended"));
  EXPECT_THAT(executor.status().message(), HasSubstr("ECHILD"));
}

}  // namespace
}  // namespace vllm::executor
