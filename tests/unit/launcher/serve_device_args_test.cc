// vllm-launch serve's device flags: --device auto|cpu|cuda (kept as given; the engine factory
// resolves auto to cuda only when a GPU is visible, so the no-flag default on a machine without
// one stays the CPU, and cuda without a GPU is an error naming the flag), --dtype,
// --gpu-memory-utilization, --enforce-eager with vLLM's defaults. Runs without a GPU.
#include <string>
#include <vector>

#include "executor/engine_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/serve_args.h"
#include "worker/hf_config.h"
#include "worker/worker.h"

namespace vllm::launcher {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ParsedServeArgs> Parse(std::vector<std::string> argv) {
  return ParseServeArgs(argv, "models/kjv-llama-tiny");
}

TEST(ServeDeviceArgsTest, DefaultsFollowVllm) {
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::VllmConfig& c = p->args->config;
  // auto stays auto: the engine factory resolves it once, on the engine's node.
  EXPECT_EQ(c.device.device, config::Device::kAuto);
  EXPECT_EQ(c.model.dtype, config::ModelDType::kAuto);
  EXPECT_DOUBLE_EQ(c.cache.gpu_memory_utilization, 0.9);
  EXPECT_FALSE(c.model.enforce_eager);
}

TEST(ServeDeviceArgsTest, FlagsReachTheConfig) {
  auto p = Parse(
      {"--device", "cpu", "--dtype", "half", "--gpu-memory-utilization", "0.5", "--enforce-eager"});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::VllmConfig& c = p->args->config;
  EXPECT_EQ(c.device.device, config::Device::kCpu);
  EXPECT_EQ(c.model.dtype, config::ModelDType::kFloat16);
  EXPECT_DOUBLE_EQ(c.cache.gpu_memory_utilization, 0.5);
  EXPECT_TRUE(c.model.enforce_eager);
  p = Parse({"--dtype", "bfloat16"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->config.model.dtype, config::ModelDType::kBFloat16);
}

// The one place that resolves the device is the engine factory (executor::ResolveVllmConfig):
// auto becomes cuda only where a GPU is visible, and cuda without one names the flag.
TEST(ServeDeviceArgsTest, TheEngineFactoryResolvesTheDevice) {
  worker::HfConfig hf;
  hf.max_position_embeddings = 128;
  hf.vocab_size = 32;
  const bool gpu = worker::VisibleCudaDevices() > 0;
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  auto resolved = executor::ResolveVllmConfig(p->args->config, hf);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->device.device, gpu ? config::Device::kCuda : config::Device::kCpu);

  p = Parse({"--device", "cuda"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->config.device.device, config::Device::kCuda);
  resolved = executor::ResolveVllmConfig(p->args->config, hf);
  if (gpu) {
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    return;
  }
  ASSERT_FALSE(resolved.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(resolved.status()));
  EXPECT_THAT(std::string(resolved.status().message()), HasSubstr("--device cuda"));
}

TEST(ServeDeviceArgsTest, HelpDescribesTheFlags) {
  auto p = Parse({"--help"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_FALSE(p->args.has_value());
  EXPECT_THAT(p->text, HasSubstr("--enforce-eager"));
  EXPECT_THAT(p->text, HasSubstr("--gpu-memory-utilization"));
  EXPECT_THAT(p->text, HasSubstr("BF16 precision for BF16 models"));
}

}  // namespace
}  // namespace vllm::launcher
