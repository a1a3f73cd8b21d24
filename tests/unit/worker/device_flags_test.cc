// --device / --dtype / --gpu-memory-utilization / --enforce-eager on the worker side: parsing
// with vLLM's names, worker-proc's flags and the config it reads from its descriptor, and --device
// cuda without a GPU failing with an error that names the flag (never an abort). Runs without a
// GPU.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/config_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/communicator.h"
#include "worker/worker.h"
#include "worker/worker_proc.h"

namespace vllm::worker {
namespace {

using ::testing::HasSubstr;

TEST(DeviceFlagsTest, ParsesDevicesAndDtypesWithVllmNames) {
  EXPECT_EQ(*ParseDevice("auto"), Device::kAuto);
  EXPECT_EQ(*ParseDevice("cpu"), Device::kCpu);
  EXPECT_EQ(*ParseDevice("cuda"), Device::kCuda);
  auto bad = ParseDevice("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--device"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cuda"));

  EXPECT_EQ(*ParseModelDType("auto"), ModelDType::kAuto);
  EXPECT_EQ(*ParseModelDType("float"), ModelDType::kFloat32);
  EXPECT_EQ(*ParseModelDType("float32"), ModelDType::kFloat32);
  EXPECT_EQ(*ParseModelDType("half"), ModelDType::kFloat16);
  EXPECT_EQ(*ParseModelDType("float16"), ModelDType::kFloat16);
  EXPECT_EQ(*ParseModelDType("bfloat16"), ModelDType::kBFloat16);
  auto bad_dtype = ParseModelDType("int4");
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_THAT(std::string(bad_dtype.status().message()), HasSubstr("--dtype"));
  for (ModelDType d :
       {ModelDType::kAuto, ModelDType::kFloat32, ModelDType::kBFloat16, ModelDType::kFloat16}) {
    EXPECT_EQ(*ParseModelDType(ModelDTypeName(d)), d);
  }
  for (Device d : {Device::kAuto, Device::kCpu, Device::kCuda}) {
    EXPECT_EQ(*ParseDevice(DeviceName(d)), d);
  }
}

TEST(DeviceFlagsTest, AutoIsCudaOnlyWithAGpu) {
  EXPECT_EQ(*ResolveDevice(Device::kCpu), Device::kCpu);
  const Device expected = VisibleCudaDevices() > 0 ? Device::kCuda : Device::kCpu;
  EXPECT_EQ(*ResolveDevice(Device::kAuto), expected);
  auto cuda = ResolveDevice(Device::kCuda);
  if (VisibleCudaDevices() > 0) {
    EXPECT_TRUE(cuda.ok()) << cuda.status();
  } else {
    ASSERT_FALSE(cuda.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(cuda.status()));
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr("--device cuda"));
  }
}

TEST(DeviceFlagsTest, CudaWorkerWithoutAGpuIsAnErrorNotAnAbort) {
  if (VisibleCudaDevices() > 0) GTEST_SKIP() << "a GPU is visible";
  config::VllmConfig config;
  config.model.model = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";
  config.model.max_model_len = 256;
  config.scheduler.max_num_batched_tokens = 256;
  config.device.device = Device::kCuda;
  kernels::SingleRankCommunicator comm;
  auto worker = Worker::Create(config, &comm);
  ASSERT_FALSE(worker.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(worker.status()));
  EXPECT_THAT(std::string(worker.status().message()), HasSubstr("--device"));
  // A device the engine factory did not resolve is refused the same way.
  config.device.device = Device::kAuto;
  worker = Worker::Create(config, &comm);
  ASSERT_FALSE(worker.ok());
  EXPECT_THAT(std::string(worker.status().message()), HasSubstr("--device"));
}

// ToWorkerProcFlags with --config-fd pointing at a pipe that holds `config`.
std::vector<std::string> FlagsWithConfig(const WorkerProcOptions& o,
                                         const config::VllmConfig& config) {
  std::vector<std::string> flags = ToWorkerProcFlags(o);
  absl::StatusOr<int> fd = config::MakeConfigPipe(config);
  EXPECT_TRUE(fd.ok()) << fd.status();
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == "--config-fd") flags[i + 1] = absl::StrCat(fd.value_or(-1));
  }
  return flags;
}

TEST(DeviceFlagsTest, WorkerProcGetsItsFlagsAndTheWholeConfig) {
  WorkerProcOptions o;
  o.rank = 1;
  o.broadcast_handle = "handle";
  o.ready_address = "ipc:///tmp/ready";
  o.comm_spec = "spec";
  o.parent_pid = 42;
  o.startup_timeout = absl::Seconds(77);
  config::VllmConfig c;
  c.model.model = "/models/m";
  c.parallel.tensor_parallel_size = 2;
  c.device.device = Device::kCuda;
  c.model.dtype = ModelDType::kBFloat16;
  c.cache.gpu_memory_utilization = 0.5;
  c.model.enforce_eager = true;
  c.model.max_model_len = 4096;
  c.scheduler.max_num_batched_tokens = 8192;
  c.scheduler.max_num_seqs = 64;
  const std::vector<std::string> flags = ToWorkerProcFlags(o);
  // Only this process's own values travel in argv; the config is not spelled out.
  for (const char* absent : {"--model", "--dtype", "--device", "--enforce-eager", "--world-size"}) {
    EXPECT_THAT(flags, ::testing::Not(::testing::Contains(absent)));
  }
  auto parsed = ParseWorkerProcFlags(FlagsWithConfig(o, c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->rank, 1);
  EXPECT_EQ(parsed->world_size(), 2);
  EXPECT_EQ(parsed->broadcast_handle, "handle");
  EXPECT_EQ(parsed->ready_address, "ipc:///tmp/ready");
  EXPECT_EQ(parsed->comm_spec, "spec");
  EXPECT_EQ(parsed->parent_pid, 42);
  EXPECT_EQ(parsed->startup_timeout, absl::Seconds(77));
  EXPECT_EQ(parsed->config, c);  // the worker reads this config itself
}

TEST(DeviceFlagsTest, BadWorkerProcValuesNameTheFlag) {
  WorkerProcOptions o;
  o.broadcast_handle = "h";
  o.ready_address = "a";
  o.parent_pid = 1;
  config::VllmConfig c;
  c.model.model = "m";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--rank", "-1"},     {"--parent-pid", "0"},  {"--startup-timeout-s", "0"},
      {"--config-fd", "x"}, {"--dtype", "float16"},  // the config is not re-spelled in flags any
                                                     // more
  };
  for (const auto& [flag, value] : cases) {
    std::vector<std::string> flags = FlagsWithConfig(o, c);
    flags.push_back(flag);
    flags.push_back(value);
    auto parsed = ParseWorkerProcFlags(flags);
    ASSERT_FALSE(parsed.ok()) << flag << " " << value;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(flag)) << value;
  }
  // A rank outside the config's world, and a config that is not one.
  o.rank = 1;
  auto parsed = ParseWorkerProcFlags(FlagsWithConfig(o, c));
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("world size"));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "junk", 4), 4);
  close(fds[1]);
  o.rank = 0;
  std::vector<std::string> flags = ToWorkerProcFlags(o);
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == "--config-fd") flags[i + 1] = absl::StrCat(fds[0]);
  }
  parsed = ParseWorkerProcFlags(flags);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--config-fd"));
}

}  // namespace
}  // namespace vllm::worker
