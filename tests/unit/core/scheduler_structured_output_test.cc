// The scheduler with structured outputs (vLLM's WAITING_FOR_FSM, get_grammar_bitmask and the
// grammar advance in update_from_output), with a real StructuredOutputManager over the bundled
// model's tokenizer and a fake model that samples under the step's bitmask row.
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "core_test_util.h"
#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "structured_output/manager.h"

namespace vllm::core {
namespace {

using structured_output::StructuredOutputManager;
using structured_output::StructuredOutputsParams;

constexpr int32_t kVocab = 4096;
constexpr int32_t kModelEos = 1;  // the bundled model's <|end_of_text|>

std::filesystem::path ModelDir() {
  return std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
}

class SchedulerStructuredOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StructuredOutputManager::Options options;
    options.model_dir = ModelDir();
    options.vocab_size = kVocab;
    options.stop_token_ids = {kModelEos};
    options.max_compile_seconds = 30;
    options.reasoning = reasoning_;
    manager_ = std::make_unique<StructuredOutputManager>(options);
    testing::SchedulerSetup setup;
    setup.kv_cache.num_blocks = num_blocks_;
    setup.config.model.max_model_len = max_model_len_;
    setup.config.scheduler.max_num_batched_tokens = budget_;
    if (proposer_ != nullptr) {
      setup.config.speculative.method = "ngram";
      setup.config.speculative.num_speculative_tokens = num_spec_tokens_;
    }
    auto scheduler = Scheduler::Create(setup.config, setup.kv_cache, manager_.get(), proposer_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
    auto tokenizer = frontend::Tokenizer::Load(ModelDir());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }

  EngineCoreRequest Constrained(const std::string& id, StructuredOutputsParams so) {
    EngineCoreRequest r = testing::MakeRequest(id, 8, 64);
    for (int32_t& t : r.prompt_token_ids) t %= kVocab;
    r.eos_token_id = kModelEos;
    r.sampling_params.structured_outputs = std::move(so);
    return r;
  }

  // One step: the fake model samples, for a request with a bitmask row, the highest allowed
  // token (never the EOS while another is allowed), else free_token_ of the request (token 100
  // unless a test sets it). Each sample is recorded in samples_. Returns the outputs.
  EngineCoreOutputs Step(SchedulerOutput* so_out = nullptr) {
    SchedulerOutput so = scheduler_->Schedule();
    auto decoded = DecodeSchedulerOutput(Encode(so));  // the bitmask survives the wire
    EXPECT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, so);
    const size_t words = static_cast<size_t>((kVocab + 31) / 32);
    ModelRunnerOutput out;
    for (size_t i = 0; i < so.num_scheduled_reqs(); ++i) {
      const std::string& id = so.scheduled_req_id(i);
      out.req_ids.push_back(id);
      auto& sampled = out.sampled_token_ids.emplace_back();
      const Request* r = scheduler_->GetRequest(id);
      const int32_t num_spec =
          so.num_scheduled_spec_tokens.empty() ? 0 : so.num_scheduled_spec_tokens[i];
      if (r == nullptr || r->num_computed_tokens - num_spec != r->num_tokens()) continue;
      int32_t token = free_token_ ? free_token_(*r) : 100;
      bool row = false;
      for (size_t k = 0; k < so.structured_output_indices.size(); ++k) {
        if (so.structured_output_indices[k] != static_cast<int32_t>(i)) continue;
        row = true;
        const int32_t* row = so.grammar_bitmask.data() + k * words;
        token = -1;
        for (int32_t t = kVocab - 1; t >= 0; --t) {
          if (((row[t / 32] >> (t % 32)) & 1) && (t != kModelEos || token < 0)) {
            if (t != kModelEos) {
              token = t;
              break;
            }
            token = t;
          }
        }
        break;  // with drafts, the first row is the last sampled token's (drafts rejected)
      }
      sampled.push_back(token);
      samples_[id].push_back({r->num_output_tokens(), row});
    }
    auto result = scheduler_->UpdateFromOutput(so, out);
    EXPECT_TRUE(result.ok()) << result.status();
    if (so_out != nullptr) *so_out = so;
    return result.ok() ? std::move(*result) : EngineCoreOutputs{};
  }

