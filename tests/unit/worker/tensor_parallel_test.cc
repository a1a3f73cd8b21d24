// Tensor-parallel sharding at load time: two (or more) ranks, each a thread holding its shard
// of the fixture models, joined by an in-process all-reduce (a test double for the gloo /
// shared-memory collective of kernels/comm), must produce Hugging Face's logits as TP = 1 does.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/communicator.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "worker/hf_config.h"
#include "worker/llama_model.h"
#include "worker/tp_layout.h"
#include "worker/weights.h"

namespace vllm::worker {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";

// All ranks deposit their buffer, rank 0 sums, everyone copies the sum back.
class ThreadGroup {
 public:
  explicit ThreadGroup(int32_t world_size)
      : world_size_(world_size), barrier_(world_size), buffers_(world_size) {}

  class Member final : public kernels::Communicator {
   public:
    Member(ThreadGroup* group, int32_t rank) : group_(group), rank_(rank) {}
    int32_t rank() const override { return rank_; }
    int32_t world_size() const override { return group_->world_size_; }
    absl::Status AllReduceSum(float* data, size_t count) override {
      group_->buffers_[rank_] = data;
      group_->barrier_.arrive_and_wait();
      if (rank_ == 0) {
        group_->sum_.assign(count, 0.0f);
        for (float* b : group_->buffers_) {
          for (size_t i = 0; i < count; ++i) group_->sum_[i] += b[i];
        }
      }
      group_->barrier_.arrive_and_wait();
      std::copy_n(group_->sum_.begin(), count, data);
      group_->barrier_.arrive_and_wait();
      return absl::OkStatus();
    }

   private:
    ThreadGroup* group_;
    int32_t rank_;
  };

 private:
  const int32_t world_size_;
  std::barrier<> barrier_;
  std::vector<float*> buffers_;
  std::vector<float> sum_;
};

using testing::LastLogits;

struct Case {
  const char* model;
  int32_t tp;
};

class TensorParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelTest, ShardedRanksReproduceTheReferenceLogits) {
  const std::filesystem::path dir = kFixtures / GetParam().model;
  const int32_t tp = GetParam().tp;
  std::ifstream in(dir / "reference.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json ref = nlohmann::json::parse(text.str());
  const auto prompts = ref.at("prompts").get<std::vector<std::vector<int32_t>>>();
  const auto expected = ref.at("prompt_logits").get<std::vector<std::vector<float>>>();
  auto config = LoadHfConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();

  ThreadGroup group(tp);
  std::vector<std::unique_ptr<ThreadGroup::Member>> members;
  std::vector<std::unique_ptr<LlamaModel>> models(tp);
  for (int32_t r = 0; r < tp; ++r) {
    members.push_back(std::make_unique<ThreadGroup::Member>(&group, r));
    auto weights = OpenSafetensors(dir);
    ASSERT_TRUE(weights.ok()) << weights.status();
    auto model = LlamaModel::Load(*config, **weights, members[r].get());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->num_heads(), config->num_attention_heads / tp);
    // More ranks than KV heads: one KV head each, replicated (vLLM's num_kv_head_replicas).
    EXPECT_EQ((*model)->num_kv_heads(), std::max(1, config->num_key_value_heads / tp));
    models[r] = std::move(*model);
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<std::vector<float>> logits(tp);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < tp; ++r) {
      threads.emplace_back([&, r] { logits[r] = LastLogits(*models[r], prompts[p]); });
    }
    for (std::thread& t : threads) t.join();
    float scale = 1.0f, max_diff = 0.0f;
    for (size_t i = 0; i < expected[p].size(); ++i) {
      scale = std::max(scale, std::abs(expected[p][i]));
      for (int32_t r = 0; r < tp; ++r) {
        max_diff = std::max(max_diff, std::abs(logits[r][i] - expected[p][i]));
      }
    }
    EXPECT_LE(max_diff, 1e-4f * scale) << "prompt " << p;
    EXPECT_EQ(logits[0], logits[tp - 1]) << "ranks disagree";
  }
}

