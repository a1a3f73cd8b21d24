// --device / --dtype / --gpu-memory-utilization / --enforce-eager on the worker side: parsing
// with vLLM's names, the worker-proc flag round trip, and --device cuda without a GPU failing
// with an error that names the flag (never an abort). Runs without a GPU.
#include <string>
#include <vector>

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
  WorkerConfig config;
  config.model = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";
  config.device = Device::kCuda;
  kernels::SingleRankCommunicator comm;
  auto worker = Worker::Create(config, &comm);
  ASSERT_FALSE(worker.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(worker.status()));
  EXPECT_THAT(std::string(worker.status().message()), HasSubstr("--device"));
}

TEST(DeviceFlagsTest, WorkerProcFlagsRoundTrip) {
  WorkerProcOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.broadcast_handle = "handle";
  o.ready_address = "ipc:///tmp/ready";
  o.parent_pid = 42;
  o.worker.model = "/models/m";
  o.worker.device = Device::kCuda;
  o.worker.dtype = ModelDType::kBFloat16;
  o.worker.gpu_memory_utilization = 0.5;
  o.worker.enforce_eager = true;
  o.worker.max_model_len = 4096;
  o.worker.max_num_batched_tokens = 8192;
  o.worker.max_num_seqs = 64;
  auto parsed = ParseWorkerProcFlags(ToWorkerProcFlags(o));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->worker.device, Device::kCuda);
  EXPECT_EQ(parsed->worker.dtype, ModelDType::kBFloat16);
  EXPECT_DOUBLE_EQ(parsed->worker.gpu_memory_utilization, 0.5);
  EXPECT_TRUE(parsed->worker.enforce_eager);
  EXPECT_EQ(parsed->worker.max_model_len, 4096);
  EXPECT_EQ(parsed->worker.max_num_batched_tokens, 8192);
  EXPECT_EQ(parsed->worker.max_num_seqs, 64);

  // Defaults survive the trip too.
  o.worker = WorkerConfig{};
  o.worker.model = "/models/m";
  parsed = ParseWorkerProcFlags(ToWorkerProcFlags(o));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->worker.device, Device::kCpu);
  EXPECT_EQ(parsed->worker.dtype, ModelDType::kAuto);
  EXPECT_DOUBLE_EQ(parsed->worker.gpu_memory_utilization, 0.9);
  EXPECT_FALSE(parsed->worker.enforce_eager);
}

TEST(DeviceFlagsTest, BadWorkerProcValuesNameTheFlag) {
  WorkerProcOptions o;
  o.broadcast_handle = "h";
  o.ready_address = "a";
  o.parent_pid = 1;
  o.worker.model = "m";
  const std::vector<std::string> base = ToWorkerProcFlags(o);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--device", "tpu"},
      {"--dtype", "int8"},
      {"--gpu-memory-utilization", "0"},
      {"--gpu-memory-utilization", "1.5"},
      {"--gpu-memory-utilization", "most"},
      {"--enforce-eager", "2"},
      {"--max-num-seqs", "-1"},
  };
  for (const auto& [flag, value] : cases) {
    std::vector<std::string> flags = base;
    flags.push_back(flag);
    flags.push_back(value);
    auto parsed = ParseWorkerProcFlags(flags);
    ASSERT_FALSE(parsed.ok()) << flag << " " << value;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(flag)) << value;
  }
}

}  // namespace
}  // namespace vllm::worker
