// ResolveVllmConfig: a model whose config switches on a sliding window (not implemented) is
// served only within the window, where whole-context attention is the same; a longer
// --max-model-len is refused naming the config key. Never served wrong.
#include "executor/engine_factory.h"

#include <string>

#include "gtest/gtest.h"

namespace vllm::executor {
namespace {

worker::ModelConfig Model(int64_t max_positions, std::optional<int32_t> window) {
  worker::ModelConfig m;
  m.max_position_embeddings = max_positions;
  m.sliding_window = window;
  return m;
}

config::VllmConfig Cpu(int32_t max_model_len) {
  config::VllmConfig c;
  c.device.device = config::Device::kCpu;
  c.model.model = "/models/m";  // not read: ResolveVllmConfig only checks it is given
  c.model.max_model_len = max_model_len;
  return c;
}

TEST(ResolveVllmConfigTest, NoWindowUsesTheModelsLength) {
  auto c = ResolveVllmConfig(Cpu(0), Model(4096, std::nullopt));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.max_model_len, 4096);
  auto bad = ResolveVllmConfig(Cpu(5000), Model(4096, std::nullopt));
  EXPECT_FALSE(bad.ok());
}

TEST(ResolveVllmConfigTest, SlidingWindowLimitsTheContextToTheWindow) {
  auto c = ResolveVllmConfig(Cpu(0), Model(32768, 32));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.max_model_len, 32);
  auto within = ResolveVllmConfig(Cpu(16), Model(32768, 32));
  ASSERT_TRUE(within.ok()) << within.status();
  EXPECT_EQ(within->model.max_model_len, 16);
  auto longer = ResolveVllmConfig(Cpu(33), Model(32768, 32));
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("sliding_window"), std::string::npos) << longer.status();
  // A window as long as the model's context changes nothing.
  auto wide = ResolveVllmConfig(Cpu(0), Model(4096, 4096));
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->model.max_model_len, 4096);
}

}  // namespace
}  // namespace vllm::executor
