// The drafts that run in the worker (worker/drafter.h): start-up refusals that name the key (a
// head whose shapes or vocabulary differ from the target's, a Medusa config with a truncated
// vocabulary, EAGLE-3 aux layers and d2t), the drafting passes themselves (a draft model
// identical to the target drafts the target's own greedy continuation, through chunked
// prefill and lookahead slots that run out; EAGLE-3 drafts through d2t), and the target's
// EAGLE-3 aux states at the layer boundaries.
#include "worker/drafter.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
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

TEST_F(DrafterTest, Eagle3HeadReadsTheTargetsAuxStatesAndDraftsThroughD2t) {
  testing::WriteEagle3Head(kTarget, dir_ / "eagle3", 4);
  const int32_t h = target_->config().hidden_size;
  EXPECT_EQ(target_->hidden_out_width(), h);
  auto drafter = Make("eagle3", dir_ / "eagle3", 3);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  // llama_gqa has 3 layers: the streams entering layers 0 and 1 and the last layer's output.
  EXPECT_EQ(target_->hidden_out_width(), 3 * h);
  EXPECT_TRUE((*drafter)->needs_hidden_states());
  EXPECT_GT((*drafter)->kv_bytes_per_token(), 0);
  ASSERT_TRUE((*drafter)->InitializeKVCache(8, 16).ok());
  const std::vector<int32_t> tokens = {510, 17, 33, 90, 4};
  const std::vector<int32_t> blocks = {1};
  std::vector<float> hidden(static_cast<size_t>(4 * 3 * h));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  DraftRequest q;
  q.num_rows = 4;
  q.token_ids = tokens;
  q.block_ids = blocks;
  q.num_drafts = 3;
  std::vector<std::vector<int32_t>> drafts;
  ASSERT_TRUE((*drafter)->Propose({&q, 1}, hidden, &drafts).ok());
  ASSERT_EQ(drafts[0].size(), 3u);
  for (int32_t t : drafts[0]) {
    // The draft vocabulary is the target's even ids (d2t[i] = i).
    EXPECT_TRUE(t >= 0 && t < target_->vocab_size() && t % 2 == 0) << t;
  }
  // Rows of the last hidden state's width are too few for the aux states.
  hidden.resize(static_cast<size_t>(4 * h));
  EXPECT_EQ((*drafter)->Propose({&q, 1}, hidden, &drafts).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DrafterTest, AuxStatesAreTheResidualStreamAtLayerBoundaries) {
  const int32_t h = target_->config().hidden_size;
  const int32_t layers = target_->num_layers();
  const std::vector<int32_t> tokens = {510, 17, 33};
  const auto len = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> positions = {0, 1, 2}, blocks = {0}, logits_rows = {2};
  std::vector<int64_t> slots = {0, 1, 2};
  const int32_t qsl[2] = {0, len};
  ForwardBatch batch;
  batch.token_ids = tokens;
  batch.positions = positions;
  batch.slot_mapping = slots;
  batch.logits_indices = logits_rows;
  batch.attention = {1, qsl, &len, blocks.data(), 1, 16};
  auto run = [&](std::vector<float>* hidden, std::vector<float>* logits) {
    auto cache = target_->AllocateKVCache(1, 16);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(target_->Forward(batch, *cache, logits, hidden).ok());
  };
  std::vector<float> last, plain_logits;
  run(&last, &plain_logits);  // after the final norm
  target_->SetAuxHiddenLayers({0, layers});
  std::vector<float> aux, aux_logits;
  run(&aux, &aux_logits);
  ASSERT_EQ(aux.size(), static_cast<size_t>(len * 2 * h));
  EXPECT_EQ(aux_logits, plain_logits) << "the aux states change no logits";
  auto weights = OpenSafetensors(kTarget);
  ASSERT_TRUE(weights.ok());
  const std::vector<int64_t> embed_shape = {target_->vocab_size(), h};
  auto embed = (*weights)->Load("model.embed_tokens.weight", embed_shape);
  ASSERT_TRUE(embed.ok());
  const std::vector<int64_t> norm_shape = {h};
  auto norm = (*weights)->Load("model.norm.weight", norm_shape);
  ASSERT_TRUE(norm.ok());
  for (int32_t r = 0; r < len; ++r) {
    // Boundary 0 is the embedding; boundary L, normed, is the last hidden state.
    const float* row = aux.data() + static_cast<size_t>(r) * 2 * h;
    double squares = 0;
    for (int32_t j = 0; j < h; ++j) {
      EXPECT_EQ(row[j], (*embed)[static_cast<size_t>(tokens[r]) * h + j]);
      squares += double{row[h + j]} * row[h + j];
    }
    const double scale = 1.0 / std::sqrt(squares / h + target_->config().rms_norm_eps);
    for (int32_t j = 0; j < h; ++j) {
      EXPECT_NEAR(row[h + j] * scale * (*norm)[j], last[static_cast<size_t>(r) * h + j], 1e-4)
          << "row " << r << " column " << j;
    }
  }
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

  // EAGLE-3: fc of the wrong width, a d2t entry outside the vocabulary, aux layer ids that
  // are not what fc reads, and an EAGLE-3 head given as EAGLE-1.
  const auto refusal = [&](const std::string& method, const std::filesystem::path& model) {
    auto made = Make(method, model, 2);
    return made.ok() ? std::string("accepted") : std::string(made.status().message());
  };
  const std::filesystem::path e3 = dir_ / "eagle3";
  testing::WriteEagle3Head(kTarget, e3, 4);
  EXPECT_NE(refusal("eagle", e3).find("use method \"eagle3\""), std::string::npos)
      << refusal("eagle", e3);
  nlohmann::json c3 = testing::ReadJsonFile(e3 / "config.json");
  c3["parallel_drafting"] = false;  // the default: accepted
  std::ofstream(e3 / "config.json") << c3.dump();
  EXPECT_EQ(refusal("eagle3", e3), "accepted");
  c3["parallel_drafting"] = true;
  std::ofstream(e3 / "config.json") << c3.dump();
  EXPECT_NE(refusal("eagle3", e3).find("parallel_drafting"), std::string::npos)
      << refusal("eagle3", e3);
  c3.erase("parallel_drafting");
  c3["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {1, 2};
  c3["num_aux_hidden_states"] = 3;
  std::ofstream(e3 / "config.json") << c3.dump();
  EXPECT_NE(refusal("eagle3", e3).find("eagle_aux_hidden_state_layer_ids"), std::string::npos)
      << refusal("eagle3", e3);
  c3["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {0, 9, 2};
  c3.erase("num_aux_hidden_states");
  std::ofstream(e3 / "config.json") << c3.dump();
  EXPECT_NE(refusal("eagle3", e3).find("0 to 3"), std::string::npos) << refusal("eagle3", e3);
  // The checkpoint rewritten with fc `fc_in` wide and d2t[5] = `d2t5`.
  const auto rewrite = [&](int64_t fc_in, int64_t d2t5) {
    testing::WriteEagle3Head(kTarget, e3, 4);
    const nlohmann::json cfg = testing::ReadJsonFile(e3 / "config.json");
    const int64_t h = cfg["hidden_size"], dv = cfg["draft_vocab_size"];
    const int64_t heads = cfg["num_attention_heads"], kvh = cfg["num_key_value_heads"];
    const int64_t hd = cfg["head_dim"], inter = cfg["intermediate_size"];
    std::vector<int64_t> d2t(static_cast<size_t>(dv), 0);
    d2t[5] = d2t5;
    const std::string p = "midlayer.";
    testing::WriteRandomSafetensors(e3,
                                    {{"fc.weight", {h, fc_in}},
                                     {p + "input_layernorm.weight", {h}, 0.0f},
                                     {p + "hidden_norm.weight", {h}, 0.0f},
                                     {p + "self_attn.q_proj.weight", {heads * hd, 2 * h}},
                                     {p + "self_attn.k_proj.weight", {kvh * hd, 2 * h}},
                                     {p + "self_attn.v_proj.weight", {kvh * hd, 2 * h}},
                                     {p + "self_attn.o_proj.weight", {h, heads * hd}},
                                     {p + "post_attention_layernorm.weight", {h}, 0.0f},
                                     {p + "mlp.gate_proj.weight", {inter, h}},
                                     {p + "mlp.up_proj.weight", {inter, h}},
                                     {p + "mlp.down_proj.weight", {h, inter}},
                                     {"norm.weight", {h}, 0.0f},
                                     {"lm_head.weight", {dv, h}},
                                     {"d2t", {dv}, d2t}},
                                    2);
  };
  const int64_t h = target_->config().hidden_size;
  rewrite(3 * h, 0);
  EXPECT_EQ(refusal("eagle3", e3), "accepted");
  rewrite(2 * h, 0);
  EXPECT_NE(refusal("eagle3", e3).find("fc.weight"), std::string::npos) << refusal("eagle3", e3);
  rewrite(3 * h, 100000);
  EXPECT_NE(refusal("eagle3", e3).find("'d2t': draft id 5 maps to 100005"), std::string::npos)
      << refusal("eagle3", e3);

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

// The bundled model's trained EAGLE-3 head (models/kjv-llama-tiny-eagle3) drafts what the
// PyTorch forward that trained it drafts (its training_log.json's reference: float32 from the
// saved BF16 weights, tools/fixtures/train_draft_heads.py), at every position of a greedy
// continuation: the aux layers, fc, the 2 × hidden first layer, the norms, the pre-norm stream
// fed back and d2t all as vLLM's Eagle3LlamaForCausalLM.
TEST(Eagle3TrainedHeadTest, DraftsWhatItsTrainingForwardDrafts) {
  const std::filesystem::path models = std::filesystem::path(VLLM_SOURCE_DIR) / "models";
  const std::filesystem::path head_dir = models / "kjv-llama-tiny-eagle3";
  kernels::SingleRankCommunicator comm;
  auto config = LoadHfConfig(models / "kjv-llama-tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = OpenSafetensors(models / "kjv-llama-tiny");
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto target = LlamaModel::Load(*config, **weights, &comm);
  ASSERT_TRUE(target.ok()) << target.status();
  config::SpeculativeConfig spec;
  spec.method = "eagle3";
  spec.model = head_dir;
  spec.num_speculative_tokens = 3;
  auto drafter = MakeDrafter(spec, **target, &comm, /*dummy_weights=*/false, 0);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  const nlohmann::json log = testing::ReadJsonFile(head_dir / "training_log.json");
  const nlohmann::json& ref = log.at("eagle3").at("reference");
  const std::vector<int32_t> sequence = ref.at("sequence").get<std::vector<int32_t>>();
  ASSERT_FALSE(ref.at("drafts_at").empty());
  const std::vector<int32_t> blocks = {0, 1};
  for (const nlohmann::json& at : ref.at("drafts_at")) {
    const int32_t t = at.at("t");
    SCOPED_TRACE(::testing::Message() << "drafts after position " << t + 1);
    // The target's aux states of positions 0..t, then the head over them and token t + 1.
    const std::vector<int32_t> tokens(sequence.begin(), sequence.begin() + t + 1);
    const int32_t len = t + 1;
    std::vector<int32_t> positions(len), logits_rows = {len - 1};
    std::vector<int64_t> slots(len);
    for (int32_t p = 0; p < len; ++p) positions[p] = p, slots[p] = p;
    const int32_t qsl[2] = {0, len};
    ForwardBatch batch;
    batch.token_ids = tokens;
    batch.positions = positions;
    batch.slot_mapping = slots;
    batch.logits_indices = logits_rows;
    batch.attention = {1, qsl, &len, blocks.data(), 2, 16};
    auto cache = (*target)->AllocateKVCache(2, 16);
    ASSERT_TRUE(cache.ok());
    std::vector<float> logits, hidden;
    ASSERT_TRUE((*target)->Forward(batch, *cache, &logits, &hidden).ok());
    ASSERT_TRUE((*drafter)->InitializeKVCache(2, 16).ok());
    const std::vector<int32_t> known(sequence.begin(), sequence.begin() + t + 2);
    DraftRequest q;
    q.num_rows = len;
    q.token_ids = known;
    q.block_ids = blocks;
    q.num_drafts = 3;
    std::vector<std::vector<int32_t>> drafts;
    ASSERT_TRUE((*drafter)->Propose({&q, 1}, hidden, &drafts).ok());
    EXPECT_EQ(drafts[0], at.at("drafts").get<std::vector<int32_t>>());
  }
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
