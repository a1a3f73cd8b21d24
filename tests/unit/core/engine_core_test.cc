#include "core/engine_core.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core_test_util.h"
#include "gtest/gtest.h"
#include "ipc/ipc_address.h"
#include "ipc/zmq_util.h"
#include "kv_events/kv_events.h"

namespace vllm::core {
namespace {

using testing::MakeRequest;
using testing::ScriptedExecutor;
using testing::ScriptedToken;

class EngineCoreTest : public ::testing::Test {
 protected:
  // EngineCore::Create's inputs.
  struct Setup {
    config::VllmConfig config = testing::MakeTestConfig();
    EngineCoreOptions options;
  };
  Setup Config() {
    Setup c;
    c.config.scheduler.max_num_seqs = 8;
    c.config.scheduler.max_num_batched_tokens = 32;
    c.config.model.max_model_len = 128;
    c.config.cache.block_size = 4;
    c.config.parallel.data_parallel_rank = 2;  // the engine index on its outputs
    return c;
  }
  // Creates the engine; keeps a raw pointer to the executor for inspection.
  void Init(const Setup& config, ScriptedExecutor::Options options = {}) {
    auto executor = std::make_unique<ScriptedExecutor>(options);
    executor_ = executor.get();
    auto engine = EngineCore::Create(config.config, config.options, std::move(executor));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  void Collect(const EngineCoreOutputs& outs) {
    EXPECT_EQ(outs.engine_index, 2);
    EXPECT_TRUE(outs.scheduler_stats.has_value());
    for (const EngineCoreOutput& o : outs.outputs) {
      auto& t = tokens_[o.request_id];
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) finish_[o.request_id] = *o.finish_reason;
    }
  }
  void RunUntilIdle(bool batch_queue) {
    for (int i = 0; i < 10000; ++i) {
      auto result = batch_queue ? engine_->StepWithBatchQueue() : engine_->Step();
      ASSERT_TRUE(result.ok()) << result.status();
      if (result->outputs.has_value()) Collect(*result->outputs);
      if (!engine_->scheduler().HasRequests() && engine_->num_inflight_batches() == 0) return;
    }
    FAIL() << "engine never became idle";
  }
  static std::vector<int32_t> Expected(const std::string& id, int32_t prompt_len, int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(ScriptedToken(id, prompt_len + i));
    return t;
  }

  ScriptedExecutor* executor_ = nullptr;
  std::unique_ptr<EngineCore> engine_;
  std::map<std::string, std::vector<int32_t>> tokens_;
  std::map<std::string, FinishReason> finish_;
};

TEST_F(EngineCoreTest, SizesTheKVCacheFromAvailableMemory) {
  ScriptedExecutor::Options options;
  // 2 * 2 heads * 4 dims * 2 bytes * 2 layers = 64 bytes per token, 256 per 4-token block.
  options.available_memory = 256 * 100 + 255;
  Init(Config(), options);
  EXPECT_EQ(engine_->num_gpu_blocks(), 100);
  EXPECT_EQ(executor_->initialized_blocks, 100);
}

TEST_F(EngineCoreTest, HonoursTheBlockOverride) {
  Setup c = Config();
  c.config.cache.num_gpu_blocks_override = 40;
  Init(c);
  EXPECT_EQ(engine_->num_gpu_blocks(), 40);
}

TEST_F(EngineCoreTest, FailsClearlyWhenTheCacheIsTooSmall) {
  ScriptedExecutor::Options none;
  none.available_memory = 100;  // less than one block
  auto engine = EngineCore::Create(Config().config, Config().options,
                                   std::make_unique<ScriptedExecutor>(none));
  EXPECT_TRUE(absl::IsResourceExhausted(engine.status())) << engine.status();
  ScriptedExecutor::Options small;
  small.available_memory = 256 * 10;  // 40 tokens < max_model_len 128
  engine = EngineCore::Create(Config().config, Config().options,
                              std::make_unique<ScriptedExecutor>(small));
  EXPECT_TRUE(absl::IsInvalidArgument(engine.status())) << engine.status();
  EXPECT_NE(engine.status().message().find("max_model_len"), std::string_view::npos);
}

TEST_F(EngineCoreTest, RejectsPromptTokensOutsideTheVocabulary) {
  Setup c = Config();
  c.options.vocab_size = 100;
  Init(c);
  core::EngineCoreRequest bad = MakeRequest("bad", 3, 2);
  bad.prompt_token_ids[1] = 100;
  const absl::Status s = engine_->AddRequest(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("vocabulary"), std::string_view::npos) << s;
  bad.prompt_token_ids[1] = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->AddRequest(bad)));
  EXPECT_FALSE(engine_->scheduler().HasRequests());
}