  // Steps until `id` finishes (deadline 30 s, 500 steps); its tokens and finish reason.
  std::pair<std::vector<int32_t>, std::optional<FinishReason>> RunToEnd(const std::string& id) {
    std::vector<int32_t> tokens;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int step = 0; step < 5000 && std::chrono::steady_clock::now() < deadline; ++step) {
      SchedulerOutput so;
      EngineCoreOutputs outputs = Step(&so);
      // Nothing ran while a grammar compiles: wait for it as the engine does.
      if (so.num_scheduled_reqs() == 0) manager_->WaitForCompiles(absl::Milliseconds(5));
      for (const EngineCoreOutput& o : outputs.outputs) {
        if (o.request_id != id) continue;
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finish_reason.has_value()) return {tokens, o.finish_reason};
      }
    }
    return {tokens, std::nullopt};
  }

  std::string Text(const std::vector<int32_t>& tokens) {
    return tokenizer_->Decode(tokens, /*skip_special_tokens=*/true);
  }

  struct Sample {
    int32_t output_index = 0;  // the request's output tokens before this one
    bool had_row = false;      // sampled under a bitmask row
  };
  std::map<std::string, std::vector<Sample>> samples_;
  std::function<int32_t(const Request&)> free_token_;
  std::optional<structured_output::ReasoningTokens> reasoning_;
  int32_t num_blocks_ = 1000;
  int32_t max_model_len_ = 8192;
  int32_t budget_ = 8192;
  spec_decode::Proposer* proposer_ = nullptr;  // speculative decoding when set
  int32_t num_spec_tokens_ = 0;
  std::unique_ptr<StructuredOutputManager> manager_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<frontend::Tokenizer> tokenizer_;
};

TEST_F(SchedulerStructuredOutputTest, RegexRequestWaitsForItsGrammarThenFollowsIt) {
  StructuredOutputsParams so;
  so.regex = "[a-z]{2,6}-[0-9]{3}";
  ASSERT_TRUE(scheduler_->AddRequest(Constrained("a", so)).ok());
  EXPECT_EQ(scheduler_->GetRequest("a")->status, RequestStatus::kWaitingForFsm);
  EXPECT_EQ(scheduler_->num_waiting_for_fsm(), 1u);
  ASSERT_TRUE(scheduler_->AddRequest(testing::MakeRequest("free", 8, 4)).ok());
  auto [tokens, reason] = RunToEnd("a");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);
  const std::string text = Text(tokens);
  EXPECT_TRUE(std::regex_match(text, std::regex("[a-z]{2,6}-[0-9]{3}"))) << text;
  EXPECT_EQ(scheduler_->num_waiting_for_fsm(), 0u);
}

TEST_F(SchedulerStructuredOutputTest, OnlyConstrainedSamplingRowsGetABitmask) {
  budget_ = 4;  // an 8-token prompt takes two chunks
  SetUp();
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"yes", "no"};
  ASSERT_TRUE(scheduler_->AddRequest(Constrained("c", so)).ok());
  // Wait for the grammar (the first steps may schedule nothing).
  SchedulerOutput first;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (first.num_scheduled_reqs() == 0 && std::chrono::steady_clock::now() < deadline) {
    Step(&first);
    if (first.num_scheduled_reqs() == 0) manager_->WaitForCompiles(absl::Milliseconds(5));
  }
  ASSERT_EQ(first.num_scheduled_reqs(), 1u);
  EXPECT_TRUE(first.structured_output_indices.empty()) << "a first prefill chunk samples nothing";
  SchedulerOutput second;
  Step(&second);
  ASSERT_EQ(second.structured_output_indices.size(), 1u);
  EXPECT_EQ(second.grammar_bitmask.size(), static_cast<size_t>((kVocab + 31) / 32));
  auto [tokens, reason] = RunToEnd("c");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);
}

