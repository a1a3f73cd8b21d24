// The engine core as a process: `vllm-launch engine-core` driven through EngineCoreClient over
// ZMQ — handshake, the fixture's greedy tokens, utility calls, a bad request answered with an
// error, aborts, EXECUTOR_FAILED reaching the client when a worker dies, and SIGTERM. After
// each test no child process and no new /dev/shm entry remains.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "config/config_codec.h"
#include "frontend/engine/engine_core_client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace vllm::frontend {
namespace {

const std::filesystem::path kModel =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models" / "llama_mha";

using testing::ChildrenOf;
using testing::GreedyRequest;

class EngineCoreProcTest : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = testing::ShmEntries(); }
  void TearDown() override {
    if (engine_.has_value() && engine_->running()) {
      engine_->Kill(SIGKILL);
      (void)engine_->Wait(absl::Seconds(5));
    }
    client_.reset();
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while ((!ChildrenOf(getpid()).empty() || testing::ShmEntries() != shm_before_) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
    }
    EXPECT_TRUE(ChildrenOf(getpid()).empty()) << "processes left behind";
    EXPECT_EQ(testing::ShmEntries(), shm_before_) << "shared memory left behind";
  }

  // Starts the engine process and completes the handshake.
  void Start(int32_t tp) {
    auto client = EngineCoreClient::Create(1);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    config::VllmConfig config;
    config.model.model = kModel;
    config.parallel.tensor_parallel_size = tp;
    config.cache.kv_cache_memory_bytes = 16 << 20;
    config.device.device = config::Device::kCpu;
    absl::StatusOr<int> config_fd = config::MakeConfigPipe(config);
    ASSERT_TRUE(config_fd.ok()) << config_fd.status();
    auto p = testing::Subprocess::Spawn(
        {testing::BinDir() + "/vllm-launch", "engine-core", "--handshake-address",
         client_->handshake_address(), "--parent-pid", absl::StrCat(getpid()), "--config-fd", "3"},
        *config_fd);
    close(*config_fd);
    ASSERT_TRUE(p.ok()) << p.status();
    engine_.emplace(std::move(*p));
    absl::Status ready = client_->WaitForEngines(absl::Now() + absl::Seconds(30), [this] {
      auto status = engine_->Wait(absl::ZeroDuration());
      return status.ok() ? absl::UnavailableError(absl::StrCat(
                               "engine exited: ", testing::DescribeWaitStatus(*status)))
                         : absl::OkStatus();
    });
    ASSERT_TRUE(ready.ok()) << ready;
    ASSERT_EQ(client_->engines().size(), 1u);
    EXPECT_GT(client_->engines()[0].num_gpu_blocks, 0);
  }

  // Collects outputs until every id in `ids` finished (or the deadline).
  std::map<std::string, core::EngineCoreOutput> RunUntilFinished(std::set<std::string> ids,
                                                                 absl::Duration timeout) {
    std::map<std::string, core::EngineCoreOutput> done;
    std::map<std::string, std::vector<int32_t>> tokens;
    const absl::Time deadline = absl::Now() + timeout;
    while (!ids.empty()) {
      auto outs = client_->GetOutputs(deadline);
      if (!outs.ok()) {
        ADD_FAILURE() << outs.status();
        break;
      }
      EXPECT_TRUE(outs->decode_error.ok()) << outs->decode_error;
      for (core::EngineCoreOutput& o : outs->outputs.outputs) {
        auto& t = tokens[o.request_id];
        t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished()) {
          o.new_token_ids.assign(t.begin(), t.end());
          ids.erase(o.request_id);
          done[o.request_id] = std::move(o);
        }
      }
    }
    return done;
  }

  std::set<std::string> shm_before_;
  std::unique_ptr<EngineCoreClient> client_;
  std::optional<testing::Subprocess> engine_;
};

