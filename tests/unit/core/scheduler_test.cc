#include "core/scheduler.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core_test_util.h"
#include "gtest/gtest.h"

namespace vllm::core {
namespace {

using testing::kEos;
using testing::MakeRequest;
using testing::SchedulerSetup;
using testing::ScriptedModel;
using testing::ScriptedToken;

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerSetup Config() {
    SchedulerSetup c;
    c.config.scheduler.max_num_seqs = 16;
    c.config.scheduler.max_num_batched_tokens = 64;
    c.config.model.max_model_len = 256;
    c.config.cache.block_size = 4;
    c.kv_cache.num_blocks = 1000;
    return c;
  }
  void Init(const SchedulerSetup& config, ScriptedModel::TokenFn fn = ScriptedToken) {
    auto s = Scheduler::Create(config.config, config.kv_cache);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    model_ = std::make_unique<ScriptedModel>(std::move(fn));
  }
  void Add(EngineCoreRequest r) { ASSERT_TRUE(scheduler_->AddRequest(std::move(r)).ok()); }
  // One full step; records outputs. Returns the SchedulerOutput.
  SchedulerOutput Step() {
    SchedulerOutput so = scheduler_->Schedule();
    Apply(so);
    return so;
  }
  // Runs `so` on the scripted model and applies its output; records outputs.
  void Apply(const SchedulerOutput& so) {
    ModelRunnerOutput mro = model_->Run(so);
    auto outs = scheduler_->UpdateFromOutput(so, mro);
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (outs.ok()) {
      for (const EngineCoreOutput& o : outs->outputs) {
        auto& tokens = tokens_[o.request_id];
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished()) {
          finish_[o.request_id] = *o.finish_reason;
          stop_reason_[o.request_id] = o.stop_reason;
        }
        cached_[o.request_id] = o.num_cached_tokens;
        created_[o.request_id].push_back(o.num_cache_creation_tokens);
      }
    }
  }
  void RunToCompletion(int max_steps = 10000) {
    for (int i = 0; i < max_steps && scheduler_->HasUnfinishedRequests(); ++i) Step();
    ASSERT_FALSE(scheduler_->HasUnfinishedRequests());
  }
  // Tokens scheduled for `id` in `so` (0 when absent).
  static int32_t Scheduled(const SchedulerOutput& so, const std::string& id) {
    for (size_t i = 0; i < so.num_scheduled_reqs(); ++i) {
      if (so.scheduled_req_id(i) == id) return so.num_scheduled_tokens[i];
    }
    return 0;
  }
  // The tokens the scripted model generates for `id` from position `prompt_len`.
  static std::vector<int32_t> Expected(const std::string& id, int32_t prompt_len, int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(ScriptedToken(id, prompt_len + i));
    return t;
  }

  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ScriptedModel> model_;
  std::map<std::string, std::vector<int32_t>> tokens_;
  std::map<std::string, FinishReason> finish_;
  std::map<std::string, std::optional<int32_t>> stop_reason_;
  std::map<std::string, int32_t> cached_;
  // Each output's num_cache_creation_tokens, in order.
  std::map<std::string, std::vector<int32_t>> created_;
};

TEST_F(SchedulerTest, RejectsInvalidConfigAndRequests) {
  SchedulerSetup c = Config();
  c.kv_cache.num_blocks = 10;  // 40 tokens < max_model_len 256
  EXPECT_TRUE(absl::IsInvalidArgument(Scheduler::Create(c.config, c.kv_cache).status()));
  Init(Config());
  EXPECT_TRUE(absl::IsInvalidArgument(scheduler_->AddRequest(MakeRequest("a", 0))));
  EXPECT_TRUE(absl::IsInvalidArgument(scheduler_->AddRequest(MakeRequest("a", 256))));
  Add(MakeRequest("a", 4));
  EXPECT_TRUE(absl::IsAlreadyExists(scheduler_->AddRequest(MakeRequest("a", 4))));
}