// Proposes the same tokens for every request.
class FixedProposer final : public spec_decode::Proposer {
 public:
  explicit FixedProposer(std::vector<int32_t> draft) : draft_(std::move(draft)) {}
  void Propose(std::span<const spec_decode::ProposeRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override {
    drafts->assign(requests.size(), draft_);
  }
  void OnRequestFinished(std::string_view, std::span<const int32_t>, int32_t) override {}

 private:
  std::vector<int32_t> draft_;
};

bool Allowed(const int32_t* row, int32_t token) {
  return ((row[token / 32] >> (token % 32)) & 1) != 0;
}

TEST_F(SchedulerStructuredOutputTest, DraftsAreCutToWhatTheGrammarAcceptsAndGetARowEach) {
  const int32_t one = *tokenizer_->TokenToId("1");
  const int32_t two = *tokenizer_->TokenToId("2");
  const int32_t letter = *tokenizer_->TokenToId("a");
  // Two digits, then a letter the grammar refuses, then a digit past it.
  FixedProposer proposer({one, two, letter, one});
  proposer_ = &proposer;
  num_spec_tokens_ = 4;
  SetUp();
  StructuredOutputsParams so;
  so.regex = "[0-9]{12}";
  ASSERT_TRUE(scheduler_->AddRequest(Constrained("d", so)).ok());
  // The prefill (once the grammar compiled) samples the first digit.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (scheduler_->GetRequest("d")->num_output_tokens() == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    SchedulerOutput so_step;
    Step(&so_step);
    if (so_step.num_scheduled_reqs() == 0) manager_->WaitForCompiles(absl::Milliseconds(5));
  }
  ASSERT_EQ(scheduler_->GetRequest("d")->num_output_tokens(), 1);
  SchedulerOutput so_step = scheduler_->Schedule();
  ASSERT_EQ(so_step.num_scheduled_spec_tokens, std::vector<int32_t>{2});
  // Three rows (positions of the last token and the two drafts), consecutive.
  ASSERT_EQ(so_step.structured_output_indices, (std::vector<int32_t>{0, 0, 0}));
  const size_t words = static_cast<size_t>((kVocab + 31) / 32);
  ASSERT_EQ(so_step.grammar_bitmask.size(), 3 * words);
  for (size_t j = 0; j < 3; ++j) {
    const int32_t* row = so_step.grammar_bitmask.data() + j * words;
    EXPECT_TRUE(Allowed(row, one)) << j;
    EXPECT_FALSE(Allowed(row, letter)) << j;
  }
  // Both drafts accepted, then a third digit: the grammar takes all three.
  ModelRunnerOutput out;
  out.req_ids = {"d"};
  out.sampled_token_ids = {{one, two, two}};
  auto result = scheduler_->UpdateFromOutput(so_step, out);
  ASSERT_TRUE(result.ok()) << result.status();
  const Request* r = scheduler_->GetRequest("d");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->num_output_tokens(), 4);
  EXPECT_EQ(r->structured_output->grammar()->num_accepted_tokens(), 4);
  EXPECT_FALSE(r->is_finished());
  auto [tokens, reason] = RunToEnd("d");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);
}

TEST_F(SchedulerStructuredOutputTest, GrammarThatFailsToCompileFinishesTheRequestWithAnError) {
  StructuredOutputsParams so;
  so.grammar = "root ::= undefined_rule";
  ASSERT_TRUE(scheduler_->AddRequest(Constrained("bad", so)).ok());
  auto [tokens, reason] = RunToEnd("bad");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kError);
  EXPECT_TRUE(tokens.empty());
  EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
}

TEST_F(SchedulerStructuredOutputTest, AbortWhileCompiling) {
  StructuredOutputsParams so;
  so.json = R"({"type":"object","properties":{"a":{"type":"string"}}})";
  ASSERT_TRUE(scheduler_->AddRequest(Constrained("x", so)).ok());
  std::vector<std::string> ids = {"x"};
  scheduler_->FinishRequests(ids, RequestStatus::kFinishedAborted);
  EXPECT_EQ(scheduler_->num_waiting_for_fsm(), 0u);
  EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
}

// With a reasoning parser (vLLM's structured_outputs_config.reasoning_parser): <think> = 3000
// and </think> = 3001 of the test vocabulary. The fake model reasons kReasoningTokens tokens
// (200), then samples </think>, then follows the bitmask.
constexpr int32_t kThinkStart = 3000;
constexpr int32_t kThinkEnd = 3001;
constexpr int32_t kReasoningTokens = 30;
const char kRegex[] = "[a-z]{2,6}-[0-9]{3}";

