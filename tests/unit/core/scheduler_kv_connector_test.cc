// The scheduler with the NixlConnector's scheduler side: the prefill side holds a finished
// request's blocks and answers kv_transfer_params; the decode side parks a request in
// kWaitingForRemoteKvs while its blocks load, then computes only its last prompt token; failed
// loads recompute or fail; leases expire; aborts during a load keep the blocks until the
// workers are done with them. The workers' reports are fed in by hand.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/kv_connector.h"
#include "core/scheduler.h"
#include "core_test_util.h"
#include "gtest/gtest.h"

namespace vllm::core {
namespace {

using testing::MakePrompt;
using testing::MakeRequest;
using testing::SchedulerSetup;
using testing::ScriptedModel;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kNumBlocks = 64;

class SchedulerKvConnectorTest : public ::testing::Test {
 protected:
  void Init(const std::string& role, const std::string& policy = "fail",
            const std::string& extra = "{}") {
    SchedulerSetup c;
    c.config.scheduler.max_num_seqs = 8;
    c.config.scheduler.max_num_batched_tokens = 64;
    c.config.model.max_model_len = 128;
    c.config.cache.block_size = kBlockSize;
    c.config.kv_transfer.kv_connector = "NixlConnector";
    c.config.kv_transfer.kv_role = role;
    c.config.kv_transfer.engine_id = "engine-" + role;
    c.config.kv_transfer.kv_load_failure_policy = policy;
    c.config.kv_transfer.kv_connector_extra_config = extra;
    c.kv_cache.num_blocks = kNumBlocks;
    KVConnectorContext context{c.config.kv_transfer.engine_id, "test-model"};
    auto connector = MakeKVConnectorScheduler(c.config, context);
    ASSERT_TRUE(connector.ok()) << connector.status();
    auto s = Scheduler::Create(c.config, c.kv_cache, nullptr, nullptr, std::move(*connector));
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
  }

  int32_t FreeBlocks() const {
    return scheduler_->kv_cache_manager().block_pool().GetNumFreeBlocks();
  }

  // One step through the scripted model, with `kv` as the workers' report.
  SchedulerOutput Step(std::optional<kv_transfer::KVConnectorOutput> kv = std::nullopt) {
    SchedulerOutput so = scheduler_->Schedule();
    ModelRunnerOutput mro = model_.Run(so);
    mro.kv_connector_output = std::move(kv);
    auto outs = scheduler_->UpdateFromOutput(so, mro);
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (outs.ok()) {
      for (EngineCoreOutput& o : outs->outputs) {
        auto& t = tokens_[o.request_id];
        t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished()) finish_[o.request_id] = *o.finish_reason;
        if (o.kv_transfer_params.has_value()) params_[o.request_id] = *o.kv_transfer_params;
      }
    }
    return so;
  }

  static kv_transfer::KVConnectorOutput Recving(const std::string& id, bool ok) {
    kv_transfer::KVConnectorOutput out;
    (ok ? out.finished_recving : out.failed_recving).push_back(id);
    return out;
  }

  // A decode request for the prompt of `prompt_of` (prompt_len tokens) whose blocks the
  // prefill engine holds as `remote_blocks`.
  static EngineCoreRequest DecodeRequest(const std::string& id, const std::string& prompt_of,
                                         int32_t prompt_len, std::vector<int32_t> remote_blocks) {
    EngineCoreRequest r = MakeRequest(id, prompt_len, 4);
    r.prompt_token_ids = MakePrompt(prompt_of, prompt_len);
    kv_transfer::KVTransferParams& p = r.kv_transfer_params.emplace();
    p.do_remote_prefill = true;
    p.remote_engine_id = "engine-kv_producer";
    p.remote_request_id = "prefill-" + id;
    p.remote_host = "10.0.0.1";
    p.remote_port = 5600;
    p.tp_size = 1;
    p.remote_num_tokens = prompt_len;
    p.remote_block_ids = std::move(remote_blocks);
    return r;
  }