TEST_F(EngineCoreProcTest, ServesReferenceTokensAndUtilityCalls) {
  Start(1);
  std::ifstream in(kModel / "reference.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json ref = nlohmann::json::parse(text.str());
  const auto prompts = ref.at("prompts").get<std::vector<std::vector<int32_t>>>();
  const auto greedy = ref.at("greedy").get<std::vector<std::vector<int32_t>>>();
  std::set<std::string> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(client_
                    ->AddRequest(GreedyRequest(absl::StrCat("r", i), prompts[i],
                                               static_cast<int32_t>(greedy[i].size())))
                    .ok());
    ids.insert(absl::StrCat("r", i));
  }
  auto done = RunUntilFinished(ids, absl::Seconds(30));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const core::EngineCoreOutput& o = done[absl::StrCat("r", i)];
    EXPECT_EQ(std::vector<int32_t>(o.new_token_ids.begin(), o.new_token_ids.end()), greedy[i])
        << "prompt " << i;
    EXPECT_EQ(o.finish_reason, core::FinishReason::kLength);
  }
  EXPECT_TRUE(client_->CallUtility("ping", absl::Seconds(5)).ok());
  EXPECT_TRUE(client_->CallUtility("reset_prefix_cache", absl::Seconds(5)).ok());
  auto unknown = client_->CallUtility("no_such_call", absl::Seconds(5));
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status())) << unknown.status();

  engine_->Kill(SIGTERM);
  auto status = engine_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
}

TEST_F(EngineCoreProcTest, BadRequestGetsAnErrorAndOthersAreServed) {
  Start(1);
  // llama_mha's max_position_embeddings is 256.
  ASSERT_TRUE(client_->AddRequest(GreedyRequest("too-long", std::vector<int32_t>(300, 7), 4)).ok());
  ASSERT_TRUE(client_->AddRequest(GreedyRequest("bad-token", {1, 2, 100000}, 4)).ok());
  ASSERT_TRUE(client_->AddRequest(GreedyRequest("long", {1, 2, 3}, 200)).ok());
  ASSERT_TRUE(client_->AddRequest(GreedyRequest("fine", {4, 5, 6}, 5)).ok());
  auto done = RunUntilFinished({"too-long", "bad-token", "fine"}, absl::Seconds(30));
  EXPECT_EQ(done["too-long"].finish_reason, core::FinishReason::kError);
  EXPECT_EQ(done["bad-token"].finish_reason, core::FinishReason::kError);
  EXPECT_EQ(done["fine"].finish_reason, core::FinishReason::kLength);
  EXPECT_EQ(done["fine"].new_token_ids.size(), 5u);
  // Abort the long one; a later request is still served.
  ASSERT_TRUE(client_->AbortRequests(std::vector<std::string>{"long"}).ok());
  ASSERT_TRUE(client_->AddRequest(GreedyRequest("after", {7, 8, 9}, 3)).ok());
  done = RunUntilFinished({"after"}, absl::Seconds(30));
  EXPECT_EQ(done["after"].new_token_ids.size(), 3u);
}

TEST_F(EngineCoreProcTest, ExecutorFailureReachesTheClient) {
  Start(2);
  ASSERT_TRUE(client_->AddRequest(GreedyRequest("r", {1, 2, 3}, 200)).ok());
  auto first = client_->GetOutputs(absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<pid_t> workers = ChildrenOf(engine_->pid());
  ASSERT_EQ(workers.size(), 2u);
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(workers[1], SIGKILL), 0);
  absl::Status error;
  while (absl::Now() - killed < absl::Seconds(5)) {
    auto outs = client_->GetOutputs(killed + absl::Seconds(5));
    if (!outs.ok()) {
      error = outs.status();
      break;
    }
  }
  EXPECT_TRUE(absl::IsUnavailable(error)) << error;
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  EXPECT_NE(error.message().find("rank"), std::string::npos) << error;
  // Every later call fails too, and the engine process exits with an error.
  EXPECT_FALSE(client_->AddRequest(GreedyRequest("late", {1}, 1)).ok());
  auto status = engine_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1)
      << testing::DescribeWaitStatus(*status);
}

}  // namespace
}  // namespace vllm::frontend
