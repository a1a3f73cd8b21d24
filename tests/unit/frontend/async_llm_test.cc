// AsyncLLM over a real EngineCoreClient and an EngineCoreProc in this process (a scripted
// executor instead of a model): requests from several server threads at once, an abort while
// others run, and the output thread's callbacks. Also run under TSan (label tsan-unit): every
// thread of the serving path but the HTTP server's is here.
#include "frontend/engine/async_llm.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/engine_core_proc.h"
#include "frontend/engine/engine_core_client.h"
#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/unit/core/core_test_util.h"

namespace vllm::frontend {
namespace {

// The fixture's --max-logprobs.
constexpr int32_t kMaxLogprobs = 5;

const std::filesystem::path kModel =
    std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
constexpr int32_t kVocab = 4096;  // the tiny model's
constexpr int32_t kMaxModelLen = 4096;

// The scripted model's token for (request, position), inside the vocabulary and never EOS.
int32_t Token(const std::string& id, int32_t position) {
  return 10 + core::testing::ScriptedToken(id, position) % (kVocab - 10);
}

// What one request's callback saw.
struct Seen {
  std::vector<int32_t> tokens;
  int32_t num_prompt_tokens = 0;
  std::optional<core::FinishReason> finish_reason;
  absl::Status error;
};

class AsyncLLMTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto client = EngineCoreClient::Create(1);
    ASSERT_TRUE(client.ok()) << client.status();
    core::EngineCoreProcOptions options;
    options.handshake_address = (*client)->handshake_address();
    options.make_engine = [] {
      config::VllmConfig config = core::testing::MakeTestConfig();
      config.scheduler.max_num_seqs = 4;  // more requests than this: some wait
      config.scheduler.max_num_batched_tokens = 64;
      config.model.max_model_len = kMaxModelLen;
      config.cache.block_size = 4;
      core::EngineCoreOptions engine_options;
      engine_options.vocab_size = kVocab;
      return core::EngineCore::Create(config, engine_options,
                                      std::make_unique<core::testing::ScriptedExecutor>(
                                          core::testing::ScriptedExecutor::Options{}, Token));
    };
    proc_ = std::make_unique<core::EngineCoreProc>(std::move(options));
    engine_thread_ = std::thread([this] { run_status_ = proc_->Run(); });
    absl::Status ready =
        (*client)->WaitForEngines(absl::Now() + absl::Seconds(30), [] { return absl::OkStatus(); });
    ASSERT_TRUE(ready.ok()) << ready;
    auto tokenizer = Tokenizer::Load(kModel);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    AsyncLLMConfig config;
    config.model_name = "kjv-llama-tiny";
    config.max_model_len = kMaxModelLen;
    config.vocab_size = kVocab;
    config.eos_token_ids = {1};
    config.vllm.model.max_logprobs = kMaxLogprobs;
    auto llm = AsyncLLM::Create(std::move(*client), std::move(*tokenizer), std::nullopt, config);
    ASSERT_TRUE(llm.ok()) << llm.status();
    llm_ = std::move(*llm);
  }

  void TearDown() override {
    llm_.reset();
    if (proc_ != nullptr) proc_->Stop();
    if (engine_thread_.joinable()) engine_thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_;
  }

  // Starts request `id` (`max_tokens` tokens after `prompt`); its deltas land in seen_[id].
  absl::Status Generate(const std::string& id, const std::string& prompt, int32_t max_tokens) {
    GenerateRequest request;
    request.request_id = id;
    request.prompt_text = prompt;
    request.params.max_tokens = max_tokens;
    return llm_->Generate(std::move(request), [this, id](absl::StatusOr<GenerateOutput> out) {
      absl::MutexLock lock(&mu_);
      Seen& seen = seen_[id];
      if (!out.ok()) {
        seen.error = out.status();
        return;
      }
      seen.tokens.insert(seen.tokens.end(), out->token_ids_delta.begin(),
                         out->token_ids_delta.end());
      seen.num_prompt_tokens = out->num_prompt_tokens;
      if (out->finished()) seen.finish_reason = out->finish_reason;
    });
  }

  // Waits until `ids` all ended (finished or failed).
  bool AwaitEnded(const std::vector<std::string>& ids) {
    absl::MutexLock lock(&mu_);
    auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const std::string& id : ids) {
        auto it = seen_.find(id);
        if (it == seen_.end() || (!it->second.finish_reason && it->second.error.ok())) {
          return false;
        }
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(30));
  }

  std::unique_ptr<core::EngineCoreProc> proc_;
  std::thread engine_thread_;
  absl::Status run_status_;
  std::unique_ptr<AsyncLLM> llm_;
  absl::Mutex mu_;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
};

TEST_F(AsyncLLMTest, ConcurrentRequestsAndAnAbort) {
  // A long request, aborted once it produced a token (long before it could finish).
  ASSERT_TRUE(Generate("long", "And God said, Let there be light", 4000).ok());
  // Eight requests from four server threads at once.
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back("r" + std::to_string(i));
  std::vector<std::thread> servers;
  for (int t = 0; t < 4; ++t) {
    servers.emplace_back([this, t, &ids] {
      for (int i = t; i < 8; i += 4) {
        EXPECT_TRUE(
            Generate(ids[i], "In the beginning God created the heaven and the earth " + ids[i], 8)
                .ok());
      }
    });
  }
  {
    absl::MutexLock lock(&mu_);
    auto started = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !seen_["long"].tokens.empty(); };
    ASSERT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&started), absl::Seconds(30)));
  }
  llm_->Abort("long");
  for (std::thread& t : servers) t.join();
  ASSERT_TRUE(AwaitEnded(ids));
  EXPECT_TRUE(llm_->Health().ok());

  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    const Seen& seen = seen_[id];
    EXPECT_TRUE(seen.error.ok()) << id << ": " << seen.error;
    EXPECT_EQ(seen.finish_reason, core::FinishReason::kLength) << id;
    ASSERT_EQ(seen.tokens.size(), 8u) << id;
    for (int32_t i = 0; i < 8; ++i) {
      EXPECT_EQ(seen.tokens[i], Token(id, seen.num_prompt_tokens + i)) << id << " token " << i;
    }
  }
  // Aborted: at most a final kAbort delta, and fewer tokens than asked for.
  const Seen& aborted = seen_["long"];
  EXPECT_LT(aborted.tokens.size(), 4000u);
  if (aborted.finish_reason.has_value()) {
    EXPECT_EQ(*aborted.finish_reason, core::FinishReason::kAbort);
  }
}

// --max-logprobs (the server's config): a request asking for more is refused naming the field
// before it reaches an engine (vLLM's Processor._validate_logprobs); the engine stays healthy.
TEST_F(AsyncLLMTest, MoreLogprobsThanTheConfigAllowsAreRefused) {
  GenerateRequest request;
  request.request_id = "greedy-for-logprobs";
  request.prompt_text = "In the beginning";
  request.params.max_tokens = 1;
  request.params.logprobs = kMaxLogprobs + 1;
  absl::Status s = llm_->Generate(request, [](absl::StatusOr<GenerateOutput>) {});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(ErrorParam(s), "logprobs");
  EXPECT_EQ(s.message(), "Requested sample logprobs of 6, which is greater than max allowed: 5");
  request.params.logprobs.reset();
  request.params.prompt_logprobs = kMaxLogprobs + 1;
  s = llm_->Generate(request, [](absl::StatusOr<GenerateOutput>) {});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(ErrorParam(s), "prompt_logprobs");
  EXPECT_TRUE(llm_->Health().ok());
}

}  // namespace
}  // namespace vllm::frontend