// llama_gqa at 4, qwen3 and phi3 at 4 (2 KV heads) and llama_mqa (1 KV head) replicate KV
// heads; phi3 cuts its fused qkv_proj / gate_up_proj per rank; qwen3 norms each head;
// qwen3_moe and mixtral cut every expert's columns per rank (moe_intermediate 32 and 64);
// gemma2 and gemma3 (4 heads, 2 KV heads) replicate KV heads at 4, their norms and soft caps
// whole on every rank.
INSTANTIATE_TEST_SUITE_P(
    Fixtures, TensorParallelTest,
    ::testing::Values(Case{"llama_mha", 2}, Case{"llama_mha", 4}, Case{"llama_gqa", 2},
                      Case{"llama_gqa", 4}, Case{"qwen2", 2}, Case{"qwen3", 2}, Case{"qwen3", 4},
                      Case{"phi3", 2}, Case{"phi3", 4}, Case{"llama_mqa", 2}, Case{"llama_mqa", 4},
                      Case{"mistral_swa", 2}, Case{"qwen2_swa", 2}, Case{"qwen3_moe", 2},
                      Case{"qwen3_moe", 4}, Case{"mixtral", 2}, Case{"mixtral", 4},
                      Case{"qwen2_moe", 2}, Case{"qwen2_moe", 4}, Case{"gemma2", 2},
                      Case{"gemma2", 4}, Case{"gemma3", 2}, Case{"gemma3", 4}));

TEST(TensorParallelConfigTest, IndivisibleHeadsAreAClearError) {
  auto config = LoadHfConfig(kFixtures / "llama_gqa");  // 8 heads, 2 KV heads
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = OpenSafetensors(kFixtures / "llama_gqa");
  ASSERT_TRUE(weights.ok()) << weights.status();
  {
    ThreadGroup group(3);
    ThreadGroup::Member member(&group, 0);
    auto model = LlamaModel::Load(*config, **weights, &member);
    ASSERT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
    EXPECT_NE(model.status().message().find("num_attention_heads (8)"), std::string::npos);
  }
  // 6 KV heads over 4 ranks: neither splits nor replicates evenly (vLLM refuses it too).
  config->num_attention_heads = 12;
  config->num_key_value_heads = 6;
  ThreadGroup group(4);
  ThreadGroup::Member member(&group, 0);
  auto model = LlamaModel::Load(*config, **weights, &member);
  ASSERT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
  EXPECT_NE(model.status().message().find("num_key_value_heads (6)"), std::string::npos)
      << model.status();
}

struct LayoutCase {
  int32_t heads, kv_heads, tp;
  int32_t want_kv_heads, want_replicas;  // 0: refused
};

TEST(TpLayoutTest, SplitsOrReplicatesKvHeadsAsVllm) {
  const LayoutCase cases[] = {
      {32, 8, 1, 8, 1},  {32, 8, 4, 2, 1}, {32, 8, 8, 1, 1}, {32, 8, 16, 1, 2},
      {32, 8, 32, 1, 4}, {8, 1, 4, 1, 4},  {8, 2, 8, 1, 4},  {12, 6, 4, 0, 0},
      {12, 3, 2, 0, 0},  {12, 4, 3, 0, 0},  // 4 KV heads over 3 ranks: neither divides
  };
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.heads << " heads, " << c.kv_heads << " KV heads, tp " << c.tp);
    HfConfig config;
    config.num_attention_heads = c.heads;
    config.num_key_value_heads = c.kv_heads;
    config.intermediate_size = 96;
    config.hidden_size = 64;
    config.head_dim = 8;
    for (int32_t rank = 0; rank < c.tp; ++rank) {
      auto layout = MakeTpLayout(config, rank, c.tp);
      if (c.want_kv_heads == 0) {
        EXPECT_TRUE(absl::IsInvalidArgument(layout.status())) << layout.status();
        break;
      }
      ASSERT_TRUE(layout.ok()) << layout.status();
      EXPECT_EQ(layout->num_heads, c.heads / c.tp);
      EXPECT_EQ(layout->num_kv_heads, c.want_kv_heads);
      EXPECT_EQ(layout->num_kv_head_replicas, c.want_replicas);
      // Rank r reads KV head(s) starting at (r / replicas) * kv_heads_per_rank.
      const std::vector<WeightPiece> pieces = QkvPieces(config, *layout, 0, /*bias=*/false);
      ASSERT_EQ(pieces.size(), 3u);
      EXPECT_EQ(pieces[1].name, "model.layers.0.self_attn.k_proj.weight");
      EXPECT_EQ(pieces[1].shard.rank, rank / c.want_replicas);
      EXPECT_EQ(pieces[1].shard.world_size, c.tp / c.want_replicas);
      EXPECT_EQ(pieces[1].rows, int64_t{c.want_kv_heads} * config.head_dim);
    }
  }
}

