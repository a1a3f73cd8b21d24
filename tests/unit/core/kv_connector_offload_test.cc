// The OffloadingConnector (core/kv_connector_offload.h) under the real scheduler with a scripted
// model: full blocks are stored once, the host tier evicts its least recently used block, a
// prompt evicted from the device cache loads its blocks back (never its last token's) and
// counts as connector prefix-cache hits; the factory's refusals. The workers' reports are fed
// in by hand. Last, the worker side (worker/kv_connector_offload.h) copies blocks to the tier
// and back over a small host cache.
#include "core/kv_connector_offload.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/kv_connector.h"
#include "core/scheduler.h"
#include "core_test_util.h"
#include "gtest/gtest.h"
#include "worker/kv_connector_offload.h"

namespace vllm::core {
namespace {

using testing::MakePrompt;
using testing::MakeRequest;
using testing::SchedulerSetup;
using testing::ScriptedModel;

constexpr int32_t kBlockSize = 4;
constexpr int64_t kBlockBytes = 1000;  // one block over all ranks (made up: only divides)

config::VllmConfig OffloadConfig(int32_t num_slots, const std::string& extra_keys = "") {
  config::VllmConfig c = testing::MakeTestConfig();
  c.cache.block_size = kBlockSize;
  c.kv_transfer.kv_connector = "OffloadingConnector";
  c.kv_transfer.kv_role = "kv_both";
  // A float, as --kv-offloading-size writes it; the fraction is floored.
  c.kv_transfer.kv_connector_extra_config =
      absl::StrFormat(R"({"cpu_bytes_to_use": %d.5%s})", num_slots * kBlockBytes, extra_keys);
  return c;
}

class OffloadingConnectorTest : public ::testing::Test {
 protected:
  void Init(int32_t num_device_blocks, int32_t num_slots, const std::string& extra_keys = "",
            const std::string& policy = "fail", int32_t step_budget = 64) {
    SchedulerSetup c;
    c.config = OffloadConfig(num_slots, extra_keys);
    c.config.scheduler.max_num_seqs = 8;
    c.config.scheduler.max_num_batched_tokens = step_budget;
    c.config.model.max_model_len = std::min(128, num_device_blocks * kBlockSize);
    c.config.kv_transfer.kv_load_failure_policy = policy;
    c.kv_cache.num_blocks = num_device_blocks;
    auto connector = MakeKVConnectorScheduler(c.config, {"engine", "test-model", kBlockBytes});
    ASSERT_TRUE(connector.ok()) << connector.status();
    ASSERT_EQ((*connector)->name(), "OffloadingConnector");
    auto s = Scheduler::Create(c.config, c.kv_cache, nullptr, nullptr, std::move(*connector));
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
  }

  // One step through the scripted model, with `kv` as the workers' report; collects the
  // step's connector metadata.
  SchedulerOutput Step(std::optional<kv_transfer::KVConnectorOutput> kv = std::nullopt) {
    SchedulerOutput so = scheduler_->Schedule();
    if (so.kv_connector_metadata.has_value()) {
      for (const auto& s : so.kv_connector_metadata->saves) saves_.push_back(s);
    }
    ModelRunnerOutput mro = model_.Run(so);
    mro.kv_connector_output = std::move(kv);
    auto outs = scheduler_->UpdateFromOutput(so, mro);
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (outs.ok()) {
      for (EngineCoreOutput& o : outs->outputs) {
        if (o.finished()) finish_[o.request_id] = *o.finish_reason;
      }
    }
    return so;
  }

  // Adds `id` with the prompt of `prompt_of` and runs until it finished.
  void RunToEnd(const std::string& id, const std::string& prompt_of, int32_t prompt_len,
                int32_t max_tokens = 1) {
    EngineCoreRequest r = MakeRequest(id, prompt_len, max_tokens);
    r.prompt_token_ids = MakePrompt(prompt_of, prompt_len);
    ASSERT_TRUE(scheduler_->AddRequest(std::move(r)).ok());
    for (int i = 0; i < 200 && !finish_.contains(id); ++i) Step();
    ASSERT_TRUE(finish_.contains(id)) << id;
  }