TEST_F(SchedulerTest, TokenBudgetLimitsAStepAndChunksTheRest) {
  Init(Config());  // budget 64
  Add(MakeRequest("a", 40));
  Add(MakeRequest("b", 40));
  Add(MakeRequest("c", 40));
  SchedulerOutput so = Step();
  EXPECT_EQ(so.total_num_scheduled_tokens, 64);
  EXPECT_EQ(Scheduled(so, "a"), 40);
  EXPECT_EQ(Scheduled(so, "b"), 24);
  EXPECT_EQ(Scheduled(so, "c"), 0);
  EXPECT_EQ(tokens_["a"].size(), 1u);  // a's prefill is complete: one sampled token
  EXPECT_EQ(tokens_.count("b"), 0u);   // b is mid-prefill: nothing sampled
  // Next step: a decodes (1), b finishes its prefill (16), c starts (47).
  so = Step();
  EXPECT_EQ(Scheduled(so, "a"), 1);
  EXPECT_EQ(Scheduled(so, "b"), 16);
  EXPECT_EQ(Scheduled(so, "c"), 40);
  EXPECT_LE(so.total_num_scheduled_tokens, 64);
}

TEST_F(SchedulerTest, ChunkedPrefillAcrossStepsThenDecode) {
  SchedulerSetup c = Config();
  c.config.scheduler.max_num_batched_tokens = 32;
  Init(c);
  Add(MakeRequest("long", 100, /*max_tokens=*/3));
  std::vector<int32_t> chunks;
  for (int i = 0; i < 6; ++i) chunks.push_back(Scheduled(Step(), "long"));
  EXPECT_EQ(chunks, (std::vector<int32_t>{32, 32, 32, 4, 1, 1}));
  EXPECT_EQ(tokens_["long"], Expected("long", 100, 3));
  EXPECT_EQ(finish_["long"], FinishReason::kLength);
  EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
}

TEST_F(SchedulerTest, LongPrefillThresholdCapsChunks) {
  SchedulerSetup c = Config();
  c.config.scheduler.long_prefill_token_threshold = 10;
  Init(c);
  Add(MakeRequest("a", 25));
  Add(MakeRequest("b", 5));
  SchedulerOutput so = Step();
  EXPECT_EQ(Scheduled(so, "a"), 10);
  EXPECT_EQ(Scheduled(so, "b"), 5);
}

TEST_F(SchedulerTest, WithoutChunkedPrefillAPromptWaitsForRoom) {
  SchedulerSetup c = Config();
  c.config.scheduler.enable_chunked_prefill = false;
  c.config.scheduler.max_num_batched_tokens = 256;
  Init(c);
  Add(MakeRequest("a", 200));
  Add(MakeRequest("b", 100));
  SchedulerOutput so = Step();
  EXPECT_EQ(Scheduled(so, "a"), 200);
  EXPECT_EQ(Scheduled(so, "b"), 0);
  so = Step();
  EXPECT_EQ(Scheduled(so, "b"), 100);
}

TEST_F(SchedulerTest, DecodeAndPrefillMixInOneStepRunningFirst) {
  Init(Config());
  Add(MakeRequest("a", 8));
  Step();
  Add(MakeRequest("b", 100));
  SchedulerOutput so = Step();
  ASSERT_EQ(so.scheduled_cached_reqs.req_ids, std::vector<std::string>{"a"});
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].req_id, "b");
  EXPECT_EQ(Scheduled(so, "a"), 1);
  EXPECT_EQ(Scheduled(so, "b"), 63);
  // The cached entry carries only the delta: a's last sampled token.
  EXPECT_EQ(std::vector<int32_t>(so.scheduled_cached_reqs.new_token_ids_of(0).begin(),
                                 so.scheduled_cached_reqs.new_token_ids_of(0).end()),
            std::vector<int32_t>{tokens_["a"][0]});
}

