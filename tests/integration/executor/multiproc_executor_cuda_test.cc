// MultiprocExecutor on CUDA with TP > 1: the executor makes the NCCL id and sends it as the
// first broadcast call (init_device); each worker drives GPU `rank`. Runs everywhere:
//   - no GPU (or no CUDA build): --device cuda is refused before any process starts;
//   - N GPUs: TP = N + 1 fails at start-up naming rank N (it has no GPU), while the ranks that
//     have one wait in NCCL's initialisation for it — they are killed, nothing is left;
//   - two or more GPUs: TP = 2 forms the NCCL group and answers calls.
// After every test no child process and no new /dev/shm entry remains.
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "executor/multiproc_executor.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "worker/worker.h"

namespace vllm::executor {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";

std::vector<pid_t> Children() { return testing::ChildrenOf(getpid()); }

MultiprocExecutorOptions CudaOptions(int32_t tp) {
  MultiprocExecutorOptions o;
  o.config.model.model = kFixtures / "llama_gqa";
  o.config.device.device = config::Device::kCuda;
  o.config.model.dtype = config::ModelDType::kFloat32;
  o.config.model.max_model_len = 128;
  o.config.scheduler.max_num_batched_tokens = 64;
  o.config.scheduler.max_num_seqs = 8;
  o.config.cache.gpu_memory_utilization = 0.3;
  o.config.parallel.tensor_parallel_size = tp;
  o.worker_binary = testing::BinDir() + "/vllm-launch";
  o.startup_timeout = absl::Seconds(120);
  return o;
}

class MultiprocExecutorCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = testing::ShmEntries(); }
  void TearDown() override {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while ((!Children().empty() || testing::ShmEntries() != shm_before_) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
    }
    EXPECT_TRUE(Children().empty()) << "worker processes left behind";
    EXPECT_EQ(testing::ShmEntries(), shm_before_) << "shared memory left behind";
  }
  std::set<std::string> shm_before_;
};

TEST_F(MultiprocExecutorCudaTest, MoreRanksThanGpusFailsNamingTheRankWithoutAHang) {
  const int gpus = worker::VisibleCudaDevices();
  const int32_t tp = std::max(2, gpus + 1);
  const absl::Time start = absl::Now();
  auto executor = MultiprocExecutor::Create(CudaOptions(tp));
  ASSERT_FALSE(executor.ok());
  if (gpus == 0) {
    // Refused by the executor itself: nothing was spawned.
    EXPECT_EQ(executor.status().code(), absl::StatusCode::kInvalidArgument) << executor.status();
    EXPECT_NE(executor.status().message().find("--device"), std::string::npos) << executor.status();
  } else {
    EXPECT_NE(executor.status().message().find(absl::StrCat("rank ", gpus)), std::string::npos)
        << executor.status();
  }
  // The ranks with a GPU were blocked in NCCL's initialisation: they were killed, not awaited.
  EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << executor.status();
}

TEST_F(MultiprocExecutorCudaTest, TwoRanksFormTheNcclGroupAndAnswer) {
  if (worker::VisibleCudaDevices() < 2) {
    GTEST_SKIP() << "needs 2 GPUs, " << worker::VisibleCudaDevices() << " visible";
  }
  auto executor = MultiprocExecutor::Create(CudaOptions(2));
  ASSERT_TRUE(executor.ok()) << executor.status();
  auto replies = (*executor)->CollectiveRpc("echo", "hi", absl::Seconds(30));
  ASSERT_TRUE(replies.ok()) << replies.status();
  EXPECT_EQ(*replies, (std::vector<std::string>{"hi", "hi"}));
  auto spec = (*executor)->GetKVCacheSpec();
  ASSERT_TRUE(spec.ok()) << spec.status();
  (*executor)->Shutdown();
}

}  // namespace
}  // namespace vllm::executor
