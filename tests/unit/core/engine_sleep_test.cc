// EngineSleep (core/engine_sleep.h) over a real EngineCore and a scripted executor: the
// arguments' decoding, the pause modes (abort, wait, keep), held requests, the executor's
// sleep / wake_up with and without --enable-sleep-mode, and partial wake-up by tags.
#include "core/engine_sleep.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core_test_util.h"
#include "gtest/gtest.h"
#include "msgpack.hpp"

namespace vllm::core {
namespace {

using testing::MakeRequest;
using testing::ScriptedExecutor;

// Records the sleep-mode calls.
class SleepingExecutor : public ScriptedExecutor {
 public:
  SleepingExecutor() : ScriptedExecutor(Options{}) {}
  absl::Status Sleep(int32_t level) override {
    calls.push_back("sleep " + std::to_string(level));
    return absl::OkStatus();
  }
  absl::Status WakeUp(bool weights, bool kv_cache) override {
    calls.push_back(std::string("wake") + (weights ? " weights" : "") +
                    (kv_cache ? " kv_cache" : ""));
    return absl::OkStatus();
  }
  std::vector<std::string> calls;
};

std::string Args(int32_t level, const std::string& mode) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(2);
  pk.pack(level);
  pk.pack(mode);
  return std::string(b.data(), b.size());
}

std::string Tags(const std::vector<std::string>& tags) {
  msgpack::sbuffer b;
  msgpack::pack(b, tags);
  return std::string(b.data(), b.size());
}

class EngineSleepTest : public ::testing::Test {
 protected:
  void Init(bool enable_sleep_mode) {
    config::VllmConfig c = testing::MakeTestConfig();
    c.scheduler.max_num_seqs = 8;
    c.scheduler.max_num_batched_tokens = 32;
    c.model.max_model_len = 128;
    c.cache.block_size = 4;
    c.model.enable_sleep_mode = enable_sleep_mode;
    auto executor = std::make_unique<SleepingExecutor>();
    executor_ = executor.get();
    auto engine = EngineCore::Create(c, EngineCoreOptions{}, std::move(executor));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    sleep_ = std::make_unique<EngineSleep>(*engine_);
  }
  // Steps (as the main loop does while it may) until the pending sleep is answered.
  std::optional<absl::Status> StepUntilAnswered() {
    for (int i = 0; i < 1000; ++i) {
      if (auto done = sleep_->MaybeFinish()) return done->second;
      if (!engine_->scheduler().HasRequests() || !sleep_->may_step()) return std::nullopt;
      if (!engine_->Step().ok()) return std::nullopt;
    }
    return std::nullopt;
  }

  SleepingExecutor* executor_ = nullptr;
  std::unique_ptr<EngineCore> engine_;
  std::unique_ptr<EngineSleep> sleep_;
  int aborts_ = 0;
  std::function<void()> abort_all_ = [this]() {
    ++aborts_;
    engine_->AbortRequests(engine_->scheduler().RequestIds());
  };
};

TEST(EngineSleepArgsTest, DecodesVllmsArguments) {
  auto plain = DecodeSleepArgs("");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->level, 1);
  EXPECT_EQ(plain->mode, PauseMode::kAbort);
  auto wait = DecodeSleepArgs(Args(2, "wait"));
  ASSERT_TRUE(wait.ok());
  EXPECT_EQ(wait->level, 2);
  EXPECT_EQ(wait->mode, PauseMode::kWait);
  EXPECT_FALSE(DecodeSleepArgs(Args(3, "abort")).ok());
  EXPECT_FALSE(DecodeSleepArgs(Args(1, "later")).ok());
  EXPECT_FALSE(DecodeSleepArgs("\xc1").ok());  // never valid msgpack
  EXPECT_FALSE(DecodeWakeUpTags("").value().has_value());
  EXPECT_FALSE(DecodeWakeUpTags(Tags({})).value().has_value());
  EXPECT_EQ(DecodeWakeUpTags(Tags({"weights"})).value(), std::vector<std::string>{"weights"});
  EXPECT_FALSE(DecodeWakeUpTags(Tags(std::vector<std::string>(9, "weights"))).ok());
}

