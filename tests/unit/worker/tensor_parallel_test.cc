// Tensor-parallel sharding at load time: two (or more) ranks, each a thread holding its shard
// of the fixture models, joined by an in-process all-reduce (a test double for the gloo /
// shared-memory collective of kernels/comm), must produce Hugging Face's logits as TP = 1 does.
#include <barrier>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/communicator.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "worker/llama_model.h"
#include "worker/model_config.h"
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
  auto config = LoadModelConfig(dir);
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
    EXPECT_EQ((*model)->num_kv_heads(), config->num_key_value_heads / tp);
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

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest,
                         ::testing::Values(Case{"llama_mha", 2}, Case{"llama_mha", 4},
                                           Case{"llama_gqa", 2}, Case{"qwen2", 2}));

TEST(TensorParallelConfigTest, IndivisibleHeadsAreAClearError) {
  auto config = LoadModelConfig(kFixtures / "llama_gqa");  // 2 KV heads
  ASSERT_TRUE(config.ok()) << config.status();
  ThreadGroup group(4);
  ThreadGroup::Member member(&group, 0);
  auto weights = OpenSafetensors(kFixtures / "llama_gqa");
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto model = LlamaModel::Load(*config, **weights, &member);
  ASSERT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
  EXPECT_NE(model.status().message().find("num_key_value_heads"), std::string::npos);
}

}  // namespace
}  // namespace vllm::worker