TEST_F(EngineCoreTest, StepRunsRequestsToCompletion) {
  Init(Config());
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("a", 50, 5)).ok());
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("b", 3, 7)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->AddRequest(MakeRequest("bad", 0))));
  RunUntilIdle(/*batch_queue=*/false);
  EXPECT_EQ(tokens_["a"], Expected("a", 50, 5));
  EXPECT_EQ(tokens_["b"], Expected("b", 3, 7));
  EXPECT_EQ(finish_["a"], FinishReason::kLength);
  // Idle: Step returns at once without running the model.
  const size_t steps = executor_->outputs.size();
  auto idle = engine_->Step();
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(idle->outputs.has_value());
  EXPECT_FALSE(idle->model_executed);
  EXPECT_EQ(executor_->outputs.size(), steps);
}

TEST_F(EngineCoreTest, AbortFreesBlocksAndTellsTheWorkers) {
  Init(Config());
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("a", 20, 50)).ok());
  ASSERT_TRUE(engine_->Step().ok());
  const std::vector<std::string> ids = {"a"};
  engine_->AbortRequests(ids);
  const BlockPool& pool = engine_->scheduler().kv_cache_manager().block_pool();
  EXPECT_EQ(pool.GetNumFreeBlocks(), pool.num_blocks());
  ASSERT_TRUE(engine_->Step().ok());
  EXPECT_EQ(executor_->outputs.back().finished_req_ids, ids);
}

TEST_F(EngineCoreTest, ExecutorFailureIsReturned) {
  ScriptedExecutor::Options options;
  options.fail_at_step = 1;
  Init(Config(), options);
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("a", 4, 10)).ok());
  ASSERT_TRUE(engine_->Step().ok());
  auto result = engine_->Step();
  EXPECT_TRUE(absl::IsUnavailable(result.status())) << result.status();
}

TEST_F(EngineCoreTest, BatchQueueKeepsSeveralStepsInFlight) {
  ScriptedExecutor::Options options;
  options.max_concurrent_batches = 2;
  Setup c = Config();
  c.config.scheduler.max_num_batched_tokens = 16;
  Init(c, options);
  EXPECT_EQ(engine_->batch_queue_size(), 2);
  // A long prompt is chunked; its second chunk is scheduled while the first is in flight.
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("long", 40, 4)).ok());
  auto first = engine_->StepWithBatchQueue();
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->outputs.has_value());  // queue not full yet: no blocking
  EXPECT_TRUE(first->model_executed);
  EXPECT_EQ(engine_->num_inflight_batches(), 1u);
  auto second = engine_->StepWithBatchQueue();
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->outputs.has_value());  // full: blocks on the oldest
  EXPECT_EQ(engine_->num_inflight_batches(), 1u);
  ASSERT_TRUE(engine_->AddRequest(MakeRequest("short", 5, 6)).ok());
  RunUntilIdle(/*batch_queue=*/true);
  EXPECT_EQ(tokens_["long"], Expected("long", 40, 4));
  EXPECT_EQ(tokens_["short"], Expected("short", 5, 6));
  // Chunks of "long": 16 + 16 + 8 before any token.
  EXPECT_EQ(executor_->outputs[0].num_scheduled_tokens[0], 16);
  EXPECT_EQ(executor_->outputs[1].num_scheduled_tokens[0], 16);
}

TEST_F(EngineCoreTest, BatchQueueMatchesSynchronousStepsUnderPreemption) {
  // A tight cache forces preemptions while steps are in flight; tokens must not change.
  ScriptedExecutor::Options options;
  options.max_concurrent_batches = 3;
  Setup c = Config();
  c.config.cache.num_gpu_blocks_override = 34;  // 136 tokens
  Init(c, options);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(engine_->AddRequest(MakeRequest("r" + std::to_string(i), 10 + i, 40)).ok());
  }
  RunUntilIdle(/*batch_queue=*/true);
  for (int i = 0; i < 6; ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(tokens_[id], Expected(id, 10 + i, 40)) << id;
  }
  const BlockPool& pool = engine_->scheduler().kv_cache_manager().block_pool();
  EXPECT_EQ(pool.GetNumFreeBlocks(), pool.num_blocks());
}