class SchedulerReasoningTest : public SchedulerStructuredOutputTest {
 protected:
  void SetUp() override {
    reasoning_ = structured_output::ReasoningTokens{kThinkStart, kThinkEnd, {}, implicit_ends_};
    free_token_ = [](const Request& r) {
      if (r.structured_output == nullptr) return 100;
      const int32_t k = r.num_output_tokens();
      return k < kReasoningTokens ? 200 : k == kReasoningTokens ? kThinkEnd : 100;
    };
    SchedulerStructuredOutputTest::SetUp();
  }

  // A regex request whose prompt ends with `tail` (the rest: tokens 500.., no think token).
  EngineCoreRequest Reasoning(const std::string& id, std::vector<int32_t> tail,
                              int32_t max_tokens = 64) {
    StructuredOutputsParams so;
    so.regex = kRegex;
    EngineCoreRequest r = Constrained(id, so);
    for (size_t i = 0; i < r.prompt_token_ids.size(); ++i) {
      r.prompt_token_ids[i] = 500 + static_cast<int32_t>(i);
    }
    r.prompt_token_ids.insert(r.prompt_token_ids.end(), tail.begin(), tail.end());
    r.sampling_params.max_tokens = max_tokens;
    return r;
  }

  // Every sample of `id` had a bitmask row exactly when it came after the think-end token
  // (`first_constrained` is the first output index sampled under the grammar).
  void ExpectRowsFrom(const std::string& id, int32_t first_constrained) {
    ASSERT_FALSE(samples_[id].empty());
    for (const Sample& sample : samples_[id]) {
      EXPECT_EQ(sample.had_row, sample.output_index >= first_constrained)
          << "output token " << sample.output_index;
    }
  }

  // The text after the think-end token matches the regex; the tokens before it are the
  // reasoning.
  void ExpectReasonedThenFollowed(const std::vector<int32_t>& tokens) {
    ASSERT_GT(tokens.size(), static_cast<size_t>(kReasoningTokens + 1));
    EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + kReasoningTokens),
              std::vector<int32_t>(kReasoningTokens, 200));
    EXPECT_EQ(tokens[kReasoningTokens], kThinkEnd);
    const std::string text =
        Text(std::vector<int32_t>(tokens.begin() + kReasoningTokens + 1, tokens.end()));
    EXPECT_TRUE(std::regex_match(text, std::regex(kRegex))) << text;
  }

  std::vector<int32_t> implicit_ends_;  // qwen3's <tool_call> stand-ins
};

TEST_F(SchedulerReasoningTest, FreeWhileReasoningThenConstrainedAfterTheThinkEnd) {
  // DeepSeek-R1's template opens the reasoning in the prompt: "<think>\n".
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("r", {kThinkStart, 10})).ok());
  auto [tokens, reason] = RunToEnd("r");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);  // the grammar ended it, never refused a token
  ExpectReasonedThenFollowed(tokens);
  ExpectRowsFrom("r", kReasoningTokens + 1);
  EXPECT_FALSE(scheduler_->HasUnfinishedRequests());
}

TEST_F(SchedulerReasoningTest, APromptWithNeitherThinkTokenReasonsFirst) {
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("r", {})).ok());
  auto [tokens, reason] = RunToEnd("r");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);
  ExpectReasonedThenFollowed(tokens);
  ExpectRowsFrom("r", kReasoningTokens + 1);
}

TEST_F(SchedulerReasoningTest, APromptThatEndsTheReasoningIsConstrainedFromTheFirstToken) {
  // Qwen3 with enable_thinking=false: "<think>\n\n</think>\n\n" closes the prompt.
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("q", {kThinkStart, 10, kThinkEnd, 10})).ok());
  auto [tokens, reason] = RunToEnd("q");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);
  EXPECT_TRUE(std::regex_match(Text(tokens), std::regex(kRegex))) << Text(tokens);
  ExpectRowsFrom("q", 0);
}