  std::unique_ptr<Scheduler> scheduler_;
  ScriptedModel model_;
  std::map<std::string, std::vector<int32_t>> tokens_;
  std::map<std::string, FinishReason> finish_;
  std::map<std::string, kv_transfer::KVTransferParams> params_;
};

TEST_F(SchedulerKvConnectorTest, PrefillHoldsBlocksUntilTheDecodeSideReadThem) {
  Init("kv_producer");
  const int32_t free_at_start = FreeBlocks();
  EngineCoreRequest r = MakeRequest("p", 10, 1);
  r.kv_transfer_params.emplace().do_remote_decode = true;
  ASSERT_TRUE(scheduler_->AddRequest(std::move(r)).ok());
  Step();
  ASSERT_EQ(finish_.at("p"), FinishReason::kLength);
  ASSERT_TRUE(params_.contains("p"));
  const kv_transfer::KVTransferParams& p = params_.at("p");
  EXPECT_TRUE(p.do_remote_prefill);
  EXPECT_FALSE(p.do_remote_decode);
  EXPECT_EQ(p.remote_engine_id, "engine-kv_producer");
  EXPECT_EQ(p.remote_request_id, "p");
  EXPECT_EQ(p.remote_host, "localhost");
  EXPECT_EQ(p.remote_port, 5600);
  EXPECT_EQ(p.tp_size, 1);
  EXPECT_EQ(p.remote_num_tokens, 10);
  ASSERT_EQ(p.remote_block_ids.size(), 3u);  // ceil(10 / 4)
  EXPECT_LT(FreeBlocks(), free_at_start);
  EXPECT_EQ(scheduler_->num_held_requests(), 1u);
  EXPECT_TRUE(scheduler_->HasRequests());
  EXPECT_TRUE(scheduler_->HasPendingKvTransfers());

  // The next step tells the workers to serve exactly those blocks.
  SchedulerOutput so = Step();
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->sends.size(), 1u);
  EXPECT_EQ(so.kv_connector_metadata->sends[0].req_id, "p");
  EXPECT_EQ(so.kv_connector_metadata->sends[0].block_ids, p.remote_block_ids);
  // The request id stays taken while held.
  EXPECT_EQ(scheduler_->AddRequest(MakeRequest("p", 5)).code(), absl::StatusCode::kAlreadyExists);

  kv_transfer::KVConnectorOutput read;
  read.finished_sending.push_back("p");
  Step(read);
  EXPECT_EQ(scheduler_->num_held_requests(), 0u);
  EXPECT_EQ(FreeBlocks(), free_at_start);
  EXPECT_FALSE(scheduler_->HasRequests());
}

TEST_F(SchedulerKvConnectorTest, PrefillFreesHeldBlocksWhenTheLeaseRunsOut) {
  Init("kv_producer", "fail", R"({"kv_lease_duration": 1})");
  const int32_t free_at_start = FreeBlocks();
  EngineCoreRequest r = MakeRequest("p", 9, 1);
  r.kv_transfer_params.emplace().do_remote_decode = true;
  ASSERT_TRUE(scheduler_->AddRequest(std::move(r)).ok());
  Step();
  ASSERT_EQ(scheduler_->num_held_requests(), 1u);
  bool released = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!released && absl::Now() < deadline) {
    SchedulerOutput so = Step();
    released =
        so.kv_connector_metadata.has_value() && !so.kv_connector_metadata->sends_released.empty();
    if (released) {
      EXPECT_EQ(so.kv_connector_metadata->sends_released[0], "p");
    } else {
      absl::SleepFor(absl::Milliseconds(20));  // polling a deadline, not syncing
    }
  }
  EXPECT_TRUE(released);
  EXPECT_EQ(scheduler_->num_held_requests(), 0u);
  EXPECT_EQ(FreeBlocks(), free_at_start);
}

TEST_F(SchedulerKvConnectorTest, PrefillAbortedOrFailedRequestHoldsNothing) {
  Init("kv_producer");
  const int32_t free_at_start = FreeBlocks();
  EngineCoreRequest r = MakeRequest("p", 30, 1);
  r.kv_transfer_params.emplace().do_remote_decode = true;
  ASSERT_TRUE(scheduler_->AddRequest(std::move(r)).ok());
  scheduler_->Schedule();  // in flight
  const std::string ids[] = {"p"};
  scheduler_->FinishRequests(ids, RequestStatus::kFinishedAborted);
  EXPECT_EQ(scheduler_->num_held_requests(), 0u);
  EXPECT_EQ(FreeBlocks(), free_at_start);
}

