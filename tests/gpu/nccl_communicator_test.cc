// NcclCommunicator: argument checks and unique ids (no GPU needed); a one-rank group is the
// identity for every element type; with two GPUs, two ranks (threads, one GPU each) sum
// exactly for float, half and bf16 at odd counts; AllReduceSum captured into a CUDA graph and
// replayed reduces the data present at replay time; a group whose peer never joins fails
// with DeadlineExceeded. GPU cases skip themselves when no (or only one) device is visible.
#include "kernels/cuda/nccl_communicator.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_probe.h"

namespace vllm::kernels::cuda {
namespace {

// Small integers: exact in every element type, and so are sums of two of them.
float Value(int32_t rank, size_t i) {
  return static_cast<float>(static_cast<int>(i % 13) - 6 + 3 * rank);
}

// Host buffer of `count` elements of `dtype` holding Value(rank, i), as bytes.
std::vector<uint8_t> HostValues(GemmDType dtype, int32_t rank, size_t count) {
  const size_t elem = dtype == GemmDType::kFloat32 ? 4 : 2;
  std::vector<uint8_t> bytes(count * elem);
  for (size_t i = 0; i < count; ++i) {
    const float v = Value(rank, i);
    if (dtype == GemmDType::kFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else if (dtype == GemmDType::kFloat16) {
      const __half h = __float2half_rn(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      const __nv_bfloat16 b = __float2bfloat16_rn(v);
      std::memcpy(&bytes[i * 2], &b, 2);
    }
  }
  return bytes;
}

float ElementAt(GemmDType dtype, const std::vector<uint8_t>& bytes, size_t i) {
  if (dtype == GemmDType::kFloat32) {
    float v;
    std::memcpy(&v, &bytes[i * 4], 4);
    return v;
  }
  if (dtype == GemmDType::kFloat16) {
    __half h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return __half2float(h);
  }
  __nv_bfloat16 b;
  std::memcpy(&b, &bytes[i * 2], 2);
  return __bfloat162float(b);
}

const char* Name(GemmDType dtype) {
  return dtype == GemmDType::kFloat32 ? "float" : dtype == GemmDType::kFloat16 ? "half" : "bf16";
}

absl::Status Cuda(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

#define RETURN_IF_ERROR(expr)        \
  do {                               \
    absl::Status vllm_s = (expr);    \
    if (!vllm_s.ok()) return vllm_s; \
  } while (0)

// Checks that `bytes` hold sum over ranks of Value(rank, i).
absl::Status CheckSum(GemmDType dtype, const std::vector<uint8_t>& bytes, size_t count,
                      int32_t world_size, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int32_t r = 0; r < world_size; ++r) expected += Value(r, i);
    const float got = ElementAt(dtype, bytes, i);
    if (got != expected) {
      return absl::InternalError(absl::StrCat(what, " ", Name(dtype), " element ", i, " of ", count,
                                              ": got ", got, ", expected ", expected));
    }
  }
  return absl::OkStatus();
}

// One rank's part of the sum test: all-reduces every (dtype, count) eagerly, then through a
// captured graph. Runs on device `device` in the calling thread.
absl::Status RunRank(const std::string& id, int32_t rank, int32_t world_size, int device) {
  RETURN_IF_ERROR(Cuda("cudaSetDevice", cudaSetDevice(device)));
  auto comm = NcclCommunicator::Create(id, rank, world_size, absl::Seconds(60));
  if (!comm.ok()) return comm.status();
  if ((*comm)->rank() != rank || (*comm)->world_size() != world_size) {
    return absl::InternalError("rank or world size differ from the ones asked for");
  }
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(
      Cuda("cudaStreamCreate", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
  absl::Status result, mismatch;
  for (GemmDType dtype : {GemmDType::kFloat32, GemmDType::kFloat16, GemmDType::kBFloat16}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{1000003}}) {
      std::vector<uint8_t> host = HostValues(dtype, rank, count);
      void* d = nullptr;
      result = Cuda("cudaMalloc", cudaMalloc(&d, host.size()));
      if (!result.ok()) break;
      // On `stream`: a pageable cudaMemcpy runs on the legacy stream and may return before its
      // DMA lands, which the non-blocking `stream` would not wait for.
      result = Cuda("upload",
                    cudaMemcpyAsync(d, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
      if (result.ok()) result = (*comm)->AllReduceSum(d, count, dtype, stream);
      if (result.ok()) result = Cuda("sync", cudaStreamSynchronize(stream));
      std::vector<uint8_t> out(host.size());
      if (result.ok()) {
        result = Cuda("download", cudaMemcpy(out.data(), d, out.size(), cudaMemcpyDeviceToHost));
      }
      // A wrong sum is recorded but the loop goes on: a rank that stopped early would leave
      // its peer waiting in the next collective forever.
      if (result.ok() && mismatch.ok()) {
        mismatch = CheckSum(dtype, out, count, world_size, absl::StrCat("rank ", rank, " eager"));
      }
      cudaFree(d);
      if (!result.ok()) break;
    }
    if (!result.ok()) break;
  }
  if (result.ok()) result = mismatch;
  cudaStreamDestroy(stream);
  return result;
}

// One rank's part of the graph test: captures {copy src -> buf; AllReduceSum(buf)}, writes
// new values into src, replays twice, and checks buf each time.
absl::Status RunGraphRank(const std::string& id, int32_t rank, int32_t world_size, int device) {
  RETURN_IF_ERROR(Cuda("cudaSetDevice", cudaSetDevice(device)));
  auto comm = NcclCommunicator::Create(id, rank, world_size, absl::Seconds(60));
  if (!comm.ok()) return comm.status();
  constexpr GemmDType kType = GemmDType::kBFloat16;
  constexpr size_t kCount = 12345;
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(
      Cuda("cudaStreamCreate", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
  void *src = nullptr, *buf = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  absl::Status mismatch;  // recorded, but both replays still run (see RunRank)
  absl::Status result = Cuda("cudaMalloc", cudaMalloc(&src, kCount * 2));
  if (result.ok()) result = Cuda("cudaMalloc", cudaMalloc(&buf, kCount * 2));
  // NCCL connects lazily: one eager collective first, so capture records only the kernel.
  if (result.ok()) result = Cuda("memset", cudaMemsetAsync(buf, 0, kCount * 2, stream));
  if (result.ok()) result = (*comm)->AllReduceSum(buf, kCount, kType, stream);
  if (result.ok()) result = Cuda("sync", cudaStreamSynchronize(stream));
  if (result.ok()) {
    result = Cuda("cudaStreamBeginCapture",
                  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    if (result.ok()) {
      absl::Status captured = Cuda(
          "capture copy", cudaMemcpyAsync(buf, src, kCount * 2, cudaMemcpyDeviceToDevice, stream));
      if (captured.ok()) captured = (*comm)->AllReduceSum(buf, kCount, kType, stream);
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      result = captured.ok() ? Cuda("cudaStreamEndCapture", end) : captured;
    }
  }
  if (result.ok()) result = Cuda("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2 && result.ok(); ++replay) {
    // Different data at each replay: replay rank r's values shifted by `replay` ranks.
    std::vector<uint8_t> host = HostValues(kType, rank + replay, kCount);
    result = Cuda("upload", cudaMemcpyAsync(src, host.data(), host.size(), cudaMemcpyHostToDevice,
                                            stream));  // ordered before the replay (see RunRank)
    if (result.ok()) result = Cuda("cudaGraphLaunch", cudaGraphLaunch(exec, stream));
    if (result.ok()) result = Cuda("sync", cudaStreamSynchronize(stream));
    std::vector<uint8_t> out(host.size());
    if (result.ok()) {
      result = Cuda("download", cudaMemcpy(out.data(), buf, out.size(), cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < kCount && result.ok() && mismatch.ok(); ++i) {
      float expected = 0;
      for (int32_t r = 0; r < world_size; ++r) expected += Value(r + replay, i);
      if (ElementAt(kType, out, i) != expected) {
        mismatch = absl::InternalError(absl::StrCat("rank ", rank, " replay ", replay, " element ",
                                                    i, ": got ", ElementAt(kType, out, i),
                                                    ", expected ", expected));
      }
    }
  }
  if (result.ok()) result = mismatch;
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaFree(src);
  cudaFree(buf);
  cudaStreamDestroy(stream);
  return result;
}

// Runs `fn(id, rank, world_size, device = rank)` for every rank in its own thread.
template <typename Fn>
std::vector<absl::Status> RunGroup(int32_t world_size, Fn fn) {
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  std::vector<absl::Status> results(world_size, id.status());
  if (!id.ok()) return results;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] { results[r] = fn(*id, r, world_size, r); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(NcclUniqueIdTest, FreshIdsAreFullSizedAndDistinct) {
  absl::StatusOr<std::string> a = NewNcclUniqueId();
  absl::StatusOr<std::string> b = NewNcclUniqueId();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->size(), kNcclUniqueIdBytes);
  EXPECT_EQ(kNcclUniqueIdBytes, size_t{NCCL_UNIQUE_ID_BYTES});
  EXPECT_NE(*a, *b);
}

TEST(NcclCommunicatorTest, RejectsBadArgumentsBeforeTouchingNccl) {
  auto short_id = NcclCommunicator::Create(std::string(5, 'x'), 0, 1);
  EXPECT_EQ(short_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_id.status().message().find("128"), std::string::npos) << short_id.status();
  const std::string id(kNcclUniqueIdBytes, '\0');
  EXPECT_EQ(NcclCommunicator::Create(id, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(id, -1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclCommunicator::Create(id, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
};

// GTEST_SKIP returns from the function it is in: this must be a macro to end the test.
#define SKIP_UNLESS_GPUS(n)                                                          \
  if (CudaDeviceCount() < (n)) {                                                     \
    GTEST_SKIP() << "needs " << (n) << " GPUs, " << CudaDeviceCount() << " visible"; \
  }

TEST_F(NcclGpuTest, WorldSizeOneIsIdentityForEveryDType) {
  const std::vector<absl::Status> results = RunGroup(1, RunRank);
  EXPECT_TRUE(results[0].ok()) << results[0];
}

TEST_F(NcclGpuTest, ZeroCountIsANoOpAndNullDataIsRejected) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = NcclCommunicator::Create(*id, 0, 1);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE((*comm)->AllReduceSum(nullptr, 0, GemmDType::kFloat32, nullptr).ok());
  EXPECT_EQ((*comm)->AllReduceSum(nullptr, 3, GemmDType::kFloat32, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NcclGpuTest, WorldSizeOneGraphReplayUsesNewData) {
  const std::vector<absl::Status> results = RunGroup(1, RunGraphRank);
  EXPECT_TRUE(results[0].ok()) << results[0];
}

TEST_F(NcclGpuTest, MissingPeerGivesDeadlineExceeded) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  // Rank 1 never joins.
  auto comm = NcclCommunicator::Create(*id, 0, 2, absl::Seconds(3));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
}

TEST_F(NcclGpuTest, TwoRanksSumEveryDTypeAndOddCounts) {
  SKIP_UNLESS_GPUS(2);
  const std::vector<absl::Status> results = RunGroup(2, RunRank);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

TEST_F(NcclGpuTest, TwoRanksGraphReplaySums) {
  SKIP_UNLESS_GPUS(2);
  const std::vector<absl::Status> results = RunGroup(2, RunGraphRank);
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

}  // namespace
}  // namespace vllm::kernels::cuda