// Pipeline parallelism: a step takes at most 1/PP of the running requests, so that PP
// micro-batches are in the stages at once; a request is never in two steps at once.
TEST_F(SchedulerTest, PipelineStepsTakeAShareOfTheRunningRequests) {
  SchedulerSetup c = Config();
  c.config.parallel.pipeline_parallel_size = 2;
  Init(c);
  for (int i = 0; i < 6; ++i) Add(MakeRequest("r" + std::to_string(i), 4));
  Step();  // every prompt, admitted together
  ASSERT_EQ(scheduler_->running().size(), 6u);
  SchedulerOutput first = scheduler_->Schedule();
  SchedulerOutput second = scheduler_->Schedule();
  SchedulerOutput third = scheduler_->Schedule();  // both micro-batches are in flight
  EXPECT_EQ(first.num_scheduled_reqs(), 3u);
  EXPECT_EQ(second.num_scheduled_reqs(), 3u);
  EXPECT_EQ(third.num_scheduled_reqs(), 0u);
  std::set<std::string> ids;
  for (const SchedulerOutput* so : {&first, &second}) {
    for (size_t i = 0; i < so->num_scheduled_reqs(); ++i) ids.insert(so->scheduled_req_id(i));
  }
  EXPECT_EQ(ids.size(), 6u) << "a request was scheduled twice while in flight";
  for (SchedulerOutput* so : {&first, &second, &third}) Apply(*so);
  // The first micro-batch's output is back: its requests go again, the second's wait.
  SchedulerOutput next = scheduler_->Schedule();
  ASSERT_EQ(next.num_scheduled_reqs(), 3u);
  for (size_t i = 0; i < next.num_scheduled_reqs(); ++i) {
    EXPECT_EQ(Scheduled(first, next.scheduled_req_id(i)), 1) << next.scheduled_req_id(i);
  }
  Apply(next);
  RunToCompletion();
  for (int i = 0; i < 6; ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(tokens_[id], Expected(id, 4, 16)) << id;
  }
}

TEST_F(SchedulerTest, MaxNumSeqsIsRespected) {
  SchedulerSetup c = Config();
  c.config.scheduler.max_num_seqs = 2;
  Init(c);
  for (int i = 0; i < 4; ++i) Add(MakeRequest("r" + std::to_string(i), 4));
  SchedulerOutput so = Step();
  EXPECT_EQ(so.num_scheduled_reqs(), 2u);
  EXPECT_EQ(scheduler_->running().size(), 2u);
  EXPECT_EQ(scheduler_->num_waiting(), 2u);
}