TEST_F(SchedulerReasoningTest, PreemptedWhileReasoningKeepsTheGateRight) {
  // 8 blocks of 16 tokens: "b" (60-token prompt, 60 tokens out) and "r" outgrow the cache
  // while "r" reasons, and "r" (admitted last) is preempted and recomputed.
  num_blocks_ = 8;
  max_model_len_ = 128;
  SetUp();
  // Compile the grammar first (a prompt that ends the reasoning), so that "r" and "b" are
  // admitted in the same step, "r" last.
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("warm", {kThinkEnd}, 4)).ok());
  ASSERT_TRUE(RunToEnd("warm").second.has_value());
  ASSERT_TRUE(scheduler_->AddRequest(testing::MakeRequest("b", 60, 60)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("r", {kThinkStart}, 100)).ok());
  std::vector<int32_t> tokens;
  std::optional<FinishReason> reason;
  int32_t preempted_at = -1;  // r's output tokens when it was preempted
  bool preempted_reasoning = false;
  for (int step = 0; step < 1000 && !reason.has_value(); ++step) {
    SchedulerOutput so;
    EngineCoreOutputs outputs = Step(&so);
    for (const std::string& id : so.preempted_req_ids) {
      const Request* r = scheduler_->GetRequest(id);
      if (id != "r" || r == nullptr || preempted_at >= 0) continue;
      preempted_at = r->num_output_tokens();
      preempted_reasoning = !r->structured_output->reasoning_ended();
    }
    for (const EngineCoreOutput& o : outputs.outputs) {
      if (o.request_id != "r") continue;
      tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      reason = o.finish_reason;
    }
  }
  ASSERT_GE(preempted_at, 1) << "r was never preempted";
  EXPECT_TRUE(preempted_reasoning) << "preempted after " << preempted_at << " tokens";
  EXPECT_LT(preempted_at, kReasoningTokens);
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);
  ExpectReasonedThenFollowed(tokens);
  ExpectRowsFrom("r", kReasoningTokens + 1);
}

// qwen3's implicit end (<tool_call>), played by "th" (261 in the bundled vocabulary), which the
// regex may start with: it ends the reasoning and the grammar takes it as its first token.
TEST_F(SchedulerReasoningTest, AnImplicitEndIsTheGrammarsFirstToken) {
  implicit_ends_ = {261};
  SetUp();
  free_token_ = [](const Request& r) {
    const int32_t k = r.num_output_tokens();
    return k < kReasoningTokens ? 200 : k == kReasoningTokens ? 261 : 100;
  };
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("t", {kThinkStart})).ok());
  auto [tokens, reason] = RunToEnd("t");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kStop);  // the grammar took "th" and never refused a token
  ASSERT_GT(tokens.size(), static_cast<size_t>(kReasoningTokens + 1));
  EXPECT_EQ(tokens[kReasoningTokens], 261);
  const std::string text =
      Text(std::vector<int32_t>(tokens.begin() + kReasoningTokens, tokens.end()));
  EXPECT_TRUE(text.starts_with("th")) << text;
  EXPECT_TRUE(std::regex_match(text, std::regex(kRegex))) << text;
  // Nothing masked while reasoning (no row), the grammar's rows right after "th".
  ExpectRowsFrom("t", kReasoningTokens + 1);
}

// An implicit end the grammar cannot start with (" Judas", 4095, the highest id: the fake model
// samples the highest allowed token under a row) is masked while the request reasons: the
// reasoning rows allow everything else, so the model never ends its reasoning into a token
// the grammar would refuse.
TEST_F(SchedulerReasoningTest, AnImplicitEndTheGrammarRefusesIsMaskedWhileReasoning) {
  implicit_ends_ = {kVocab - 1};
  SetUp();
  ASSERT_TRUE(scheduler_->AddRequest(Reasoning("m", {kThinkStart}, 12)).ok());
  auto [tokens, reason] = RunToEnd("m");
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, FinishReason::kLength);
  EXPECT_EQ(tokens, std::vector<int32_t>(12, kVocab - 2));  // the highest token left open
  ExpectRowsFrom("m", 0);                                   // a (reasoning) row for every sample
}

TEST(SchedulerWithoutManagerTest, RefusesStructuredOutputs) {
  testing::SchedulerSetup setup;
  setup.kv_cache.num_blocks = 1000;
  auto scheduler = Scheduler::Create(setup.config, setup.kv_cache);
  ASSERT_TRUE(scheduler.ok());
  EngineCoreRequest r = testing::MakeRequest("r", 4);
  r.sampling_params.structured_outputs.emplace().regex = "a";
  EXPECT_TRUE(absl::IsFailedPrecondition((*scheduler)->AddRequest(std::move(r))));
}

}  // namespace
}  // namespace vllm::core
