// The DP coordinator process and request waves at `--data-parallel-size 2` (one node):
//   - with --data-parallel-lockstep, while one engine serves a long request the idle one runs
//     dummy steps (it uses CPU, and logs how many when the wave completes); once the wave is
//     complete neither steps any more;
//   - without the flag the idle engine does not step (no CPU, no wave);
//   - kill -9 of the coordinator stops the whole server with an error naming it (as vLLM).
// The engines' log lines are read from the server's stderr, which the test sends to a file.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

// Whether process `pid` has a private ipc:// endpoint directory (ipc/ipc_address.h:
// <base>/vllm-ipc-<pid>-XXXXXX, base $XDG_RUNTIME_DIR, $TMPDIR or /tmp).
bool HasIpcDir(pid_t pid) {
  const std::string prefix = absl::StrCat("vllm-ipc-", pid, "-");
  std::vector<std::string> bases = {"/tmp"};
  for (const char* env : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
    if (const char* v = getenv(env); v != nullptr && *v != '\0') bases.push_back(v);
  }
  for (const std::string& base : bases) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      if (absl::StartsWith(entry.path().filename().string(), prefix)) return true;
    }
  }
  return false;
}

// Long enough that the CPU window below falls inside it even on an idle machine: one engine
// alone decodes the bundled model at ~750 tokens/s (300 tokens once ended inside the window);
// 900 take >= 1.2 s alone, ~2-6 s with a stepping neighbour. The prompt + 900 < max_model_len.
constexpr int kLongTokens = 900;
// How long CPU use is measured over (a measurement window, not a wait for an event).
constexpr absl::Duration kWindow = absl::Milliseconds(500);

class ServeDpLockstepTest : public testing::ServeTest {
 protected:
  void SetUp() override {
    ServeTest::SetUp();
    char dir[] = "/tmp/vllm-lockstep-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    log_ = dir_ + "/server.log";
  }
  void TearDown() override {
    ServeTest::TearDown();
    std::remove(log_.c_str());
    rmdir(dir_.c_str());
  }

  // The server with its stderr (and its children's) in log_.
  void Start(const std::vector<std::string>& args) {
    StartServer(args, {"/bin/sh", "-c", "exec \"$@\" 2>\"$LOCKSTEP_LOG\"", "sh"});
  }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Polls the log (every 20 ms) until it holds every one of `lines`, by the deadline.
  bool WaitForLog(const std::vector<std::string>& lines, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const std::string log = Log();
      if (std::all_of(lines.begin(), lines.end(),
                      [&](const std::string& l) { return absl::StrContains(log, l); })) {
        return true;
      }
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));  // polling a condition with a deadline
    }
  }

  // "engine E: wave W complete after D dummy step(s)" → D per engine, for wave W.
  std::map<int, int> DummySteps(int wave) const {
    std::map<int, int> steps;
    const std::regex re(
        absl::StrCat("engine (\\d+): wave ", wave, " complete after (\\d+) dummy step"));
    const std::string log = Log();
    for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
         ++it) {
      steps[std::stoi((*it)[1])] = std::stoi((*it)[2]);
    }
    return steps;
  }

  // CPU each engine core used over `window`.
  std::vector<double> EngineCpuOverWindow(const std::vector<pid_t>& engines,
                                          absl::Duration window = kWindow) const {
    std::vector<absl::Duration> before;
    for (pid_t e : engines) before.push_back(testing::CpuTimeOf(e));
    absl::SleepFor(window);  // the measurement window
    std::vector<double> used;
    for (size_t i = 0; i < engines.size(); ++i) {
      used.push_back(absl::ToDoubleSeconds(testing::CpuTimeOf(engines[i]) - before[i]));
    }
    return used;
  }

  // Waits (10 s at most) until the engines used no CPU over one 100 ms window. Start-up work
  // can go on after /health says ready and would count in the CPU windows below: in one CI
  // run the idle engine used 50 ms of a 268 ms window (the busy one 440 ms); here such time
  // was its OpenBLAS thread's (OpenBLAS's pool spins before it sleeps).
  bool WaitUntilEnginesIdle(const std::vector<pid_t>& engines) const {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const std::vector<double> used = EngineCpuOverWindow(engines, absl::Milliseconds(100));
      if (std::all_of(used.begin(), used.end(), [](double u) { return u == 0.0; })) return true;
    }
    return false;
  }

  // CPU each engine core used from now until `client` has returned, and that window in
  // seconds (to `finished`, which the client sets): the window ends with the request however
  // fast this machine decodes (900 tokens took 1.2 s once, under 0.5 s with BF16 weights).
  std::pair<std::vector<double>, double> EngineCpuUntilDone(const std::vector<pid_t>& engines,
                                                            std::thread& client,
                                                            const absl::Time& finished) const {
    std::vector<absl::Duration> before;
    for (pid_t e : engines) before.push_back(testing::CpuTimeOf(e));
    const absl::Time start = absl::Now();
    client.join();
    std::vector<double> used;
    for (size_t i = 0; i < engines.size(); ++i) {
      used.push_back(absl::ToDoubleSeconds(testing::CpuTimeOf(engines[i]) - before[i]));
    }
    return {used, absl::ToDoubleSeconds(finished - start)};
  }

  // One long greedy request in the background; `done` is set when it returned.
  std::thread LongRequest(int* status, absl::Time* finished) {
    return std::thread([this, status, finished] {
      const json body = {{"prompt", "In the beginning"},
                         {"max_tokens", kLongTokens},
                         {"ignore_eos", true},
                         {"temperature", 0}};
      auto r = testing::Http(port_, "POST", "/v1/completions", body.dump(), "application/json",
                             absl::Seconds(120));
      *status = r.ok() ? r->status : -1;
      *finished = absl::Now();
    });
  }

  std::string dir_, log_;
};