  // Evicts every block from a device cache of 16 blocks without storing anything: a prompt
  // of 3 tokens (no full block) generating 61 (not stored under offload_prompt_only), 63 of
  // them computed.
  void Flood() {
    ASSERT_NO_FATAL_FAILURE(RunToEnd(absl::StrFormat("flood-%d", ++num_floods_), "flood", 3, 61));
  }

  // The slots stored for request `id` so far, in order.
  std::vector<int32_t> SlotsOf(const std::string& id) const {
    std::vector<int32_t> slots;
    for (const auto& s : saves_) {
      if (s.req_id == id) slots.insert(slots.end(), s.host_slots.begin(), s.host_slots.end());
    }
    return slots;
  }

  static kv_transfer::KVConnectorOutput Recving(const std::string& id, bool ok) {
    kv_transfer::KVConnectorOutput out;
    (ok ? out.finished_recving : out.failed_recving).push_back(id);
    return out;
  }

  std::unique_ptr<Scheduler> scheduler_;
  ScriptedModel model_;
  std::vector<kv_transfer::SaveSpec> saves_;
  std::map<std::string, FinishReason> finish_;
  int num_floods_ = 0;
};

TEST_F(OffloadingConnectorTest, StoresEachFullPromptBlockOnce) {
  Init(/*num_device_blocks=*/64, /*num_slots=*/64);
  // 10 prompt tokens: two full blocks; 8 generated tokens fill more blocks, not stored under
  // offload_prompt_only (vLLM's default).
  RunToEnd("a", "a", 10, 8);
  ASSERT_EQ(saves_.size(), 1u);
  EXPECT_EQ(saves_[0].host_slots, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(saves_[0].block_ids.size(), 2u);
  EXPECT_EQ(saves_[0].num_tokens, 8);
  // The same prompt again (a local hit) stores nothing new.
  RunToEnd("b", "a", 10, 8);
  EXPECT_TRUE(SlotsOf("b").empty());
  // A prompt that is the first block of "a" (no local hit: it is its last token's).
  RunToEnd("c", "a", 4, 1);
  EXPECT_TRUE(SlotsOf("c").empty());
}

TEST_F(OffloadingConnectorTest, StoresGeneratedBlocksWithoutOffloadPromptOnly) {
  Init(64, 64, R"(, "offload_prompt_only": false)");
  // 10 + 8 tokens: the last sampled token's KV is never computed, so 17 computed: 4 blocks.
  RunToEnd("a", "a", 10, 8);
  EXPECT_EQ(SlotsOf("a"), (std::vector<int32_t>{0, 1, 2, 3}));
  for (const auto& s : saves_) EXPECT_EQ(s.block_ids.size(), s.host_slots.size());
}

TEST_F(OffloadingConnectorTest, ChunkedPrefillStoresEachBlockInTheStepThatComputedIt) {
  Init(64, 64, R"(, "block_size": 4, "eviction_policy": "lru")", "fail", /*step_budget=*/10);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest("long", 30, 1)).ok());
  std::vector<size_t> per_step;
  for (int i = 0; i < 4; ++i) {
    const size_t before = SlotsOf("long").size();
    Step();
    per_step.push_back(SlotsOf("long").size() - before);
  }
  // 10, 20, 30 tokens computed: blocks 0-1, then 2-4, then 5-6 (29 tokens: 7 full blocks).
  EXPECT_EQ(per_step, (std::vector<size_t>{2, 3, 2, 0}));
}

TEST_F(OffloadingConnectorTest, EvictedPromptLoadsItsBlocksBackFromTheTier) {
  Init(/*num_device_blocks=*/16, /*num_slots=*/64);
  RunToEnd("a", "shared", 13);  // 3 full blocks stored
  ASSERT_EQ(SlotsOf("a"), (std::vector<int32_t>{0, 1, 2}));
  Flood();
  (void)scheduler_->MakeStats();  // counts from here
  EngineCoreRequest again = MakeRequest("b", 13, 4);
  again.prompt_token_ids = MakePrompt("shared", 13);
  ASSERT_TRUE(scheduler_->AddRequest(std::move(again)).ok());
  SchedulerOutput so = Step();
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->loads.size(), 1u);
  const kv_transfer::LoadSpec load = so.kv_connector_metadata->loads[0];
  EXPECT_EQ(load.req_id, "b");
  EXPECT_EQ(load.remote_block_ids, (std::vector<int32_t>{0, 1, 2}));  // the host slots
  EXPECT_EQ(load.num_tokens, 12);
  const Request* waiting = scheduler_->GetRequest("b");
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->status, RequestStatus::kWaitingForRemoteKvs);
  EXPECT_EQ(load.local_block_ids,
            std::vector<int32_t>(waiting->block_ids.begin(), waiting->block_ids.begin() + 3));
  EXPECT_EQ(so.total_num_scheduled_tokens, 0);
  Step(Recving("b", true));
  so = Step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 12);
  EXPECT_EQ(so.num_scheduled_tokens[0], 1);
  for (int i = 0; i < 10 && !finish_.contains("b"); ++i) Step();
  EXPECT_EQ(finish_.at("b"), FinishReason::kLength);
  EXPECT_TRUE(SlotsOf("b").empty());  // its blocks were in the tier already
  const SchedulerStats stats = scheduler_->MakeStats();
  EXPECT_EQ(stats.connector_prefix_cache_stats.requests, 1);
  EXPECT_EQ(stats.connector_prefix_cache_stats.queries, 13);  // beyond the local hit (none)
  EXPECT_EQ(stats.connector_prefix_cache_stats.hits, 12);
  EXPECT_EQ(stats.prefix_cache_stats.hits, 0);
}