TEST_F(SchedulerTest, PrefixCacheHitSkipsComputedTokens) {
  Init(Config());
  Add(MakeRequest("a", 20, 1));
  RunToCompletion();
  auto b = MakeRequest("b", 22, 1);
  b.prompt_token_ids = testing::MakePrompt("a", 20);  // a's prompt: 5 full blocks cached
  b.prompt_token_ids.push_back(7);
  b.prompt_token_ids.push_back(8);
  Add(b);
  SchedulerOutput so = Step();
  ASSERT_EQ(so.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(so.scheduled_new_reqs[0].num_computed_tokens, 20);
  EXPECT_EQ(Scheduled(so, "b"), 2);
  EXPECT_EQ(cached_["b"], 20);
  EXPECT_EQ(tokens_["b"], Expected("b", 22, 1));
  const SchedulerStats stats = scheduler_->MakeStats();
  EXPECT_EQ(stats.prefix_cache_stats.requests, 2);
  EXPECT_EQ(stats.prefix_cache_stats.hits, 20);
}

// vLLM's PrefillStats.finalize: with the first generated token, the prompt tokens in full
// blocks now cached less the hits (the last partial block does not count); later outputs
// repeat it. A chunked prefill counts all its chunks; without prefix caching it is 0.
TEST_F(SchedulerTest, CacheCreationTokensAreThePromptsNewlyCachedFullBlocks) {
  Init(Config());  // blocks of 4, a budget of 64 tokens: a 70-token prompt takes two steps
  Add(MakeRequest("long", 70, 3));
  RunToCompletion();
  EXPECT_EQ(created_["long"], (std::vector<int32_t>{68, 68, 68}));  // 17 full blocks
  EXPECT_EQ(cached_["long"], 0);
  auto again = MakeRequest("again", 74, 2);
  again.prompt_token_ids = testing::MakePrompt("long", 70);
  for (int32_t t : {1, 2, 3, 4}) again.prompt_token_ids.push_back(t);
  Add(again);
  RunToCompletion();
  EXPECT_EQ(cached_["again"], 68);
  EXPECT_EQ(created_["again"], (std::vector<int32_t>{4, 4}));  // block 18 (tokens 68..71)

  SchedulerSetup off = Config();
  off.config.cache.enable_prefix_caching = false;
  Init(off);
  created_.clear();
  Add(MakeRequest("long", 70, 2));
  RunToCompletion();
  EXPECT_EQ(created_["long"], (std::vector<int32_t>{0, 0}));
}

TEST_F(SchedulerTest, PrefixCacheRespectsCacheSalt) {
  Init(Config());
  auto a = MakeRequest("a", 20, 1);
  a.cache_salt = "x";
  Add(a);
  RunToCompletion();
  auto b = MakeRequest("b", 22, 1);
  b.prompt_token_ids = testing::MakePrompt("a", 22);
  b.cache_salt = "y";
  Add(b);
  EXPECT_EQ(Step().scheduled_new_reqs[0].num_computed_tokens, 0);
  auto c = MakeRequest("c", 22, 1);
  c.prompt_token_ids = testing::MakePrompt("a", 22);
  c.cache_salt = "x";
  Add(c);
  EXPECT_EQ(Step().scheduled_new_reqs[0].num_computed_tokens, 20);
}

// Two requests outgrow a small cache; the later one is preempted, resumes, and every
// request still produces exactly the tokens of an unconstrained run.
TEST_F(SchedulerTest, PreemptionByRecomputeReproducesTokens) {
  SchedulerSetup c = Config();
  c.config.model.max_model_len = 64;
  c.kv_cache.num_blocks = 16;  // 64 tokens: both requests cannot reach their max at once
  Init(c);
  Add(MakeRequest("a", 10, 40));
  Add(MakeRequest("b", 12, 40));
  int64_t preemptions = 0;
  bool saw_resume = false;
  for (int i = 0; i < 500 && scheduler_->HasUnfinishedRequests(); ++i) {
    SchedulerOutput so = Step();
    if (!so.preempted_req_ids.empty()) {
      EXPECT_EQ(so.preempted_req_ids, std::vector<std::string>{"b"});  // fcfs: the last
    }
    for (uint8_t resumed : so.scheduled_cached_reqs.resumed_from_preemption) {
      saw_resume |= resumed != 0;
    }
    preemptions += scheduler_->MakeStats().num_preemptions;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_TRUE(saw_resume);
  EXPECT_EQ(tokens_["a"], Expected("a", 10, 40));
  EXPECT_EQ(tokens_["b"], Expected("b", 12, 40));
  EXPECT_EQ(scheduler_->kv_cache_manager().block_pool().GetNumFreeBlocks(), 16);
}

TEST_F(SchedulerTest, PriorityPolicyPreemptsTheLowestPriority) {
  SchedulerSetup c = Config();
  c.config.scheduler.policy = SchedulingPolicy::kPriority;
  c.config.model.max_model_len = 32;
  c.kv_cache.num_blocks = 8;  // 32 tokens
  c.config.cache.block_size = 4;
  Init(c);
  // Each prompt takes 2 blocks, then a 3rd at the first decode... 3 requests x 2 = 6 blocks.
  Add(MakeRequest("high", 8, 20, /*priority=*/0, 1.0));
  Add(MakeRequest("low", 8, 20, /*priority=*/5, 2.0));
  Add(MakeRequest("mid", 8, 20, /*priority=*/1, 3.0));
  std::vector<std::string> preempted;
  for (int i = 0; i < 200 && scheduler_->HasUnfinishedRequests(); ++i) {
    SchedulerOutput so = Step();
    preempted.insert(preempted.end(), so.preempted_req_ids.begin(), so.preempted_req_ids.end());
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), "low");
  EXPECT_EQ(tokens_["high"], Expected("high", 8, 20));
  EXPECT_EQ(tokens_["mid"], Expected("mid", 8, 20));
  EXPECT_EQ(tokens_["low"], Expected("low", 8, 20));
}

TEST_F(SchedulerTest, PriorityPolicyAdmitsByPriorityThenArrival) {
  SchedulerSetup c = Config();
  c.config.scheduler.policy = SchedulingPolicy::kPriority;
  c.config.scheduler.max_num_seqs = 1;
  Init(c);
  Add(MakeRequest("late_low", 4, 1, 3, 1.0));
  Add(MakeRequest("early_high", 4, 1, 1, 2.0));
  Add(MakeRequest("late_high", 4, 1, 1, 3.0));
  EXPECT_EQ(Step().scheduled_new_reqs[0].req_id, "early_high");
  EXPECT_EQ(Step().scheduled_new_reqs[0].req_id, "late_high");
  EXPECT_EQ(Step().scheduled_new_reqs[0].req_id, "late_low");
}

TEST_F(SchedulerTest, AbortFreesBlocksOfRunningAndWaitingRequests) {
  SchedulerSetup c = Config();
  c.config.scheduler.max_num_seqs = 1;
  Init(c);
  Add(MakeRequest("run", 30));
  Add(MakeRequest("wait", 30));
  Step();
  const int32_t total = scheduler_->kv_cache_manager().block_pool().num_blocks();
  EXPECT_LT(scheduler_->kv_cache_manager().block_pool().GetNumFreeBlocks(), total);
  const std::vector<std::string> ids = {"run", "wait", "unknown"};
  scheduler_->FinishRequests(ids, RequestStatus::kFinishedAborted);
  EXPECT_EQ(scheduler_->kv_cache_manager().block_pool().GetNumFreeBlocks(), total);
  EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
  EXPECT_TRUE(scheduler_->HasRequests());  // the workers must still hear about them
  SchedulerOutput so = scheduler_->Schedule();
  EXPECT_EQ(so.finished_req_ids, (std::vector<std::string>{"run", "wait"}));
  EXPECT_EQ(so.total_num_scheduled_tokens, 0);
  EXPECT_FALSE(scheduler_->HasRequests());
}

TEST_F(SchedulerTest, OutputOfAnAbortedRequestIsDropped) {
  Init(Config());
  Add(MakeRequest("a", 4));
  SchedulerOutput so = scheduler_->Schedule();
  ModelRunnerOutput mro = model_->Run(so);
  const std::vector<std::string> ids = {"a"};
  scheduler_->FinishRequests(ids, RequestStatus::kFinishedAborted);
  auto outs = scheduler_->UpdateFromOutput(so, mro);
  ASSERT_TRUE(outs.ok());
  EXPECT_TRUE(outs->outputs.empty());
}

TEST_F(SchedulerTest, StopsAtMaxTokens) {
  Init(Config());
  Add(MakeRequest("a", 4, 5));
  RunToCompletion();
  EXPECT_EQ(tokens_["a"].size(), 5u);
  EXPECT_EQ(finish_["a"], FinishReason::kLength);
}

TEST_F(SchedulerTest, StopsAtMaxModelLen) {
  SchedulerSetup c = Config();
  c.config.model.max_model_len = 20;
  Init(c);
  Add(MakeRequest("a", 15, std::nullopt));
  RunToCompletion();
  EXPECT_EQ(tokens_["a"].size(), 5u);
  EXPECT_EQ(finish_["a"], FinishReason::kLength);
}

TEST_F(SchedulerTest, StopsAtEosUnlessIgnored) {
  // The model emits EOS as its third token.
  auto fn = [](const std::string& id, int32_t pos) { return pos == 6 ? kEos : 100 + pos; };
  Init(Config(), fn);
  Add(MakeRequest("eos", 4, 10));
  auto ignore = MakeRequest("ignore", 4, 10);
  ignore.sampling_params.ignore_eos = true;
  Add(ignore);
  RunToCompletion();
  EXPECT_EQ(tokens_["eos"], (std::vector<int32_t>{104, 105, kEos}));
  EXPECT_EQ(finish_["eos"], FinishReason::kStop);
  EXPECT_EQ(stop_reason_["eos"], std::nullopt);
  EXPECT_EQ(tokens_["ignore"].size(), 10u);
  EXPECT_EQ(finish_["ignore"], FinishReason::kLength);
}

TEST_F(SchedulerTest, StopsAtStopTokenIdsWithStopReason) {
  auto fn = [](const std::string& id, int32_t pos) { return 100 + pos; };
  Init(Config(), fn);
  auto r = MakeRequest("a", 4, 10);
  r.sampling_params.stop_token_ids = {106, 999};
  Add(r);
  RunToCompletion();
  EXPECT_EQ(tokens_["a"], (std::vector<int32_t>{104, 105, 106}));
  EXPECT_EQ(finish_["a"], FinishReason::kStop);
  EXPECT_EQ(stop_reason_["a"], 106);
}

TEST_F(SchedulerTest, MinTokensSuppressesStops) {
  auto fn = [](const std::string& id, int32_t pos) { return pos < 8 ? kEos : 100 + pos; };
  Init(Config(), fn);
  auto r = MakeRequest("a", 4, 10);
  r.sampling_params.min_tokens = 3;
  Add(r);
  RunToCompletion();
  // EOS at outputs 1 and 2 is ignored; the third output (EOS again) stops.
  EXPECT_EQ(tokens_["a"], (std::vector<int32_t>{kEos, kEos, kEos}));
  EXPECT_EQ(finish_["a"], FinishReason::kStop);
}

TEST_F(SchedulerTest, BadModelOutputIsRejectedWithoutStateChange) {
  Init(Config());
  Add(MakeRequest("a", 4));
  SchedulerOutput so = scheduler_->Schedule();
  ModelRunnerOutput empty;
  EXPECT_TRUE(absl::IsInvalidArgument(scheduler_->UpdateFromOutput(so, empty).status()));
  ModelRunnerOutput negative;
  negative.req_ids = {"a"};
  negative.sampled_token_ids = {{-1}};
  EXPECT_TRUE(absl::IsInvalidArgument(scheduler_->UpdateFromOutput(so, negative).status()));
  EXPECT_EQ(scheduler_->GetRequest("a")->num_tokens(), 4);
  // The good output still applies.
  auto outs = scheduler_->UpdateFromOutput(so, model_->Run(so));
  ASSERT_TRUE(outs.ok());
  EXPECT_EQ(outs->outputs.size(), 1u);
}

TEST_F(SchedulerTest, ModelOutputInAnotherOrderIsMatchedById) {
  Init(Config());
  Add(MakeRequest("a", 4));
  Add(MakeRequest("b", 4));
  SchedulerOutput so = scheduler_->Schedule();
  ModelRunnerOutput mro = model_->Run(so);
  std::swap(mro.req_ids[0], mro.req_ids[1]);
  std::swap(mro.sampled_token_ids[0], mro.sampled_token_ids[1]);
  auto outs = scheduler_->UpdateFromOutput(so, mro);
  ASSERT_TRUE(outs.ok());
  for (const auto& o : outs->outputs) {
    EXPECT_EQ(std::vector<int32_t>(o.new_token_ids.begin(), o.new_token_ids.end()),
              Expected(o.request_id, 4, 1));
  }
}

// The worker's prompt logprobs reach the output with the request's first token only, and never
// for a request that did not ask for them; such a request never takes a prefix-cache hit.
TEST_F(SchedulerTest, PromptLogprobsGoWithTheFirstTokenOnly) {
  SchedulerSetup config = Config();
  config.config.cache.enable_prefix_caching = true;
  Init(config);
  Add(MakeRequest("warm", 12));
  RunToCompletion();
  EngineCoreRequest wants = MakeRequest("wants", 12, 3);
  wants.prompt_token_ids = MakeRequest("warm", 12).prompt_token_ids;  // fully cached prefix
  wants.sampling_params.prompt_logprobs = 1;
  Add(wants);
  Add(MakeRequest("plain", 5, 3));
  const std::vector<TokenLogprobs> prompt(11, TokenLogprobs{{7, 3}, {-2.0f, -0.5f}, 4});
  for (int step = 0; step < 3; ++step) {
    SchedulerOutput so = scheduler_->Schedule();
    ModelRunnerOutput mro = model_->Run(so);
    mro.prompt_logprobs.assign(mro.req_ids.size(), prompt);  // as if every step sent them
    auto outs = scheduler_->UpdateFromOutput(so, mro);
    ASSERT_TRUE(outs.ok()) << outs.status();
    for (const EngineCoreOutput& o : outs->outputs) {
      SCOPED_TRACE(o.request_id + " step " + std::to_string(step));
      if (o.request_id == "wants" && step == 0) {
        EXPECT_EQ(o.prompt_logprobs, prompt);
        EXPECT_EQ(o.num_cached_tokens, 0);  // the cached prefix was not read
      } else {
        EXPECT_TRUE(o.prompt_logprobs.empty());
      }
    }
  }
}

TEST_F(SchedulerTest, StatsReportQueuesUsageAndResetCounters) {
  SchedulerSetup c = Config();
  c.config.scheduler.max_num_seqs = 1;
  Init(c);
  Add(MakeRequest("a", 8));
  Add(MakeRequest("b", 8));
  Step();
  SchedulerStats stats = scheduler_->MakeStats();
  EXPECT_EQ(stats.num_running_reqs, 1);
  EXPECT_EQ(stats.num_waiting_reqs, 1);
  EXPECT_GT(stats.kv_cache_usage, 0.0);
  EXPECT_EQ(stats.prefix_cache_stats.requests, 1);
  EXPECT_EQ(scheduler_->MakeStats().prefix_cache_stats.requests, 0);
}

}  // namespace
}  // namespace vllm::core
