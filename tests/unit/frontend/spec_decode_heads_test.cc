// The bundled model's trained draft heads (models/kjv-llama-tiny-eagle, -eagle3, -medusa; trained
// by tools/fixtures/train_draft_heads.py) through the whole engine: greedy output identical to
// decoding without drafts, and the heads' drafts accepted often enough to be worth running
// (a head that read the wrong hidden state, or fed its layer the wrong token or position,
// would draft noise and fail the floor; the floors are well below what the heads measure,
// models/kjv-llama-tiny-eagle/README.md).
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/speculative_config.h"
#include "frontend/engine/llm_engine.h"
#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace vllm::frontend {
namespace {

const std::filesystem::path kModels = std::filesystem::path(VLLM_SOURCE_DIR) / "models";

const char* const kPrompts[] = {
    "In the beginning God created",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the",
    "And it came to pass, when",
    "The LORD is my shepherd;",
    "Then said Jesus unto his disciples,",
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  spec_decode::SpecDecodingStats spec;
};

Outcome Generate(const std::string& speculative) {
  Outcome run;
  config::EngineArgs args;
  args.config.model.model = kModels / "kjv-llama-tiny";
  args.config.cache.kv_cache_memory_bytes = int64_t{64} << 20;
  if (!speculative.empty()) {
    auto spec = config::ParseSpeculativeConfig(speculative);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return run;
    args.config.speculative = *spec;
  }
  auto engine = LLMEngine::Create(args);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  auto tokenizer = Tokenizer::Load(args.config.model.model);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return run;
  std::vector<core::EngineCoreRequest> requests;
  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    core::EngineCoreRequest r;
    r.request_id = absl::StrCat("p", i);
    auto ids = (*tokenizer)->Encode(kPrompts[i], /*add_special_tokens=*/true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (!ids.ok()) return run;
    r.prompt_token_ids = std::move(*ids);
    r.sampling_params.temperature = 0.0;
    r.sampling_params.max_tokens = 96;
    r.sampling_params.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  auto outputs = (*engine)->Generate(std::move(requests));
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return run;
  for (const RequestOutput& o : *outputs) run.tokens.push_back(o.output_token_ids);
  run.spec = (*engine)->totals().spec_decoding;
  return run;
}

TEST(SpecDecodeHeadsTest, TrainedHeadsKeepGreedyOutputAndAreAccepted) {
  const Outcome plain = Generate("");
  ASSERT_EQ(plain.tokens.size(), std::size(kPrompts));
  struct Head {
    const char* method;
    const char* dir;
    double min_acceptance_length;  // 1 + accepted / drafts, over all drafts
  };
  for (const Head& head :
       {Head{"eagle", "kjv-llama-tiny-eagle", 1.5}, Head{"eagle3", "kjv-llama-tiny-eagle3", 1.5},
        Head{"medusa", "kjv-llama-tiny-medusa", 1.3}}) {
    SCOPED_TRACE(head.method);
    const std::string spec =
        absl::StrCat(R"({"method": ")", head.method, R"(", "model": ")",
                     (kModels / head.dir).string(), R"(", "num_speculative_tokens": 3})");
    const Outcome drafted = Generate(spec);
    EXPECT_EQ(drafted.tokens, plain.tokens) << "greedy output changed with drafts";
    ASSERT_GT(drafted.spec.num_drafts, 0);
    const double length =
        1.0 + static_cast<double>(drafted.spec.num_accepted_tokens) / drafted.spec.num_drafts;
    ::testing::Test::RecordProperty(absl::StrCat("acceptance_length_", head.method),
                                    absl::StrCat(length));
    EXPECT_GE(length, head.min_acceptance_length)
        << drafted.spec.num_accepted_tokens << " accepted of " << drafted.spec.num_draft_tokens
        << " in " << drafted.spec.num_drafts << " drafts";
  }
}

}  // namespace
}  // namespace vllm::frontend
