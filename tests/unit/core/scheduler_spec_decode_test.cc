// Speculative decoding in the scheduler: drafts from a proposer are scheduled after the last
// sampled token, the worker's accepted prefix and bonus token are applied, rejected drafts'
// positions are computed again, and the output is token-identical to decoding without drafts.
// The worker is a fake that verifies drafts against the scripted model (exact match, as greedy
// verification does); the proposer is a fake whose drafts are right for a chosen prefix.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "core_test_util.h"
#include "gtest/gtest.h"

namespace vllm::core {
namespace {

using testing::MakeRequest;
using testing::ScriptedToken;

// Drafts the scripted model's next tokens, the first `num_right` of them right and the rest
// wrong (a token the model never samples: below 10).
class FakeProposer final : public spec_decode::Proposer {
 public:
  explicit FakeProposer(int32_t num_right) : num_right_(num_right) {}

  void Propose(std::span<const spec_decode::ProposeRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override {
    drafts->assign(requests.size(), {});
    for (size_t i = 0; i < requests.size(); ++i) {
      const spec_decode::ProposeRequest& r = requests[i];
      max_draft_seen_ = std::max(max_draft_seen_, r.max_draft_tokens);
      const auto n = static_cast<int32_t>(r.token_ids.size());
      for (int32_t j = 0; j < r.max_draft_tokens; ++j) {
        (*drafts)[i].push_back(j < num_right_ ? ScriptedToken(std::string(r.request_id), n + j)
                                              : 3);
      }
    }
  }
  void OnRequestFinished(std::string_view request_id, std::span<const int32_t> /*token_ids*/,
                         int32_t /*num_prompt_tokens*/) override {
    finished_.emplace_back(request_id);
  }

  int32_t max_draft_seen_ = 0;
  std::vector<std::string> finished_;

 private:
  const int32_t num_right_;
};

// A worker that knows drafts: it checks the scheduled tokens against what it knows, accepts
// drafts while they equal the scripted model's tokens, and returns them plus the next token.
class VerifyingModel {
 public:
  ModelRunnerOutput Run(const SchedulerOutput& original) {
    auto decoded = DecodeSchedulerOutput(Encode(original));
    if (!decoded.ok()) {
      ADD_FAILURE() << decoded.status();
      return {};
    }
    const SchedulerOutput& so = *decoded;
    EXPECT_EQ(so, original) << "SchedulerOutput changed through the codec";
    for (const std::string& id : so.finished_req_ids) tokens_.erase(id);
    for (const std::string& id : so.preempted_req_ids) tokens_.erase(id);
    ModelRunnerOutput out;
    size_t i = 0;
    auto spec = [&](size_t index) {
      return so.num_scheduled_spec_tokens.empty() ? 0 : so.num_scheduled_spec_tokens[index];
    };
    for (const NewRequestData& d : so.scheduled_new_reqs) {
      EXPECT_EQ(spec(i), 0) << "a new request has no drafts";
      tokens_[d.req_id] = d.prompt_token_ids;
      Sample(d.req_id, d.num_computed_tokens + so.num_scheduled_tokens[i], {}, &out);
      ++i;
    }
    const CachedRequestData& c = so.scheduled_cached_reqs;
    for (size_t j = 0; j < c.size(); ++j, ++i) {
      auto ids = c.new_token_ids_of(j);
      std::vector<int32_t>& known = tokens_[c.req_ids[j]];
      if (c.resumed_from_preemption[j]) known.assign(ids.begin(), ids.end());
      const int32_t num_spec = spec(i);
      const int32_t nc = c.num_computed_tokens[j];
      // The real tokens fed must be the ones this worker knows (a resumed request sends all).
      const size_t first = c.resumed_from_preemption[j] ? 0 : static_cast<size_t>(nc);
      for (size_t t = 0; t + num_spec < ids.size(); ++t) {
        EXPECT_EQ(ids[t], known[first + t]) << c.req_ids[j] << " position " << first + t;
      }
      const std::vector<int32_t> drafts(ids.end() - num_spec, ids.end());
      if (num_spec > 0) {
        EXPECT_EQ(nc + static_cast<int32_t>(ids.size()) - num_spec,
                  static_cast<int32_t>(known.size()))
            << "drafts must follow every known token";
        ++steps_with_drafts_;
      }
      Sample(c.req_ids[j], nc + so.num_scheduled_tokens[i] - num_spec, drafts, &out);
    }
    if (worker_drafts_ > 0) {
      // A draft in the worker (eagle, medusa, draft_model): k drafts after each sampled token,
      // the first worker_right_ of them right.
      out.draft_token_ids.resize(out.req_ids.size());
      for (size_t r = 0; r < out.req_ids.size(); ++r) {
        if (out.sampled_token_ids[r].empty()) continue;
        const std::string& id = out.req_ids[r];
        const auto n = static_cast<int32_t>(tokens_[id].size());
        for (int32_t j = 0; j < worker_drafts_; ++j) {
          out.draft_token_ids[r].push_back(j < worker_right_ ? ScriptedToken(id, n + j) : 3);
        }
      }
    }
    return out;
  }