TEST_F(SchedulerKvConnectorTest, DecodeLoadsThePromptThenComputesOnlyItsLastToken) {
  Init("kv_consumer");
  const int32_t free_at_start = FreeBlocks();
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "d", 10, {7, 8, 9})).ok());
  SchedulerOutput so = Step();
  EXPECT_EQ(so.total_num_scheduled_tokens, 0);
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->loads.size(), 1u);
  const kv_transfer::LoadSpec load = so.kv_connector_metadata->loads[0];
  EXPECT_EQ(load.req_id, "d");
  EXPECT_EQ(load.remote_block_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(load.local_block_ids.size(), 3u);
  EXPECT_EQ(load.remote_engine_id, "engine-kv_producer");
  EXPECT_EQ(load.remote_request_id, "prefill-d");
  EXPECT_EQ(load.remote_host, "10.0.0.1");
  EXPECT_EQ(load.remote_port, 5600);
  EXPECT_EQ(load.num_tokens, 10);
  EXPECT_EQ(scheduler_->num_waiting_for_remote_kvs(), 1u);
  const Request* waiting = scheduler_->GetRequest("d");
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->status, RequestStatus::kWaitingForRemoteKvs);
  // Nothing happens until the workers report the load.
  so = Step();
  EXPECT_EQ(so.total_num_scheduled_tokens, 0);
  Step(Recving("d", true));
  so = Step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 9);
  EXPECT_EQ(so.scheduled_new_reqs[0].block_ids, load.local_block_ids);
  EXPECT_EQ(so.num_scheduled_tokens[0], 1);
  for (int i = 0; i < 10 && !finish_.contains("d"); ++i) Step();
  EXPECT_EQ(tokens_["d"].size(), 4u);
  EXPECT_EQ(FreeBlocks(), free_at_start);
  const SchedulerStats stats = scheduler_->MakeStats();
  EXPECT_EQ(stats.connector_prefix_cache_stats.requests, 1);
  EXPECT_EQ(stats.connector_prefix_cache_stats.queries, 10);
  EXPECT_EQ(stats.connector_prefix_cache_stats.hits, 10);
}

TEST_F(SchedulerKvConnectorTest, DecodeReadsOnlyTheBlocksItsPrefixCacheLacks) {
  Init("kv_consumer");
  // A local request computes the first two blocks of the same prompt.
  EngineCoreRequest local = MakeRequest("local", 13, 1);
  local.prompt_token_ids = MakePrompt("shared", 13);
  ASSERT_TRUE(scheduler_->AddRequest(std::move(local)).ok());
  Step();
  ASSERT_TRUE(finish_.contains("local"));
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "shared", 13, {20, 21, 22, 23})).ok());
  SchedulerOutput so = Step();
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->loads.size(), 1u);
  const kv_transfer::LoadSpec& load = so.kv_connector_metadata->loads[0];
  // (13 - 1) / 4 = 3 blocks hit locally; the 4th comes from the prefill side.
  EXPECT_EQ(load.remote_block_ids, (std::vector<int32_t>{23}));
  EXPECT_EQ(load.local_block_ids.size(), 1u);
  EXPECT_EQ(load.num_tokens, 1);
}

TEST_F(SchedulerKvConnectorTest, FailedLoadIsRecomputedUnderRecompute) {
  Init("kv_consumer", "recompute");
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "d", 10, {1, 2, 3})).ok());
  Step();
  Step(Recving("d", false));
  SchedulerOutput so = Step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 0);
  EXPECT_EQ(so.num_scheduled_tokens[0], 10);
  EXPECT_FALSE(so.kv_connector_metadata.has_value() &&
               !so.kv_connector_metadata->loads.empty());  // never loaded twice
  for (int i = 0; i < 10 && !finish_.contains("d"); ++i) Step();
  EXPECT_EQ(finish_.at("d"), FinishReason::kLength);
  EXPECT_EQ(tokens_["d"].size(), 4u);
}

