// MultiprocExecutor with real worker processes (`vllm-launch worker-proc`): the reference
// fixtures give Hugging Face's greedy tokens with TP = 1, 2, 4, also under a randomized
// add/abort load; a killed worker fails the engine within 1 s; a stopped (hung) worker is
// reported after the timeout; malformed calls get error replies; start-up failures name the
// rank; sleep mode (levels 1 and 2) keeps the greedy tokens. After every test no child process and
// no new /dev/shm entry of ours remains.
#include "executor/multiproc_executor.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace vllm::executor {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";

std::string WorkerBinary() { return testing::BinDir() + "/vllm-launch"; }

std::vector<pid_t> Children() { return testing::ChildrenOf(getpid()); }

using testing::GreedyRequest;
using testing::Reference;

Reference LoadReference(const std::string& model) {
  return testing::LoadReference(kFixtures / model);
}

config::EngineArgs MpArgs(const std::string& model, int32_t tp) {
  config::EngineArgs args;
  args.config.model.model = kFixtures / model;
  args.config.parallel.tensor_parallel_size = tp;
  args.config.parallel.distributed_executor_backend = config::ExecutorBackend::kMp;
  args.worker_binary = WorkerBinary();
  args.config.cache.kv_cache_memory_bytes = 32 << 20;
  return args;
}

class MultiprocExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = testing::ShmEntries(); }
  void TearDown() override {
    // Everything is destroyed by now: no child may be left, nothing new in /dev/shm.
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while ((!Children().empty() || testing::ShmEntries() != shm_before_) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
    }
    EXPECT_TRUE(Children().empty()) << "worker processes left behind";
    EXPECT_EQ(testing::ShmEntries(), shm_before_) << "shared memory left behind";
  }
  std::set<std::string> shm_before_;
};

struct TpCase {
  const char* model;
  int32_t tp;
};

class ReferenceThroughWorkersTest : public MultiprocExecutorTest,
                                    public ::testing::WithParamInterface<TpCase> {};

TEST_P(ReferenceThroughWorkersTest, GreedyTokensAndLogprobsMatch) {
  const Reference ref = LoadReference(GetParam().model);
  auto engine = frontend::LLMEngine::Create(MpArgs(GetParam().model, GetParam().tp));
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<core::EngineCoreRequest> requests;
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    requests.push_back(GreedyRequest(absl::StrCat("r", i), ref.prompts[i], ref.max_new_tokens));
    requests.back().sampling_params.logprobs = 1;
  }
  auto outputs = (*engine)->Generate(std::move(requests));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (size_t i = 0; i < outputs->size(); ++i) {
    const frontend::RequestOutput& o = (*outputs)[i];
    EXPECT_EQ(o.output_token_ids, ref.greedy[i]) << "prompt " << i;
    // The first token's logprob is log_softmax of the reference's prompt logits.
    ASSERT_FALSE(o.logprobs.empty());
    const std::vector<float>& logits = ref.prompt_logits[i];
    double max = logits[0], sum = 0;
    for (float l : logits) max = std::max<double>(max, l);
    for (float l : logits) sum += std::exp(l - max);
    const double want = logits[o.output_token_ids[0]] - max - std::log(sum);
    EXPECT_NEAR(o.logprobs[0].logprobs[0], want, 1e-3) << "prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceThroughWorkersTest,
                         ::testing::Values(TpCase{"llama_mha", 1}, TpCase{"llama_mha", 2},
                                           TpCase{"llama_mha", 4}, TpCase{"llama_gqa", 2},
                                           TpCase{"qwen2", 2}));

