// The drafts that run in the worker (worker/drafter.h): start-up refusals that name the key (a
// head whose shapes or vocabulary differ from the target's, a Medusa config with a truncated
// vocabulary), and the drafting passes themselves: a draft model identical to the target
// drafts the target's own greedy continuation, through chunked prefill and lookahead slots
// that run out.
#include "worker/drafter.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/communicator.h"
#include "tests/support/draft_heads.h"
#include "worker/medusa_head.h"
#include "worker/weights.h"

namespace vllm::worker {
namespace {

const std::filesystem::path kTarget =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models" / "llama_gqa";

class DrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vllm-drafter-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto config = LoadHfConfig(kTarget);
    ASSERT_TRUE(config.ok()) << config.status();
    auto weights = OpenSafetensors(kTarget);
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto model = LlamaModel::Load(*config, **weights, &comm_);
    ASSERT_TRUE(model.ok()) << model.status();
    target_ = std::move(*model);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<std::unique_ptr<Drafter>> Make(const std::string& method,
                                                const std::filesystem::path& model, int32_t k) {
    config::SpeculativeConfig c;
    c.method = method;
    c.model = model;
    c.num_speculative_tokens = k;
    return MakeDrafter(c, *target_, &comm_, /*dummy_weights=*/false, 0);
  }

  // Greedy tokens of the target after `prompt` (a plain forward of the whole sequence per
  // token).
  std::vector<int32_t> Greedy(std::vector<int32_t> tokens, int32_t n) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < n; ++i) {
      auto cache = target_->AllocateKVCache(16, 16);
      EXPECT_TRUE(cache.ok());
      const auto len = static_cast<int32_t>(tokens.size());
      std::vector<int32_t> positions(len), blocks(16), logits_rows = {len - 1};
      std::vector<int64_t> slots(len);
      for (int32_t p = 0; p < len; ++p) positions[p] = p, slots[p] = p;
      for (int32_t b = 0; b < 16; ++b) blocks[b] = b;
      const int32_t qsl[2] = {0, len};
      ForwardBatch batch;
      batch.token_ids = tokens;
      batch.positions = positions;
      batch.slot_mapping = slots;
      batch.logits_indices = logits_rows;
      batch.attention = {1, qsl, &len, blocks.data(), 16, 16};
      std::vector<float> logits;
      EXPECT_TRUE(target_->Forward(batch, *cache, &logits).ok());
      const int32_t next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(next);
      tokens.push_back(next);
    }
    return out;
  }

  std::filesystem::path dir_;
  kernels::SingleRankCommunicator comm_;
  std::unique_ptr<LlamaModel> target_;
};

TEST_F(DrafterTest, DraftModelIdenticalToTheTargetDraftsItsGreedyContinuation) {
  auto drafter = Make("draft_model", kTarget, 4);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  EXPECT_FALSE((*drafter)->needs_hidden_states());
  EXPECT_GT((*drafter)->kv_bytes_per_token(), 0);
  ASSERT_TRUE((*drafter)->InitializeKVCache(16, 16).ok());
  const std::vector<int32_t> prompt = {510, 17, 33, 90, 4, 250, 8, 61, 77, 5};
  std::vector<int32_t> blocks = {3, 7};  // positions 0..31
  const std::vector<int32_t> expected = Greedy(prompt, 5);

  // Step 1: the prompt in two chunks; the first drafts nothing.
  DraftRequest q;
  q.first_row = 0;
  q.num_rows = 6;
  q.first_position = 0;
  q.token_ids = prompt;
  q.block_ids = blocks;
  q.num_drafts = 0;
  std::vector<std::vector<int32_t>> drafts;
  ASSERT_TRUE((*drafter)->Propose({&q, 1}, {}, &drafts).ok());
  ASSERT_EQ(drafts.size(), 1u);
  EXPECT_TRUE(drafts[0].empty());
  // Step 2: the rest of the prompt, then the token the target sampled after it.
  std::vector<int32_t> known = prompt;
  known.push_back(expected[0]);
  q.first_position = 6;
  q.num_rows = 4;
  q.token_ids = known;
  q.num_drafts = 4;
  ASSERT_TRUE((*drafter)->Propose({&q, 1}, {}, &drafts).ok());
  EXPECT_EQ(drafts[0], std::vector<int32_t>(expected.begin() + 1, expected.end()));

  // Drafts stop where the request's block table ends: with blocks of 4 and 3 blocks
  // (positions 0..11), the prompt's rows, the sampled token's (10) and the first draft's (11)
  // fit, giving two drafts; a third would need a row at 12.
  ASSERT_TRUE((*drafter)->InitializeKVCache(16, 4).ok());
  const std::vector<int32_t> three = {5, 9, 2};
  q.first_position = 0;
  q.num_rows = 10;
  q.block_ids = three;
  q.num_drafts = 8;
  ASSERT_TRUE((*drafter)->Propose({&q, 1}, {}, &drafts).ok());
  EXPECT_EQ(drafts[0], std::vector<int32_t>(expected.begin() + 1, expected.begin() + 3));
}

