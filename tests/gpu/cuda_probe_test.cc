#include "kernels/cuda/cuda_probe.h"

#include "gtest/gtest.h"

namespace vllm::kernels {
namespace {

class CudaProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

TEST_F(CudaProbeTest, KernelCublasLtAndNcclAgreeWithTheHost) {
  const CudaProbeResult r = RunCudaProbe();
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.device_name.empty());
  EXPECT_LT(r.max_gemm_error, 1e-3);
  std::printf("device: %s, GEMM max error %.2e\n", r.device_name.c_str(), r.max_gemm_error);
}

}  // namespace
}  // namespace vllm::kernels