TEST_F(ServeDpLockstepTest, TheIdleEngineStepsDuringTheWaveAndStopsAfterIt) {
  setenv("LOCKSTEP_LOG", log_.c_str(), 1);
  ASSERT_NO_FATAL_FAILURE(Start({"--data-parallel-size", "2", "--data-parallel-lockstep"}));
  const std::vector<pid_t> engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(engines.size(), 2u);
  ASSERT_EQ(testing::ChildrenRunning(server_->pid(), "dp-coordinator").size(), 1u);
  ASSERT_TRUE(WaitUntilEnginesIdle(engines)) << "the engines never went idle after start-up";

  int status = 0;
  absl::Time finished = absl::InfiniteFuture();
  std::thread client = LongRequest(&status, &finished);
  // The request's engine reported work: the coordinator started wave 0 on both.
  const bool running =
      WaitForLog({"engine 0: wave 0 running", "engine 1: wave 0 running"}, absl::Seconds(30));
  const auto [during, window] = EngineCpuUntilDone(engines, client, finished);
  ASSERT_TRUE(running) << Log();
  ASSERT_EQ(status, 200);
  ASSERT_GT(window, 0.05) << "the request ended before the window could start: make it longer";
  // Both engines computed: the busy one its request, the idle one dummy steps.
  const double most = std::max(during[0], during[1]), least = std::min(during[0], during[1]);
  std::printf("engine CPU over %.3f s during the wave: %.3f s and %.3f s\n", window, during[0],
              during[1]);
  EXPECT_GT(most, 0.2 * window);
  EXPECT_GT(least, 0.3 * most) << "the idle engine did not step";

  // The wave completes on both; the idle engine ran about one dummy step per decode step.
  ASSERT_TRUE(
      WaitForLog({"engine 0: wave 0 complete", "engine 1: wave 0 complete"}, absl::Seconds(10)))
      << Log();
  const std::map<int, int> steps = DummySteps(0);
  ASSERT_EQ(steps.size(), 2u) << Log();
  const int idle = std::max(steps.at(0), steps.at(1));
  std::printf("dummy steps in wave 0: engine 0 %d, engine 1 %d\n", steps.at(0), steps.at(1));
  EXPECT_GE(idle, kLongTokens / 4);

  // After the wave nobody steps: (almost) no CPU, and no new wave without requests.
  const std::vector<double> after = EngineCpuOverWindow(engines);
  std::printf("engine CPU over %s after the wave: %.3f s and %.3f s\n",
              absl::FormatDuration(kWindow).c_str(), after[0], after[1]);
  EXPECT_LT(after[0] + after[1], 0.1);
  EXPECT_FALSE(absl::StrContains(Log(), "wave 1 running"));

  // A second request starts wave 1 (the waves go on).
  client = LongRequest(&status, &finished);
  client.join();
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(
      WaitForLog({"engine 0: wave 1 complete", "engine 1: wave 1 complete"}, absl::Seconds(10)))
      << Log();

  server_->Kill(SIGTERM);
  auto exit = server_->Wait(absl::Seconds(40));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << testing::DescribeWaitStatus(*exit);
  server_.reset();
}