  int steps_with_drafts_ = 0;
  int32_t worker_drafts_ = 0;  // drafts the worker returns per sampled request
  int32_t worker_right_ = 0;

 private:
  void Sample(const std::string& id, int32_t end, const std::vector<int32_t>& drafts,
              ModelRunnerOutput* out) {
    std::vector<int32_t>& tokens = tokens_[id];
    out->req_ids.push_back(id);
    auto& sampled = out->sampled_token_ids.emplace_back();
    if (end < static_cast<int32_t>(tokens.size())) return;  // mid-way through a prefill
    for (int32_t d : drafts) {
      const int32_t want = ScriptedToken(id, static_cast<int32_t>(tokens.size()));
      if (d != want) break;
      tokens.push_back(d);
      sampled.push_back(d);
    }
    const int32_t next = ScriptedToken(id, static_cast<int32_t>(tokens.size()));
    tokens.push_back(next);
    sampled.push_back(next);
  }

  std::map<std::string, std::vector<int32_t>> tokens_;
};

class SchedulerSpecDecodeTest : public ::testing::Test {
 protected:
  void Init(int32_t k, int32_t num_right, int32_t budget = 64, int32_t num_blocks = 1000,
            int32_t max_model_len = 256) {
    testing::SchedulerSetup c;
    c.config.scheduler.max_num_seqs = 16;
    c.config.scheduler.max_num_batched_tokens = budget;
    c.config.model.max_model_len = max_model_len;
    c.config.cache.block_size = 4;
    c.config.cache.enable_prefix_caching = true;
    c.config.speculative.method = "ngram";
    c.config.speculative.num_speculative_tokens = k;
    c.kv_cache.num_blocks = num_blocks;
    proposer_ = std::make_unique<FakeProposer>(num_right);
    auto s = Scheduler::Create(c.config, c.kv_cache, nullptr, proposer_.get());
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
  }
  void Add(EngineCoreRequest r) { ASSERT_TRUE(scheduler_->AddRequest(std::move(r)).ok()); }
  void RunToCompletion() {
    for (int i = 0; i < 10000 && scheduler_->HasUnfinishedRequests(); ++i) {
      SchedulerOutput so = scheduler_->Schedule();
      auto outs = scheduler_->UpdateFromOutput(so, model_.Run(so));
      ASSERT_TRUE(outs.ok()) << outs.status();
      ++steps_;
      for (const EngineCoreOutput& o : outs->outputs) {
        auto& tokens = tokens_[o.request_id];
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished()) finish_[o.request_id] = *o.finish_reason;
      }
      stats_ += scheduler_->MakeStats().spec_decoding_stats;
    }
    ASSERT_FALSE(scheduler_->HasUnfinishedRequests());
  }
  static std::vector<int32_t> Expected(const std::string& id, int32_t prompt_len, int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(ScriptedToken(id, prompt_len + i));
    return t;
  }

