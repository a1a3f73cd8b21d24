// Randomized add/abort/step sequences against the Scheduler (fixed seeds), checking the
// KV-cache and budget invariants after every operation and, at the end, that every request
// produced exactly the tokens of the deterministic scripted model — across chunked
// prefill, prefix-cache hits, preemption and resumption, and steps kept in flight.
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/scheduler.h"
#include "core_test_util.h"
#include "gtest/gtest.h"

namespace vllm::core {
namespace {

using testing::MakePrompt;
using testing::ScriptedModel;
using testing::ScriptedToken;

class SchedulerPropertyTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  // Block ownership: each block's ref_cnt equals the number of block tables holding it;
  // free blocks are exactly those with ref_cnt 0, each queued once; free + used = total.
  void CheckKVInvariants(const Scheduler& s) {
    const BlockPool& pool = s.kv_cache_manager().block_pool();
    std::vector<int32_t> holders(pool.num_blocks(), 0);
    int32_t num_requests = 0;
    auto count = [&](const Request* r) {
      ++num_requests;
      for (int32_t id : r->block_ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, pool.num_blocks());
        ++holders[id];
      }
      ASSERT_LE(r->num_tokens(), s.config().model.max_model_len);
    };
    for (const Request* r : s.running()) {
      ASSERT_EQ(r->status, RequestStatus::kRunning);
      ASSERT_GE(static_cast<int64_t>(r->block_ids.size()) * s.config().cache.block_size,
                r->num_computed_tokens)
          << r->request_id;
      count(r);
    }
    for (const Request* r : s.waiting_snapshot()) {
      ASSERT_TRUE(r->block_ids.empty()) << "waiting request " << r->request_id << " holds blocks";
      ASSERT_EQ(r->num_computed_tokens, 0);
      count(r);
    }
    ASSERT_EQ(num_requests, s.GetNumUnfinishedRequests());
    int32_t used = 0;
    for (int32_t id = 0; id < pool.num_blocks(); ++id) {
      ASSERT_EQ(pool.block(id).ref_cnt, holders[id]) << "block " << id;
      used += holders[id] > 0;
    }
    const std::vector<int32_t> free_ids = pool.free_queue().GetAllFreeBlocks();
    ASSERT_EQ(static_cast<int32_t>(free_ids.size()), pool.GetNumFreeBlocks());
    std::vector<bool> seen(pool.num_blocks(), false);
    for (int32_t id : free_ids) {
      ASSERT_FALSE(seen[id]) << "block " << id << " queued twice";
      seen[id] = true;
      ASSERT_EQ(holders[id], 0) << "block " << id << " free but held";
    }
    ASSERT_EQ(pool.GetNumFreeBlocks() + used, pool.num_blocks());
  }

  void TearDown() override {
    // The sequences must actually exercise preemption and the prefix cache.
    RecordProperty("preemptions", static_cast<int>(total_preemptions_));
    RecordProperty("prefix_hits", static_cast<int>(total_prefix_hits_));
  }
  int64_t total_preemptions_ = 0;
  int64_t total_prefix_hits_ = 0;

  // One random sequence of `num_ops` add/abort/step operations, then a drain.
  void RunSequence(uint32_t seed, int num_ops);

  void CheckStep(const Scheduler& s, const SchedulerOutput& so) {
    const config::VllmConfig& c = s.config();
    ASSERT_LE(so.total_num_scheduled_tokens, c.scheduler.max_num_batched_tokens);
    ASSERT_LE(static_cast<int32_t>(s.running().size()), c.scheduler.max_num_seqs);
    ASSERT_LE(static_cast<int32_t>(so.num_scheduled_reqs()), c.scheduler.max_num_seqs);
    ASSERT_EQ(so.num_scheduled_tokens.size(), so.num_scheduled_reqs());
    int32_t total = 0;
    for (int32_t n : so.num_scheduled_tokens) {
      ASSERT_GT(n, 0);
      if (c.scheduler.long_prefill_token_threshold > 0) {
        ASSERT_LE(n, c.scheduler.long_prefill_token_threshold);
      }
      total += n;
    }
    ASSERT_EQ(total, so.total_num_scheduled_tokens);
  }
};

// Sanitizer builds are ~50x slower: run fewer, shorter sequences there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VLLM_SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VLLM_SLOW_BUILD 1
#endif
#endif
#ifdef VLLM_SLOW_BUILD
constexpr int kSequencesPerSeed = 1;
constexpr int kOpsPerSequence = 150;
#else
constexpr int kSequencesPerSeed = 100;  // 40 seeds x 100 = 4000 sequences
constexpr int kOpsPerSequence = 250;
#endif

TEST_P(SchedulerPropertyTest, RandomOperationsKeepInvariants) {
  for (int k = 0; k < kSequencesPerSeed && !HasFailure(); ++k) {
    RunSequence(GetParam() * 1000 + static_cast<uint32_t>(k), kOpsPerSequence);
  }
}