// Pipeline parallelism's batch queue (PP steps in flight, each with 1/PP of the running
// requests) under preemption and aborts of requests whose steps are still in flight: the
// survivors' tokens are unchanged, an aborted request's late outputs are dropped, every block
// comes back.
TEST_F(EngineCoreTest, PipelineBatchQueueSurvivesAbortsAndPreemptionInFlight) {
  ScriptedExecutor::Options options;
  options.max_concurrent_batches = 2;
  Setup c = Config();
  c.config.parallel.pipeline_parallel_size = 2;
  c.config.cache.num_gpu_blocks_override = 34;  // 136 tokens: preemptions
  Init(c, options);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(engine_->AddRequest(MakeRequest("r" + std::to_string(i), 10 + i, 30)).ok());
  }
  bool aborted = false;
  for (int i = 0; i < 10000; ++i) {
    auto result = engine_->StepWithBatchQueue();
    ASSERT_TRUE(result.ok()) << result.status();
    if (result->outputs.has_value()) Collect(*result->outputs);
    // Abort r1 and r4 once they have some tokens and steps are in flight.
    if (!aborted && engine_->num_inflight_batches() > 0 && tokens_["r1"].size() >= 3 &&
        tokens_["r4"].size() >= 3) {
      const std::vector<std::string> ids = {"r1", "r4"};
      engine_->AbortRequests(ids);
      aborted = true;
    }
    if (!engine_->scheduler().HasRequests() && engine_->num_inflight_batches() == 0) break;
  }
  ASSERT_TRUE(aborted);
  bool preempted = false;
  for (const SchedulerOutput& so : executor_->outputs) preempted |= !so.preempted_req_ids.empty();
  EXPECT_TRUE(preempted) << "the tight cache preempted nothing";
  for (int i = 0; i < 6; ++i) {
    const std::string id = "r" + std::to_string(i);
    const std::vector<int32_t> want = Expected(id, 10 + i, 30);
    if (i == 1 || i == 4) {
      // Aborted: a prefix of its tokens, nothing after the abort.
      ASSERT_LE(tokens_[id].size(), want.size()) << id;
      EXPECT_TRUE(std::equal(tokens_[id].begin(), tokens_[id].end(), want.begin())) << id;
    } else {
      EXPECT_EQ(tokens_[id], want) << id;
    }
  }
  // No step took more than half of the requests running then (ceil).
  for (const SchedulerOutput& so : executor_->outputs) {
    EXPECT_LE(so.scheduled_cached_reqs.size(), 3u);
  }
  const BlockPool& pool = engine_->scheduler().kv_cache_manager().block_pool();
  EXPECT_EQ(pool.GetNumFreeBlocks(), pool.num_blocks());
}

// --kv-events-config: the engine core publishes, after each step, the events its block pool
// recorded, as one batch stamped with its data-parallel rank.
TEST_F(EngineCoreTest, PublishesTheKvEventsItsSchedulerRecords) {
  auto endpoint = ipc::ScopedIpcAddress::Create("kv-events");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  Setup c = Config();
  c.config.parallel.data_parallel_rank =
      0;                             // vLLM cannot offset an ipc:// endpoint for another rank
  c.config.kv_events.enable = true;  // the block pool records, EngineCore publishes
  c.config.kv_events.publisher = "zmq";
  c.config.kv_events.endpoint = endpoint->address();
  Init(c);
  zmq::socket_t sub(ipc::ZmqContext(), zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 100);
  sub.connect(endpoint->address());
  // A PUB drops what it sends before the subscription arrives: new requests until one
  // step's events get through.
  std::optional<kv_events::KvEventBatch> batch;
  for (int i = 0; i < 100 && !batch.has_value(); ++i) {
    ASSERT_TRUE(engine_->AddRequest(MakeRequest("r" + std::to_string(i), 8, 1)).ok());
    for (int step = 0; step < 10 && engine_->scheduler().HasRequests(); ++step) {
      ASSERT_TRUE(engine_->RunOneStep().ok());
    }
    std::vector<zmq::message_t> parts;
    for (zmq::message_t part; sub.recv(part) && (parts.empty() || parts.back().more());) {
      parts.push_back(std::move(part));
    }
    if (parts.size() == 3) {
      auto decoded = kv_events::DecodeKvEventBatch(
          {static_cast<const uint8_t*>(parts[2].data()), parts[2].size()});
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      batch = std::move(*decoded);
    }
  }
  ASSERT_TRUE(batch.has_value());
  EXPECT_FALSE(batch->events.empty());
  EXPECT_EQ(batch->data_parallel_rank, 0);
}

// A publisher that cannot bind fails the engine's creation (the engine process then answers
// FAILED), after stopping the executor.
TEST_F(EngineCoreTest, AKvEventPublisherThatCannotBindFailsCreate) {
  zmq::socket_t taken(ipc::ZmqContext(), zmq::socket_type::pub);
  taken.set(zmq::sockopt::linger, 0);
  taken.bind("tcp://*:*");
  const std::string bound = taken.get(zmq::sockopt::last_endpoint);  // tcp://0.0.0.0:<port>
  Setup c = Config();
  c.config.parallel.data_parallel_rank = 0;
  c.config.kv_events.enable = true;
  c.config.kv_events.publisher = "zmq";
  c.config.kv_events.endpoint = "tcp://*:" + bound.substr(bound.rfind(':') + 1);
  auto engine = EngineCore::Create(c.config, c.options,
                                   std::make_unique<ScriptedExecutor>(ScriptedExecutor::Options{}));
  EXPECT_TRUE(absl::IsUnavailable(engine.status())) << engine.status();
}

TEST_F(EngineCoreTest, ShutdownStopsTheExecutorOnce) {
  Init(Config());
  engine_->Shutdown();
  EXPECT_TRUE(executor_->shut_down);
  engine_->Shutdown();
}

}  // namespace
}  // namespace vllm::core