TEST_F(MultiprocExecutorTest, RandomAddAbortLoadKeepsReferenceTokens) {
  const Reference ref = LoadReference("llama_gqa");
  config::EngineArgs args = MpArgs("llama_gqa", 2);
  args.config.cache.num_gpu_blocks_override = 12;  // tight: preemptions happen
  args.config.model.max_model_len = 128;
  args.config.scheduler.max_num_batched_tokens = 32;  // chunked prefill
  auto engine = frontend::LLMEngine::Create(args);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::mt19937 rng(7);
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    ASSERT_TRUE(
        (*engine)
            ->AddRequest(GreedyRequest(absl::StrCat("ref", i), ref.prompts[i], ref.max_new_tokens))
            .ok());
  }
  std::vector<std::string> noise;
  std::map<std::string, std::vector<int32_t>> got;
  int noise_id = 0;
  for (int step = 0; step < 2000 && (*engine)->HasUnfinishedRequests(); ++step) {
    if (rng() % 3 == 0 && noise_id < 40) {
      core::EngineCoreRequest r;
      r.request_id = absl::StrCat("noise", noise_id++);
      for (int t = 0, n = 1 + static_cast<int>(rng() % 40); t < n; ++t) {
        r.prompt_token_ids.push_back(static_cast<int32_t>(rng() % 500));
      }
      r.sampling_params.temperature = 1.0;
      r.sampling_params.seed = static_cast<int64_t>(rng());
      r.sampling_params.max_tokens = 1 + static_cast<int32_t>(rng() % 30);
      ASSERT_TRUE((*engine)->AddRequest(r).ok());
      noise.push_back(r.request_id);
    }
    if (rng() % 5 == 0 && !noise.empty()) {
      const size_t k = rng() % noise.size();
      (*engine)->AbortRequests({noise[k]});
      noise.erase(noise.begin() + static_cast<ptrdiff_t>(k));
    }
    auto progressed = (*engine)->Step();
    ASSERT_TRUE(progressed.ok()) << progressed.status();
    for (const auto& o : *progressed) {
      if (o.request_id.rfind("ref", 0) == 0 && o.finished()) got[o.request_id] = o.output_token_ids;
    }
  }
  ASSERT_EQ(got.size(), ref.prompts.size()) << "reference requests did not all finish";
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    EXPECT_EQ(got[absl::StrCat("ref", i)], ref.greedy[i]) << "prompt " << i;
  }
  EXPECT_GT((*engine)->totals().num_preemptions, 0) << "the load did not force preemption";
}

class KilledWorkerTest : public MultiprocExecutorTest,
                         public ::testing::WithParamInterface<int32_t> {};

TEST_P(KilledWorkerTest, FailsTheEngineWithinOneSecond) {
  const int32_t rank = GetParam();
  config::EngineArgs args = MpArgs("llama_mha", 2);
  auto engine = frontend::LLMEngine::Create(args);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const Reference ref = LoadReference("llama_mha");
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    ASSERT_TRUE(
        (*engine)->AddRequest(GreedyRequest(absl::StrCat("r", i), ref.prompts[i], 150)).ok());
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*engine)->Step().ok());
  auto* mp = dynamic_cast<MultiprocExecutor*>(&(*engine)->engine_core().executor());
  ASSERT_NE(mp, nullptr);
  const pid_t victim = mp->worker_pids()[rank];
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  absl::Status error;
  while (absl::Now() - killed < absl::Seconds(5)) {
    auto step = (*engine)->Step();
    if (!step.ok()) {
      error = step.status();
      break;
    }
  }
  const absl::Duration took = absl::Now() - killed;
  ASSERT_FALSE(error.ok()) << "the engine kept running without rank " << rank;
  EXPECT_LT(took, absl::Seconds(1)) << error;
  EXPECT_NE(error.message().find(absl::StrCat("rank ", rank)), std::string::npos) << error;
  // Every pending request is gone with the engine: later calls fail with the same error.
  EXPECT_EQ((*engine)->Step().status(), error);
  EXPECT_FALSE((*engine)->AddRequest(GreedyRequest("late", {1, 2, 3}, 4)).ok());
}

INSTANTIATE_TEST_SUITE_P(Ranks, KilledWorkerTest, ::testing::Values(0, 1));

TEST_F(MultiprocExecutorTest, HungWorkerIsReportedAfterTheTimeout) {
  MultiprocExecutorOptions options;
  options.config.device.device = config::Device::kCpu;
  options.config.model.model = kFixtures / "llama_mha";
  options.config.cache.kv_cache_memory_bytes = 8 << 20;
  options.worker_binary = WorkerBinary();
  options.execute_timeout = absl::Seconds(1);
  options.shutdown_timeout = absl::Milliseconds(200);
  auto executor = MultiprocExecutor::Create(options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  ASSERT_TRUE((*executor)->CollectiveRpc("echo", "x", absl::Seconds(5)).ok());
  const pid_t pid = (*executor)->worker_pids()[0];
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const absl::Time start = absl::Now();
  auto reply = (*executor)->CollectiveRpc("echo", "y", options.execute_timeout);
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(reply.status())) << reply.status();
  EXPECT_NE(reply.status().message().find("rank 0"), std::string::npos) << reply.status();
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3));
  // The executor is failed for good; shutting down kills the stopped worker.
  EXPECT_FALSE((*executor)->CollectiveRpc("echo", "z", absl::Seconds(1)).ok());
  executor->reset();
}