TEST_F(SchedulerKvConnectorTest, FailedLoadFailsTheRequestUnderFail) {
  Init("kv_consumer", "fail");
  const int32_t free_at_start = FreeBlocks();
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "d", 10, {1, 2, 3})).ok());
  Step();
  Step(Recving("d", false));
  Step();
  EXPECT_EQ(finish_.at("d"), FinishReason::kError);
  EXPECT_EQ(FreeBlocks(), free_at_start);
  EXPECT_FALSE(scheduler_->HasRequests());
}

TEST_F(SchedulerKvConnectorTest, AbortDuringALoadKeepsTheBlocksUntilTheWorkersAreDone) {
  Init("kv_consumer");
  const int32_t free_at_start = FreeBlocks();
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "d", 10, {1, 2, 3})).ok());
  Step();
  const std::string ids[] = {"d"};
  scheduler_->FinishRequests(ids, RequestStatus::kFinishedAborted);
  EXPECT_EQ(scheduler_->num_held_requests(), 1u);
  EXPECT_LT(FreeBlocks(), free_at_start);  // the workers may still write into them
  Step(Recving("d", true));
  EXPECT_EQ(scheduler_->num_held_requests(), 0u);
  EXPECT_EQ(FreeBlocks(), free_at_start);
}

TEST_F(SchedulerKvConnectorTest, ParamsThatDoNotCoverThePromptAreComputedLocally) {
  Init("kv_consumer");
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "d", 10, {1, 2})).ok());
  SchedulerOutput so = Step();
  EXPECT_EQ(so.total_num_scheduled_tokens, 10);
  EXPECT_FALSE(so.kv_connector_metadata.has_value() && !so.kv_connector_metadata->loads.empty());
}

TEST_F(SchedulerKvConnectorTest, AbortBeforeTheLoadStartedReleasesTheRemoteBlocks) {
  Init("kv_consumer");
  // Aborted while still in the waiting queue (never allocated).
  ASSERT_TRUE(scheduler_->AddRequest(DecodeRequest("d", "d", 10, {1, 2, 3})).ok());
  const std::string ids[] = {"d"};
  scheduler_->FinishRequests(ids, RequestStatus::kFinishedAborted);
  SchedulerOutput so = scheduler_->Schedule();
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->loads.size(), 1u);
  EXPECT_TRUE(so.kv_connector_metadata->loads[0].local_block_ids.empty());  // notify only
  EXPECT_EQ(so.kv_connector_metadata->loads[0].remote_request_id, "prefill-d");
}

TEST(KvConnectorFactoryTest, RefusesUnknownExtraConfigKeysByName) {
  config::VllmConfig c = testing::MakeTestConfig();
  c.kv_transfer.kv_connector = "NixlConnector";
  c.kv_transfer.kv_role = "kv_both";
  c.kv_transfer.kv_connector_extra_config = R"({"bogus": 1})";
  auto connector = MakeKVConnectorScheduler(c, {"e", "f"});
  ASSERT_FALSE(connector.ok());
  EXPECT_NE(connector.status().message().find("\"bogus\""), std::string::npos)
      << connector.status();
}

}  // namespace
}  // namespace vllm::core

namespace vllm::core {
namespace {

TEST(KvConnectorFactoryTest, RefusesADeviceBufferAndMalformedBackends) {
  config::VllmConfig c = testing::MakeTestConfig();
  c.kv_transfer.kv_connector = "NixlConnector";
  c.kv_transfer.kv_role = "kv_both";
  c.kv_transfer.kv_buffer_device = "cuda";
  auto connector = MakeKVConnectorScheduler(c, {"e", "f"});
  ASSERT_FALSE(connector.ok());
  EXPECT_NE(connector.status().message().find("kv_buffer_device"), std::string::npos);
  c.kv_transfer.kv_buffer_device = "cpu";
  c.kv_transfer.kv_connector_extra_config = R"({"backends": "UCX"})";
  connector = MakeKVConnectorScheduler(c, {"e", "f"});
  ASSERT_FALSE(connector.ok());
  EXPECT_NE(connector.status().message().find("\"backends\""), std::string::npos);
  c.kv_transfer.kv_connector_extra_config = R"({"backends": ["UCX"]})";
  connector = MakeKVConnectorScheduler(c, {"e", "f"});
  EXPECT_TRUE(connector.ok()) << connector.status();
}

}  // namespace
}  // namespace vllm::core