TEST_F(OffloadingConnectorTest, ALoadNeverCoversTheLastPromptToken) {
  Init(16, 64);
  RunToEnd("a", "shared", 12);  // exactly 3 blocks, all stored
  ASSERT_EQ(SlotsOf("a").size(), 3u);
  Flood();
  EngineCoreRequest again = MakeRequest("b", 12, 1);
  again.prompt_token_ids = MakePrompt("shared", 12);
  ASSERT_TRUE(scheduler_->AddRequest(std::move(again)).ok());
  SchedulerOutput so = Step();
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->loads.size(), 1u);
  EXPECT_EQ(so.kv_connector_metadata->loads[0].num_tokens, 8);  // (12 - 1) / 4 blocks
  Step(Recving("b", true));
  so = Step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 8);
  EXPECT_EQ(so.num_scheduled_tokens[0], 4);
}

TEST_F(OffloadingConnectorTest, TheTierEvictsItsLeastRecentlyUsedBlock) {
  Init(16, /*num_slots=*/3);
  RunToEnd("a", "a", 9);  // a0 a1 → slots 0 1
  RunToEnd("b", "b", 5);  // b0 → slot 2: the tier is full
  ASSERT_EQ(SlotsOf("a"), (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(SlotsOf("b"), (std::vector<int32_t>{2}));
  RunToEnd("a-again", "a", 9);  // a local hit that refreshes a0 and a1: b0 is now the oldest
  RunToEnd("c", "c", 5);        // c0 evicts b0
  EXPECT_EQ(SlotsOf("c"), (std::vector<int32_t>{2}));
  Flood();
  // b0 is in neither cache: computed, and stored in a0's slot (the oldest now).
  RunToEnd("b-again", "b", 5);
  EXPECT_EQ(SlotsOf("b-again"), (std::vector<int32_t>{0}));
  // c0 is still in the tier: loaded back.
  EngineCoreRequest c = MakeRequest("c-again", 5, 1);
  c.prompt_token_ids = MakePrompt("c", 5);
  ASSERT_TRUE(scheduler_->AddRequest(std::move(c)).ok());
  SchedulerOutput so = Step();
  ASSERT_TRUE(so.kv_connector_metadata.has_value());
  ASSERT_EQ(so.kv_connector_metadata->loads.size(), 1u);
  EXPECT_EQ(so.kv_connector_metadata->loads[0].remote_block_ids, (std::vector<int32_t>{2}));
}

TEST_F(OffloadingConnectorTest, OnlyConsecutiveBlocksAfterTheLocalHitLoad) {
  Init(16, /*num_slots=*/3);
  RunToEnd("a", "shared", 13);  // s0 s1 s2 → slots 0 1 2
  RunToEnd("x", "x", 5);        // x0 evicts s0
  ASSERT_EQ(SlotsOf("x"), (std::vector<int32_t>{0}));
  Flood();
  EngineCoreRequest again = MakeRequest("b", 13, 1);
  again.prompt_token_ids = MakePrompt("shared", 13);
  ASSERT_TRUE(scheduler_->AddRequest(std::move(again)).ok());
  SchedulerOutput so = Step();  // s1 and s2 are no use without s0
  EXPECT_FALSE(so.kv_connector_metadata.has_value() && !so.kv_connector_metadata->loads.empty());
  EXPECT_EQ(so.total_num_scheduled_tokens, 13);
}

TEST_F(OffloadingConnectorTest, AFailedLoadIsRecomputedAndNotTriedAgain) {
  Init(16, 64, "", "recompute");
  RunToEnd("a", "shared", 13);
  Flood();
  EngineCoreRequest again = MakeRequest("b", 13, 1);
  again.prompt_token_ids = MakePrompt("shared", 13);
  ASSERT_TRUE(scheduler_->AddRequest(std::move(again)).ok());
  Step();
  Step(Recving("b", false));
  SchedulerOutput so = Step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 0);
  EXPECT_EQ(so.num_scheduled_tokens[0], 13);
  EXPECT_FALSE(so.kv_connector_metadata.has_value() && !so.kv_connector_metadata->loads.empty());
}

TEST_F(OffloadingConnectorTest, PromptLogprobsRequestsNeverLoad) {
  Init(16, 64);
  RunToEnd("a", "shared", 13);
  Flood();
  EngineCoreRequest again = MakeRequest("b", 13, 1);
  again.prompt_token_ids = MakePrompt("shared", 13);
  again.sampling_params.prompt_logprobs = 1;
  ASSERT_TRUE(scheduler_->AddRequest(std::move(again)).ok());
  SchedulerOutput so = Step();
  EXPECT_FALSE(so.kv_connector_metadata.has_value() && !so.kv_connector_metadata->loads.empty());
  EXPECT_EQ(so.total_num_scheduled_tokens, 13);
}

// The factory's refusals name what to change.
void ExpectRefused(const config::VllmConfig& c, int64_t block_bytes, const std::string& needle) {
  auto connector = MakeKVConnectorScheduler(c, {"e", "f", block_bytes});
  ASSERT_FALSE(connector.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(connector.status())) << connector.status();
  EXPECT_NE(connector.status().message().find(needle), std::string::npos) << connector.status();
}

TEST(OffloadingConnectorFactoryTest, RefusesWhatIsNotBuilt) {
  config::VllmConfig c = OffloadConfig(4);
  c.cache.enable_prefix_caching = false;
  ExpectRefused(c, kBlockBytes, "--no-enable-prefix-caching");
  ExpectRefused(OffloadConfig(4, R"(, "bogus": 1)"), kBlockBytes, "\"bogus\"");
  ExpectRefused(OffloadConfig(4, R"(, "eviction_policy": "arc")"), kBlockBytes, "eviction_policy");
  ExpectRefused(OffloadConfig(4, R"(, "block_size": 16)"), kBlockBytes, "block_size");
  ExpectRefused(OffloadConfig(4, R"(, "offload_prompt_only": 1)"), kBlockBytes,
                "offload_prompt_only");
  // 4.5 blocks of 1000 bytes hold no block of 5000.
  ExpectRefused(OffloadConfig(4), 5000, "--kv-offloading-size");
  config::VllmConfig missing = OffloadConfig(4);
  missing.kv_transfer.kv_connector_extra_config = "{}";
  ExpectRefused(missing, kBlockBytes, "cpu_bytes_to_use");
}

TEST(OffloadingConnectorFactoryTest, SlotsAreTheBytesOverOneBlockOfAllRanks) {
  auto slots = OffloadingNumSlots(OffloadConfig(7), kBlockBytes);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(*slots, 7);  // 7500 bytes / 1000
  slots = OffloadingNumSlots(OffloadConfig(7), 2 * kBlockBytes);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(*slots, 3);
}

// The worker side over a host cache of 2 layers × 4 blocks (1 head, head_dim 2, block_size 2,
// 4-byte values: 16 bytes per layer block).
class OffloadingWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    view_.layout = {2, 1, 2, 2, 4, 1, 0};
    view_.num_blocks = 4;
    const size_t bytes = 4 * static_cast<size_t>(view_.layout.layer_block_bytes());
    for (int l = 0; l < 2; ++l) {
      storage_.emplace_back(bytes);
      view_.k.push_back(storage_.back().data());
      storage_.emplace_back(bytes);
      view_.v.push_back(storage_.back().data());
    }
    // 2 slots of 64 bytes.
    config_ = OffloadConfig(1);
    config_.kv_transfer.kv_connector_extra_config = R"({"cpu_bytes_to_use": 128})";
    auto w = worker::MakeOffloadingConnectorWorker(config_, view_, nullptr);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
  }

  // Block `b`'s bytes, every layer's K then V.
  std::vector<uint8_t> BlockBytes(int32_t b) const {
    std::vector<uint8_t> out(static_cast<size_t>(view_.layout.block_bytes()));
    kv_transfer::CopyBlockOut(view_, b, out.data());
    return out;
  }
  void Fill(int32_t b, uint8_t value) {
    std::vector<uint8_t> in(static_cast<size_t>(view_.layout.block_bytes()), value);
    kv_transfer::CopyBlockIn(view_, b, in.data());
  }

  config::VllmConfig config_;
  std::vector<std::vector<uint8_t>> storage_;
  kv_transfer::KvCacheView view_;
  std::unique_ptr<worker::KVConnectorWorker> worker_;
};