// FusedMoE without expert parallelism: every rank every expert, each expert's columns split;
// intermediate_size matters only when some layer is dense.
TEST(TpLayoutTest, ExpertsAreSplitByColumnsOnEveryRank) {
  HfConfig config;
  config.architecture = "MixtralForCausalLM";
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.hidden_size = 64;
  config.head_dim = 16;
  config.intermediate_size = 30;  // not divisible by 4: unused, every layer is sparse
  config.moe_intermediate_size = 32;
  config.num_experts = 4;
  config.num_experts_per_tok = 2;
  auto layout = MakeTpLayout(config, 3, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->moe_intermediate, 8);
  const std::vector<WeightPiece> mixtral = ExpertPieces(config, *layout, 1, 2);
  ASSERT_EQ(mixtral.size(), 3u);
  EXPECT_EQ(mixtral[0].name, "model.layers.1.block_sparse_moe.experts.2.w1.weight");
  EXPECT_EQ(mixtral[1].name, "model.layers.1.block_sparse_moe.experts.2.w3.weight");
  EXPECT_EQ(mixtral[2].name, "model.layers.1.block_sparse_moe.experts.2.w2.weight");
  EXPECT_EQ(mixtral[0].shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(mixtral[0].shard.dim, 0);
  EXPECT_EQ(mixtral[0].shard.rank, 3);
  EXPECT_EQ(mixtral[0].rows, 8);
  EXPECT_EQ(mixtral[2].shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(mixtral[2].shard.dim, 1);
  const WeightPiece router = RouterPiece(config, 1);
  EXPECT_EQ(router.name, "model.layers.1.block_sparse_moe.gate.weight");
  EXPECT_EQ(router.shape, (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(router.shard.dim, -1);  // replicated

  config.architecture = "Qwen3MoeForCausalLM";
  EXPECT_EQ(ExpertPieces(config, *layout, 0, 7)[1].name,
            "model.layers.0.mlp.experts.7.up_proj.weight");
  EXPECT_EQ(RouterPiece(config, 0).name, "model.layers.0.mlp.gate.weight");
  // A dense layer makes intermediate_size count again.
  config.mlp_only_layers = {0};
  auto dense = MakeTpLayout(config, 0, 4);
  EXPECT_TRUE(absl::IsInvalidArgument(dense.status())) << dense.status();
  EXPECT_THAT(std::string(dense.status().message()), ::testing::HasSubstr("intermediate_size"));
  config.mlp_only_layers.clear();
  config.moe_intermediate_size = 30;
  auto uneven = MakeTpLayout(config, 0, 4);
  EXPECT_THAT(std::string(uneven.status().message()),
              ::testing::HasSubstr("moe_intermediate_size (30)"));
}

TEST(TpLayoutTest, FusedPiecesAreRangesOfOneTensor) {
  HfConfig config;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.intermediate_size = 96;
  config.hidden_size = 64;
  config.head_dim = 16;
  config.fused_projections = true;
  auto layout = MakeTpLayout(config, 1, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<WeightPiece> qkv = QkvPieces(config, *layout, 3, /*bias=*/false);
  ASSERT_EQ(qkv.size(), 3u);
  for (const WeightPiece& piece : qkv) {
    EXPECT_EQ(piece.name, "model.layers.3.self_attn.qkv_proj.weight");
    EXPECT_EQ(piece.shape, (std::vector<int64_t>{64 + 2 * 32, 64}));
    EXPECT_EQ(piece.shard.rank, 1);
  }
  EXPECT_EQ(qkv[0].shard.range_begin, 0);
  EXPECT_EQ(qkv[0].shard.range_size, 64);
  EXPECT_EQ(qkv[1].shard.range_begin, 64);
  EXPECT_EQ(qkv[2].shard.range_begin, 96);
  EXPECT_EQ(qkv[2].shard.range_size, 32);
  EXPECT_EQ(qkv[2].rows, 16);
  const std::vector<WeightPiece> gate_up = GateUpPieces(config, *layout, 3);
  ASSERT_EQ(gate_up.size(), 2u);
  EXPECT_EQ(gate_up[1].name, "model.layers.3.mlp.gate_up_proj.weight");
  EXPECT_EQ(gate_up[1].shape, (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(gate_up[1].shard.range_begin, 96);
  EXPECT_EQ(gate_up[1].rows, 48);
}

}  // namespace
}  // namespace vllm::worker