  std::unique_ptr<FakeProposer> proposer_;
  std::unique_ptr<Scheduler> scheduler_;
  VerifyingModel model_;
  std::map<std::string, std::vector<int32_t>> tokens_;
  std::map<std::string, FinishReason> finish_;
  spec_decode::SpecDecodingStats stats_;
  int steps_ = 0;
};

TEST_F(SchedulerSpecDecodeTest, RightDraftsAreAcceptedAndSaveSteps) {
  Init(/*k=*/3, /*num_right=*/3);
  Add(MakeRequest("a", 10, 21));
  RunToCompletion();
  EXPECT_EQ(tokens_["a"], Expected("a", 10, 21));
  EXPECT_EQ(finish_["a"], FinishReason::kLength);
  // The prefill samples 1 token, then each step 4: 1 + 5 × 4 = 21.
  EXPECT_EQ(steps_, 6);
  EXPECT_EQ(stats_.num_drafts, 5);
  EXPECT_EQ(stats_.num_draft_tokens, 15);
  EXPECT_EQ(stats_.num_accepted_tokens, 15);
  EXPECT_EQ(stats_.num_accepted_tokens_per_pos, (std::vector<int64_t>{5, 5, 5}));
  EXPECT_EQ(proposer_->finished_, std::vector<std::string>{"a"});
}

TEST_F(SchedulerSpecDecodeTest, WrongDraftsAreRejectedAndTheOutputIsUnchanged) {
  Init(/*k=*/4, /*num_right=*/1);
  Add(MakeRequest("a", 9, 13));
  Add(MakeRequest("b", 5, 11));
  RunToCompletion();
  EXPECT_EQ(tokens_["a"], Expected("a", 9, 13));
  EXPECT_EQ(tokens_["b"], Expected("b", 5, 11));
  EXPECT_GT(stats_.num_drafts, 0);
  // One right token per draft, then a wrong one: exactly one accepted per draft.
  EXPECT_EQ(stats_.num_accepted_tokens, stats_.num_drafts);
  EXPECT_EQ(stats_.num_accepted_tokens_per_pos[1], 0);
}

TEST_F(SchedulerSpecDecodeTest, DraftsFitMaxTokensAndMaxModelLen) {
  Init(/*k=*/8, /*num_right=*/8, /*budget=*/64, /*num_blocks=*/1000, /*max_model_len=*/20);
  Add(MakeRequest("a", 10, 4));             // room for 2 drafts after the first token
  Add(MakeRequest("b", 12, std::nullopt));  // until max_model_len
  RunToCompletion();
  EXPECT_EQ(tokens_["a"], Expected("a", 10, 4));
  EXPECT_EQ(tokens_["b"], Expected("b", 12, 8));
  EXPECT_EQ(finish_["a"], FinishReason::kLength);
  EXPECT_EQ(finish_["b"], FinishReason::kLength);
  EXPECT_LE(proposer_->max_draft_seen_, 6);  // b: 20 - 13 - 1
}

TEST_F(SchedulerSpecDecodeTest, TheTokenBudgetCutsDrafts) {
  // 6 decoding requests with 4 drafts each want 30 tokens a step; the budget is 8.
  Init(/*k=*/4, /*num_right=*/4, /*budget=*/8);
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) Add(MakeRequest(id, 3, 9));
  RunToCompletion();
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) {
    EXPECT_EQ(tokens_[id], Expected(id, 3, 9)) << id;
  }
  EXPECT_GT(model_.steps_with_drafts_, 0);
}

TEST_F(SchedulerSpecDecodeTest, PreemptionWithDraftsKeepsTheOutput) {
  // 10 blocks of 4 tokens for 4 requests that grow to 26 tokens each: some are preempted.
  Init(/*k=*/3, /*num_right=*/2, /*budget=*/64, /*num_blocks=*/10, /*max_model_len=*/40);
  for (const char* id : {"a", "b", "c", "d"}) Add(MakeRequest(id, 6, 20));
  RunToCompletion();
  for (const char* id : {"a", "b", "c", "d"}) {
    EXPECT_EQ(tokens_[id], Expected(id, 6, 20)) << id;
  }
}

