// vllm-launch serve's device flags: --device auto|cpu|cuda (auto = cuda only when a GPU is
// visible, so the no-flag default on a machine without one stays the CPU; cuda without a GPU
// is an error naming the flag), --dtype, --gpu-memory-utilization, --enforce-eager with
// vLLM's defaults. Runs without a GPU.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/serve_args.h"
#include "worker/worker.h"

namespace vllm::launcher {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ParsedServeArgs> Parse(std::vector<std::string> argv) {
  return ParseServeArgs(argv, "models/kjv-llama-tiny");
}

TEST(ServeDeviceArgsTest, DefaultsFollowVllmAndTheMachine) {
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::EngineArgs& e = p->args->engine;
  EXPECT_EQ(e.device,
            worker::VisibleCudaDevices() > 0 ? config::Device::kCuda : config::Device::kCpu);
  EXPECT_EQ(e.dtype, config::ModelDType::kAuto);
  EXPECT_DOUBLE_EQ(e.gpu_memory_utilization, 0.9);
  EXPECT_FALSE(e.enforce_eager);
}

TEST(ServeDeviceArgsTest, FlagsReachTheEngineArgs) {
  auto p = Parse(
      {"--device", "cpu", "--dtype", "half", "--gpu-memory-utilization", "0.5", "--enforce-eager"});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::EngineArgs& e = p->args->engine;
  EXPECT_EQ(e.device, config::Device::kCpu);
  EXPECT_EQ(e.dtype, config::ModelDType::kFloat16);
  EXPECT_DOUBLE_EQ(e.gpu_memory_utilization, 0.5);
  EXPECT_TRUE(e.enforce_eager);
  p = Parse({"--dtype", "bfloat16"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->engine.dtype, config::ModelDType::kBFloat16);
}

TEST(ServeDeviceArgsTest, CudaWithoutAGpuNamesTheFlag) {
  auto p = Parse({"--device", "cuda"});
  if (worker::VisibleCudaDevices() > 0) {
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->args->engine.device, config::Device::kCuda);
    return;
  }
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("--device cuda"));
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