void SchedulerPropertyTest::RunSequence(uint32_t seed, int num_ops) {
  SCOPED_TRACE(::testing::Message() << "sequence seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  testing::SchedulerSetup c;
  c.config.cache.block_size = std::vector<int>{1, 2, 4, 16}[uniform(0, 3)];
  c.config.model.max_model_len = uniform(8, 96);
  const int32_t min_blocks =
      (c.config.model.max_model_len + c.config.cache.block_size - 1) / c.config.cache.block_size;
  c.kv_cache.num_blocks = min_blocks + uniform(0, 2 * min_blocks);  // small: forces preemption
  c.config.scheduler.max_num_seqs = uniform(1, 8);
  c.config.scheduler.enable_chunked_prefill = uniform(0, 3) != 0;
  c.config.scheduler.max_num_batched_tokens = c.config.scheduler.enable_chunked_prefill
                                                  ? uniform(1, 128)
                                                  : c.config.model.max_model_len + uniform(0, 64);
  c.config.scheduler.long_prefill_token_threshold = uniform(0, 2) == 0 ? uniform(1, 32) : 0;
  c.config.scheduler.policy = uniform(0, 1) ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  c.config.cache.enable_prefix_caching = uniform(0, 4) != 0;
  const int max_inflight = uniform(1, 3);
  auto created = Scheduler::Create(c.config, c.kv_cache);
  ASSERT_TRUE(created.ok()) << created.status();
  Scheduler& s = **created;
  ScriptedModel model;

  std::map<std::string, std::vector<int32_t>> produced;
  std::map<std::string, int32_t> prompt_len;
  std::map<std::string, int32_t> max_tokens;
  std::map<std::string, FinishReason> finished;
  std::vector<std::string> live;
  std::deque<SchedulerOutput> inflight;
  int next_id = 0;

  auto apply_oldest = [&] {
    SchedulerOutput so = std::move(inflight.front());
    inflight.pop_front();
    auto outs = s.UpdateFromOutput(so, model.Run(so));
    ASSERT_TRUE(outs.ok()) << outs.status();
    for (const EngineCoreOutput& o : outs->outputs) {
      ASSERT_FALSE(finished.contains(o.request_id)) << "output after finish";
      auto& t = produced[o.request_id];
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) finished[o.request_id] = *o.finish_reason;
    }
  };

  for (int op = 0; op < num_ops; ++op) {
    const int kind = uniform(0, 9);
    if (kind <= 2) {
      // Prompts share prefixes (a few seeds, varying lengths) to exercise the cache.
      const std::string id = "r" + std::to_string(next_id++);
      const int32_t len = uniform(1, c.config.model.max_model_len - 1);
      EngineCoreRequest r;
      r.request_id = id;
      r.prompt_token_ids = MakePrompt("prefix" + std::to_string(uniform(0, 2)), len);
      r.sampling_params.max_tokens = uniform(1, c.config.model.max_model_len - len);
      r.sampling_params.ignore_eos = true;
      r.priority = uniform(0, 3);
      r.arrival_time = op;
      if (uniform(0, 3) == 0) r.cache_salt = "salt" + std::to_string(uniform(0, 1));
      ASSERT_TRUE(s.AddRequest(r).ok());
      prompt_len[id] = len;
      max_tokens[id] = *r.sampling_params.max_tokens;
      live.push_back(id);
    } else if (kind == 3 && !live.empty()) {
      const size_t victim = static_cast<size_t>(uniform(0, static_cast<int>(live.size()) - 1));
      const std::vector<std::string> ids = {live[victim]};
      s.FinishRequests(ids, RequestStatus::kFinishedAborted);
      if (!finished.contains(live[victim])) finished[live[victim]] = FinishReason::kAbort;
      live.erase(live.begin() + victim);
    } else {
      if (s.HasRequests()) {
        SchedulerOutput so = s.Schedule();
        CheckStep(s, so);
        inflight.push_back(std::move(so));
      }
      while (!inflight.empty() &&
             (static_cast<int>(inflight.size()) >= max_inflight || uniform(0, 1) == 0)) {
        apply_oldest();
      }
    }
    CheckKVInvariants(s);
    if (HasFatalFailure()) return;
  }
  // Drain: finish everything.
  for (int i = 0; i < 100000 && (s.HasRequests() || !inflight.empty()); ++i) {
    if (s.HasRequests()) {
      SchedulerOutput so = s.Schedule();
      CheckStep(s, so);
      inflight.push_back(std::move(so));
    }
    while (!inflight.empty() && static_cast<int>(inflight.size()) >= max_inflight) {
      apply_oldest();
    }
    if (!s.HasRequests()) {
      while (!inflight.empty()) apply_oldest();
    }
    CheckKVInvariants(s);
    if (HasFatalFailure()) return;
  }
  ASSERT_FALSE(s.HasUnfinishedRequests()) << "requests never finished";
  const SchedulerStats stats = s.MakeStats();
  total_preemptions_ += stats.num_preemptions;
  total_prefix_hits_ += stats.prefix_cache_stats.hits;
  EXPECT_EQ(s.kv_cache_manager().block_pool().GetNumFreeBlocks(), c.kv_cache.num_blocks);
  // Every completed request generated exactly the scripted tokens up to its limit.
  for (const auto& [id, reason] : finished) {
    const auto& tokens = produced[id];
    for (size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_EQ(tokens[i], ScriptedToken(id, prompt_len[id] + static_cast<int32_t>(i)))
          << id << " token " << i;
    }
    if (reason != FinishReason::kAbort) {
      EXPECT_EQ(reason, FinishReason::kLength) << id;
      EXPECT_EQ(static_cast<int32_t>(tokens.size()), max_tokens[id]) << id;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerPropertyTest, ::testing::Range(1u, 41u));

}  // namespace
}  // namespace vllm::core