TEST_F(SchedulerSpecDecodeTest, MoreTokensThanDraftsAllowIsRefused) {
  Init(/*k=*/1, /*num_right=*/1);
  Add(MakeRequest("a", 4, 10));
  SchedulerOutput so = scheduler_->Schedule();
  ASSERT_TRUE(scheduler_->UpdateFromOutput(so, model_.Run(so)).ok());
  so = scheduler_->Schedule();  // one draft scheduled
  ASSERT_EQ(so.num_scheduled_spec_tokens, std::vector<int32_t>{1});
  ModelRunnerOutput bad;
  bad.req_ids = {"a"};
  bad.sampled_token_ids = {{11, 12, 13}};
  auto result = scheduler_->UpdateFromOutput(so, bad);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  // Nothing changed: the real output still applies.
  EXPECT_TRUE(scheduler_->UpdateFromOutput(so, model_.Run(so)).ok());
}

TEST_F(SchedulerSpecDecodeTest, DraftsFromTheWorkerAreScheduledWithLookaheadSlots) {
  testing::SchedulerSetup c;
  c.config.scheduler.max_num_batched_tokens = 64;
  c.config.model.max_model_len = 256;
  c.config.cache.block_size = 4;
  c.config.speculative.method = "eagle";
  c.config.speculative.model = "head";
  c.config.speculative.num_speculative_tokens = 3;
  c.kv_cache.num_blocks = 1000;
  auto s = Scheduler::Create(c.config, c.kv_cache, nullptr, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  scheduler_ = std::move(*s);
  model_.worker_drafts_ = 3;
  model_.worker_right_ = 2;
  Add(MakeRequest("a", 10, 16));
  SchedulerOutput first = scheduler_->Schedule();
  // 10 prompt tokens and 3 lookahead slots for the draft's own positions: 4 blocks of 4.
  ASSERT_EQ(first.scheduled_new_reqs.size(), 1u);
  EXPECT_EQ(first.scheduled_new_reqs[0].block_ids.size(), 4u);
  auto outs = scheduler_->UpdateFromOutput(first, model_.Run(first));
  ASSERT_TRUE(outs.ok()) << outs.status();
  for (const EngineCoreOutput& o : outs->outputs) {
    tokens_[o.request_id].insert(tokens_[o.request_id].end(), o.new_token_ids.begin(),
                                 o.new_token_ids.end());
  }
  SchedulerOutput second = scheduler_->Schedule();
  EXPECT_EQ(second.num_scheduled_spec_tokens, std::vector<int32_t>{3}) << "the worker's drafts";
  outs = scheduler_->UpdateFromOutput(second, model_.Run(second));
  ASSERT_TRUE(outs.ok()) << outs.status();
  for (const EngineCoreOutput& o : outs->outputs) {
    tokens_[o.request_id].insert(tokens_[o.request_id].end(), o.new_token_ids.begin(),
                                 o.new_token_ids.end());
  }
  RunToCompletion();
  EXPECT_EQ(tokens_["a"], Expected("a", 10, 16));
  // Two of every three drafts are right (fewer where max_tokens cuts the drafts).
  EXPECT_GT(stats_.num_drafts, 0);
  EXPECT_GT(stats_.num_accepted_tokens, 0);
  EXPECT_LE(stats_.num_accepted_tokens, 2 * stats_.num_drafts);
  EXPECT_EQ(
      stats_.num_accepted_tokens_per_pos.size() > 2 ? stats_.num_accepted_tokens_per_pos[2] : 0, 0);

  // A negative draft id is a bad output, refused before anything changes.
  Add(MakeRequest("b", 4, 8));
  SchedulerOutput so = scheduler_->Schedule();
  ModelRunnerOutput bad = model_.Run(so);
  bad.draft_token_ids.assign(bad.req_ids.size(), {-5});
  EXPECT_EQ(scheduler_->UpdateFromOutput(so, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// vLLM's dynamic speculative decoding: with the schedule [[1,1,3],[2,16,0]] a lone request gets
// drafts and two running together get none; the output is the same either way.
TEST_F(SchedulerSpecDecodeTest, TheDynamicScheduleSetsKByBatchSize) {
  testing::SchedulerSetup c;
  c.config.scheduler.max_num_seqs = 16;
  c.config.scheduler.max_num_batched_tokens = 64;
  c.config.model.max_model_len = 256;
  c.config.cache.block_size = 4;
  c.config.speculative.method = "ngram";
  c.config.speculative.num_speculative_tokens = 3;
  c.config.speculative.prompt_lookup_min = 1;
  c.config.speculative.prompt_lookup_max = 3;
  c.config.speculative.num_speculative_tokens_per_batch_size = "[[1,1,3],[2,16,0]]";
  ASSERT_TRUE(c.config.speculative.Validate().ok()) << c.config.speculative.Validate();
  c.kv_cache.num_blocks = 1000;
  proposer_ = std::make_unique<FakeProposer>(3);
  auto s = Scheduler::Create(c.config, c.kv_cache, nullptr, proposer_.get());
  ASSERT_TRUE(s.ok()) << s.status();
  scheduler_ = std::move(*s);
  Add(MakeRequest("a", 6, 10));
  Add(MakeRequest("b", 6, 30));
  int32_t steps_with_two = 0, drafts_with_two = 0, drafts_alone = 0;
  for (int i = 0; i < 200 && scheduler_->HasUnfinishedRequests(); ++i) {
    SchedulerOutput so = scheduler_->Schedule();
    const size_t batch = so.num_scheduled_tokens.size();
    EXPECT_EQ(so.num_spec_tokens_to_schedule, batch == 1 ? 3 : 0) << "batch of " << batch;
    int32_t drafts = 0;
    for (int32_t d : so.num_scheduled_spec_tokens) drafts += d;
    if (batch == 2) {
      ++steps_with_two;
      drafts_with_two += drafts;
    } else {
      drafts_alone += drafts;
    }
    auto outs = scheduler_->UpdateFromOutput(so, model_.Run(so));
    ASSERT_TRUE(outs.ok()) << outs.status();
    for (const EngineCoreOutput& o : outs->outputs) {
      tokens_[o.request_id].insert(tokens_[o.request_id].end(), o.new_token_ids.begin(),
                                   o.new_token_ids.end());
    }
  }
  EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
  EXPECT_EQ(tokens_["a"], Expected("a", 6, 10));
  EXPECT_EQ(tokens_["b"], Expected("b", 6, 30));
  EXPECT_GT(steps_with_two, 2);
  // Drafts proposed after a step of two are none; after b runs alone, they come.
  EXPECT_EQ(drafts_with_two, 0);
  EXPECT_GT(drafts_alone, 0);
}

TEST_F(SchedulerSpecDecodeTest, NoProposerMeansNoDrafts) {
  testing::SchedulerSetup c;
  c.config.cache.block_size = 4;
  c.config.model.max_model_len = 64;
  c.kv_cache.num_blocks = 100;
  auto s = Scheduler::Create(c.config, c.kv_cache, nullptr, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->AddRequest(MakeRequest("a", 4, 5)).ok());
  for (int i = 0; i < 20 && (*s)->HasUnfinishedRequests(); ++i) {
    SchedulerOutput so = (*s)->Schedule();
    EXPECT_TRUE(so.num_scheduled_spec_tokens.empty());
    ASSERT_TRUE((*s)->UpdateFromOutput(so, model_.Run(so)).ok());
  }
  EXPECT_FALSE((*s)->HasUnfinishedRequests());
}

}  // namespace
}  // namespace vllm::core
