// ResolveVllmConfig: max_model_len defaults to the model's max_position_embeddings and a
// longer one is refused (allowed with VLLM_ALLOW_LONG_MAX_MODEL_LEN); a sliding window (attention
// within the window is implemented) does not limit the context. BuildEngineCore refuses a reasoning
// parser whose think tokens the model's tokenizer lacks, before any worker starts.
#include "executor/engine_factory.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace vllm::executor {
namespace {

worker::HfConfig Model(int64_t max_positions, std::optional<int32_t> window) {
  worker::HfConfig m;
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
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
            std::string::npos)
      << bad.status();
}

// VLLM_ALLOW_LONG_MAX_MODEL_LEN: a longer --max-model-len is allowed (with vLLM's warning).
TEST(ResolveVllmConfigTest, AllowLongMaxModelLen) {
  auto c = ResolveVllmConfig(Cpu(5000), Model(4096, std::nullopt),
                             /*allow_long_max_model_len=*/true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.max_model_len, 5000);
}

TEST(ResolveVllmConfigTest, SlidingWindowDoesNotLimitTheContext) {
  auto c = ResolveVllmConfig(Cpu(0), Model(32768, 32));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.max_model_len, 32768);
  auto longer = ResolveVllmConfig(Cpu(33), Model(32768, 32));
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_EQ(longer->model.max_model_len, 33);
  auto too_long = ResolveVllmConfig(Cpu(32769), Model(32768, 32));
  EXPECT_FALSE(too_long.ok());
}

TEST(BuildEngineCoreTest, ReasoningParserWithoutThinkTokensIsRefused) {
  config::VllmConfig c;
  c.device.device = config::Device::kCpu;
  c.model.model = (std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny").string();
  c.structured_outputs.reasoning_parser = "deepseek_r1";
  // A worker binary that does not exist: the refusal must come before any worker is needed.
  EngineRuntimeOptions runtime;
  runtime.worker_binary = "/nonexistent/vllm-launch";
  auto built = BuildEngineCore(c, runtime);
  ASSERT_FALSE(built.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(built.status())) << built.status();
  const std::string message(built.status().message());
  EXPECT_NE(message.find("--reasoning-parser deepseek_r1"), std::string::npos) << message;
  EXPECT_NE(message.find("<think>"), std::string::npos) << message;
}

}  // namespace
}  // namespace vllm::executor