TEST_F(DrafterTest, EagleHeadLoadsAndDraftsTokensOfTheVocabulary) {
  testing::WriteEagleHead(kTarget, dir_ / "eagle", 3);
  auto drafter = Make("eagle", dir_ / "eagle", 3);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  EXPECT_TRUE((*drafter)->needs_hidden_states());
  ASSERT_TRUE((*drafter)->InitializeKVCache(8, 16).ok());
  const int32_t h = target_->config().hidden_size;
  const std::vector<int32_t> tokens = {510, 17, 33, 90, 4};
  const std::vector<int32_t> blocks = {1};
  std::vector<float> hidden(static_cast<size_t>(4 * h), 0.25f);
  DraftRequest q;
  q.num_rows = 4;
  q.token_ids = tokens;
  q.block_ids = blocks;
  q.num_drafts = 3;
  std::vector<std::vector<int32_t>> drafts;
  ASSERT_TRUE((*drafter)->Propose({&q, 1}, hidden, &drafts).ok());
  ASSERT_EQ(drafts[0].size(), 3u);
  for (int32_t t : drafts[0]) EXPECT_TRUE(t >= 0 && t < target_->vocab_size()) << t;
  // Too few hidden rows for the step is an error, not a read past the buffer.
  hidden.resize(static_cast<size_t>(2 * h));
  EXPECT_EQ((*drafter)->Propose({&q, 1}, hidden, &drafts).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DrafterTest, MismatchedHeadsAreRefusedNamingTheKey) {
  // An fc of the wrong shape names the tensor.
  testing::WriteEagleHead(kTarget, dir_ / "eagle", 3);
  testing::WriteRandomSafetensors(dir_ / "eagle", {{"fc.weight", {4, 4}}}, 1);
  auto bad_fc = Make("eagle", dir_ / "eagle", 3);
  ASSERT_FALSE(bad_fc.ok());
  EXPECT_NE(std::string(bad_fc.status().message()).find("weight"), std::string::npos)
      << bad_fc.status();

  // A draft vocabulary unlike the target's.
  testing::WriteMedusaHead(kTarget, dir_ / "medusa", 2, 5);
  nlohmann::json c = testing::ReadJsonFile(dir_ / "medusa" / "config.json");
  c["vocab_size"] = 1000;
  std::ofstream(dir_ / "medusa" / "config.json") << c.dump();
  auto bad_vocab = Make("medusa", dir_ / "medusa", 2);
  ASSERT_FALSE(bad_vocab.ok());
  EXPECT_NE(std::string(bad_vocab.status().message()).find("vocab_size"), std::string::npos)
      << bad_vocab.status();

  // No such directory.
  EXPECT_FALSE(Make("draft_model", dir_ / "missing", 2).ok());
}

TEST_F(DrafterTest, MedusaHeadsDraftOnePerHead) {
  testing::WriteMedusaHead(kTarget, dir_ / "medusa", 2, 5);
  auto drafter = Make("medusa", dir_ / "medusa", 4);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  EXPECT_EQ((*drafter)->kv_bytes_per_token(), 0);
  const int32_t h = target_->config().hidden_size;
  std::vector<float> hidden(static_cast<size_t>(3 * h), -0.5f);
  const std::vector<int32_t> tokens = {510, 17, 33, 90};
  DraftRequest q[2];
  q[0].num_rows = 1;  // a mid-prefill request: no drafts
  q[0].token_ids = tokens;
  q[1].first_row = 1;
  q[1].num_rows = 2;
  q[1].token_ids = tokens;
  q[1].num_drafts = 4;
  std::vector<std::vector<int32_t>> drafts;
  ASSERT_TRUE((*drafter)->Propose(q, hidden, &drafts).ok());
  EXPECT_TRUE(drafts[0].empty());
  EXPECT_EQ(drafts[1].size(), 2u) << "k is capped by the number of heads";
}

TEST(MedusaConfigTest, ReadsVllmsKeysAndRefusesATruncatedVocabulary) {
  auto c = ParseMedusaConfig(
      R"({"hidden_size": 64, "vocab_size": 512, "medusa_num_heads": 3, "medusa_num_layers": 2,
          "original_lm_head": true, "medusa_fc_bias": true, "truncated_vocab_size": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_heads, 3);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_TRUE(c->original_lm_head);
  EXPECT_TRUE(c->fc_bias);
  auto truncated = ParseMedusaConfig(R"({"vocab_size": 512, "truncated_vocab_size": 100})");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(std::string(truncated.status().message()).find("truncated_vocab_size"),
            std::string::npos);
  EXPECT_FALSE(ParseMedusaConfig(R"({"num_heads": 0})").ok());
  EXPECT_FALSE(ParseMedusaConfig(R"({"hidden_size": "64"})").ok());
  EXPECT_FALSE(ParseMedusaConfig("[1, 2]").ok());
  EXPECT_FALSE(ParseMedusaConfig("{").ok());
}

}  // namespace
}  // namespace vllm::worker