// Sleep mode through the workers (worker_protocol.h sleep, wake_up): after level 2 (weights and
// KV cache freed, read again on wake-up, in two steps by tags) and level 1 the same greedy
// tokens come out.
TEST_F(MultiprocExecutorTest, SleepAndWakeUpKeepTheGreedyTokens) {
  const Reference ref = LoadReference("llama_gqa");
  config::EngineArgs args = MpArgs("llama_gqa", 2);
  args.config.model.enable_sleep_mode = true;
  auto engine = frontend::LLMEngine::Create(args);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto generate = [&]() {
    std::vector<core::EngineCoreRequest> requests;
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      requests.push_back(GreedyRequest(absl::StrCat("r", i), ref.prompts[i], ref.max_new_tokens));
    }
    auto outputs = (*engine)->Generate(std::move(requests));
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    for (size_t i = 0; outputs.ok() && i < outputs->size(); ++i) {
      EXPECT_EQ((*outputs)[i].output_token_ids, ref.greedy[i]) << "prompt " << i;
    }
  };
  generate();
  core::EngineCore& core = (*engine)->engine_core();
  ASSERT_TRUE(core.SleepExecutor(2).ok());
  EXPECT_TRUE(core.executor_sleeping());
  ASSERT_TRUE(core.WakeUpExecutor(std::vector<std::string>{"weights"}).ok());
  EXPECT_TRUE(core.executor_sleeping());
  ASSERT_TRUE(core.WakeUpExecutor(std::vector<std::string>{"kv_cache"}).ok());
  EXPECT_FALSE(core.executor_sleeping());
  generate();
  ASSERT_TRUE(core.SleepExecutor(1).ok());
  ASSERT_TRUE(core.WakeUpExecutor(std::nullopt).ok());
  generate();
}

TEST_F(MultiprocExecutorTest, MalformedCallsGetErrorRepliesAndTheWorkersLiveOn) {
  MultiprocExecutorOptions options;
  options.config.device.device = config::Device::kCpu;
  options.config.model.model = kFixtures / "llama_mha";
  options.config.cache.kv_cache_memory_bytes = 8 << 20;
  options.worker_binary = WorkerBinary();
  options.config.parallel.tensor_parallel_size = 2;
  auto executor = MultiprocExecutor::Create(options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  MultiprocExecutor& e = **executor;

  auto unknown = e.CollectiveRpc("no_such_method", "", absl::Seconds(5));
  EXPECT_TRUE(absl::IsInvalidArgument(unknown.status())) << unknown.status();
  EXPECT_NE(unknown.status().message().find("no_such_method"), std::string::npos);

  auto garbage_step = e.CollectiveRpc("execute_model", "\xc1\xff garbage", absl::Seconds(5));
  EXPECT_FALSE(garbage_step.ok());
  EXPECT_NE(garbage_step.status().message().find("SchedulerOutput"), std::string::npos)
      << garbage_step.status();

  auto bad_args = e.CollectiveRpc("initialize_kv_cache", "\x92\x01", absl::Seconds(5));
  EXPECT_FALSE(bad_args.ok());

  ASSERT_TRUE(e.BroadcastRawForTesting({0xff, 0xff, 0xff, 0x7f, 0x01}).ok());
  auto raw = e.CollectiveRpc("echo", "after raw", absl::Seconds(5));
  // The raw frame's error reply (call id 0) comes first.
  EXPECT_FALSE(raw.ok());
  EXPECT_NE(raw.status().message().find("header"), std::string::npos) << raw.status();

  auto echo = e.CollectiveRpc("echo", "still here", absl::Seconds(5));
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(*echo, (std::vector<std::string>{"still here", "still here"}));
  EXPECT_TRUE(e.failure().ok()) << e.failure();
}

TEST_F(MultiprocExecutorTest, StartupFailuresNameTheRank) {
  MultiprocExecutorOptions options;
  options.config.device.device = config::Device::kCpu;
  options.config.model.model = kFixtures / "no_such_model";
  options.worker_binary = WorkerBinary();
  options.config.parallel.tensor_parallel_size = 2;
  auto executor = MultiprocExecutor::Create(options);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.status().message().find("failed to start"), std::string::npos)
      << executor.status();
  EXPECT_NE(executor.status().message().find("config.json"), std::string::npos)
      << executor.status();

  options.config.model.model = kFixtures / "llama_gqa";  // 8 heads cannot split 3 ways
  options.config.parallel.tensor_parallel_size = 3;
  executor = MultiprocExecutor::Create(options);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.status().message().find("num_attention_heads (8)"), std::string::npos)
      << executor.status();

  options.worker_binary = "/nonexistent/vllm-launch";
  executor = MultiprocExecutor::Create(options);
  EXPECT_TRUE(absl::IsNotFound(executor.status())) << executor.status();
}

}  // namespace
}  // namespace vllm::executor