TEST_F(EngineSleepTest, AbortFreesTheWorkersAndHoldsNewRequestsUntilWakeUp) {
  Init(/*enable_sleep_mode=*/true);
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("a", 10, 50)).ok());
  ASSERT_TRUE(engine_->Step().ok());
  std::optional<absl::Status> answer = sleep_->Sleep(0, 7, Args(1, "abort"), abort_all_);
  EXPECT_EQ(aborts_, 1);
  if (!answer.has_value()) answer = StepUntilAnswered();  // the step that reports the abort
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->ok()) << *answer;
  EXPECT_EQ(executor_->calls, std::vector<std::string>{"sleep 1"});
  EXPECT_TRUE(sleep_->sleeping());
  EXPECT_FALSE(sleep_->may_step());
  EngineCoreRequest b = MakeRequest("b", 5, 3);
  EXPECT_TRUE(sleep_->Hold(0, b));
  EXPECT_FALSE(engine_->scheduler().HasRequests());
  // Weights first: still asleep (kv_cache), nothing resumed; then kv_cache: awake.
  std::vector<EngineSleep::Held> resumed;
  std::optional<EngineSleep::Pending> cancelled;
  EXPECT_EQ(sleep_->WakeUp(Tags({"weights"}), &resumed, &cancelled).value(), false);
  EXPECT_TRUE(resumed.empty());
  EXPECT_EQ(sleep_->WakeUp(Tags({"kv_cache"}), &resumed, &cancelled).value(), true);
  EXPECT_EQ(executor_->calls,
            (std::vector<std::string>{"sleep 1", "wake weights", "wake kv_cache"}));
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].second.request_id, "b");
  EXPECT_FALSE(cancelled.has_value());
  EXPECT_FALSE(sleep_->sleeping());
}

TEST_F(EngineSleepTest, WaitAnswersOnceTheRequestsFinished) {
  Init(/*enable_sleep_mode=*/true);
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("a", 10, 4)).ok());
  EXPECT_FALSE(sleep_->Sleep(0, 7, Args(2, "wait"), abort_all_).has_value());
  EXPECT_EQ(aborts_, 0);
  EXPECT_TRUE(sleep_->sleeping());
  EXPECT_TRUE(sleep_->may_step());
  EXPECT_TRUE(executor_->calls.empty());
  std::optional<absl::Status> answer = StepUntilAnswered();
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->ok()) << *answer;
  EXPECT_EQ(executor_->calls, std::vector<std::string>{"sleep 2"});
  EXPECT_FALSE(sleep_->may_step());
}

TEST_F(EngineSleepTest, KeepPausesLevelZeroAndRefusesFreeingRequestsMemory) {
  Init(/*enable_sleep_mode=*/true);
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("a", 10, 50)).ok());
  ASSERT_TRUE(engine_->Step().ok());
  std::optional<absl::Status> refused = sleep_->Sleep(0, 7, Args(1, "keep"), abort_all_);
  ASSERT_TRUE(refused.has_value());
  EXPECT_TRUE(absl::IsFailedPrecondition(*refused)) << *refused;
  EXPECT_FALSE(sleep_->sleeping());
  std::optional<absl::Status> paused = sleep_->Sleep(0, 8, Args(0, "keep"), abort_all_);
  ASSERT_TRUE(paused.has_value());
  EXPECT_TRUE(paused->ok());
  EXPECT_TRUE(engine_->scheduler().HasUnfinishedRequests());  // kept
  EXPECT_FALSE(sleep_->may_step());
  EXPECT_TRUE(executor_->calls.empty());
}

TEST_F(EngineSleepTest, WithoutSleepModeTheMemoryStays) {
  Init(/*enable_sleep_mode=*/false);
  std::optional<absl::Status> answer = sleep_->Sleep(0, 7, Args(2, "abort"), abort_all_);
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->ok());
  EXPECT_TRUE(sleep_->sleeping());
  std::vector<EngineSleep::Held> resumed;
  std::optional<EngineSleep::Pending> cancelled;
  EXPECT_EQ(sleep_->WakeUp("", &resumed, &cancelled).value(), true);
  EXPECT_TRUE(executor_->calls.empty());
}

}  // namespace
}  // namespace vllm::core