TEST_F(ServeDpLockstepTest, WithoutTheFlagTheIdleEngineDoesNotStep) {
  setenv("LOCKSTEP_LOG", log_.c_str(), 1);
  ASSERT_NO_FATAL_FAILURE(Start({"--data-parallel-size", "2"}));
  const std::vector<pid_t> engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(engines.size(), 2u);
  ASSERT_TRUE(WaitUntilEnginesIdle(engines)) << "the engines never went idle after start-up";

  int status = 0;
  absl::Time finished = absl::InfiniteFuture();
  std::thread client = LongRequest(&status, &finished);
  // Wait until an engine runs it (its figures reach /metrics).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool running = false;
  while (!running && absl::Now() < deadline) {
    const testing::MetricSamples m = testing::ScrapeMetrics(port_);
    running = testing::SumOf(m, "vllm:num_requests_running") >= 1;
    if (!running) absl::SleepFor(absl::Milliseconds(20));  // polling with a deadline
  }
  // From the first /metrics sample that shows it running to its response.
  const auto [during, window] = EngineCpuUntilDone(engines, client, finished);
  ASSERT_TRUE(running);
  ASSERT_EQ(status, 200);
  ASSERT_GT(window, 0.05) << "the request ended before the window could start: make it longer";
  const double most = std::max(during[0], during[1]), least = std::min(during[0], during[1]);
  std::printf("engine CPU over %.3f s without lockstep: %.3f s and %.3f s\n", window, during[0],
              during[1]);
  // The serving engine computes through the window.
  EXPECT_GT(most, 0.2 * window);
  EXPECT_LT(least, 0.1 * most) << "the idle engine stepped without --data-parallel-lockstep";
  EXPECT_FALSE(absl::StrContains(Log(), "wave 0")) << "no waves without the flag";
}

// kill -9 of the DP coordinator: the launcher takes it as fatal and stops everything with an
// error naming it (vLLM's launcher stops when its coordinator process dies; it is not
// restarted). Nothing is left behind (the fixture checks processes, /dev/shm and the ipc://
// directories: the coordinator had unlinked its socket files once everyone connected).
TEST_F(ServeDpLockstepTest, TheCoordinatorsDeathStopsTheServer) {
  setenv("LOCKSTEP_LOG", log_.c_str(), 1);
  ASSERT_NO_FATAL_FAILURE(Start({"--data-parallel-size", "2", "--data-parallel-lockstep"}));
  const std::vector<pid_t> coordinator = testing::ChildrenRunning(server_->pid(), "dp-coordinator");
  ASSERT_EQ(coordinator.size(), 1u);
  // Once both engines reported and the API server subscribed, the coordinator removed its
  // socket files (and their directory): nothing else can connect.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (HasIpcDir(coordinator[0]) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
  }
  ASSERT_FALSE(HasIpcDir(coordinator[0])) << "the coordinator's socket files were not removed";
  ASSERT_EQ(kill(coordinator[0], SIGKILL), 0);
  auto exit = server_->Wait(absl::Seconds(30));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 1) << testing::DescribeWaitStatus(*exit);
  server_.reset();
  EXPECT_TRUE(absl::StrContains(Log(), "the DP coordinator (pid")) << Log();
  EXPECT_TRUE(absl::StrContains(Log(), "was killed by signal 9")) << Log();
}

}  // namespace
}  // namespace vllm