TEST_F(OffloadingWorkerTest, SavesAfterTheForwardPassAndLoadsBack) {
  Fill(0, 0x11);
  Fill(1, 0x22);
  kv_transfer::KVConnectorMetadata save;
  save.saves.push_back({"a", {0, 1}, 4, "", {1, 0}});
  ASSERT_TRUE(worker_->BeginStep(save).ok());
  Fill(1, 0x33);  // the forward pass writes block 1 after BeginStep: the save sees it
  auto out = worker_->EndStep();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->empty());

  kv_transfer::KVConnectorMetadata load;
  kv_transfer::LoadSpec& l = load.loads.emplace_back();
  l.req_id = "b";
  l.local_block_ids = {2, 3};
  l.remote_block_ids = {0, 1};  // host slots: block 1's bytes, then block 0's
  l.num_tokens = 4;
  ASSERT_TRUE(worker_->BeginStep(load).ok());
  EXPECT_EQ(BlockBytes(2), BlockBytes(1));
  EXPECT_EQ(BlockBytes(3), BlockBytes(0));
  out = worker_->EndStep();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->finished_recving, (std::vector<std::string>{"b"}));
}

TEST_F(OffloadingWorkerTest, ALoadOutOfRangeFails) {
  kv_transfer::KVConnectorMetadata load;
  kv_transfer::LoadSpec& l = load.loads.emplace_back();
  l.req_id = "b";
  l.local_block_ids = {2};
  l.remote_block_ids = {2};  // only slots 0 and 1 exist
  ASSERT_TRUE(worker_->BeginStep(load).ok());
  auto out = worker_->EndStep();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->failed_recving, (std::vector<std::string>{"b"}));
}

}  // namespace
}  // namespace vllm::core
