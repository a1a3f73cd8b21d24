// The linear layer on the GPU: y = x · wᵀ (+ bias) through cuBLASLt, with Hugging Face's
// weight layout, as kernels::cpu::Linear.
//
// Tuning (CublasLtGemm below): the candidates of a decode-sized shape run interleaved, 3
// rounds, each keeping its best time, so a clock change during the tuning cannot favour one.
// The timing waits for the caller's stream, hence only outside a graph capture (the worker's
// eager warm-up before each capture is that first call). Why (docs/DECISIONS.md, 2026-11-26;
// docs/BENCHMARKS.md): on an H100 the heuristic's first pick read the 8B model's m = 1
// weights at 50-92 % of the copy bandwidth; our GEMV wins every m = 1 shape and loses at
// m = 8, taking batch-1 decode with graphs from 1.25× to 1.17× the weight-read roofline.
#ifndef VLLM_KERNELS_CUDA_GEMM_H_
#define VLLM_KERNELS_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vllm::kernels::cuda {

// Element type of x, w, bias and y (all four share it). Accumulation is always float32;
// float32 GEMMs use CUBLAS_COMPUTE_32F (true fp32, no TF32), so they match the CPU to
// rounding.
enum class GemmDType { kFloat32, kFloat16, kBFloat16 };

// One cuBLASLt handle, one device workspace, and a cache of (descriptors, algorithm) per
// (m, n, k, dtype, has_bias): the heuristic runs on the first call of a shape only, so later
// calls (and CUDA graph capture of them) do no host-side search. For decode-sized shapes
// (m <= kTuneMaxM) the first call outside a stream capture also times cuBLASLt's top
// kTuneCandidates algorithms on the call's own buffers and keeps the fastest (the heuristic's
// first pick is often not the fastest for skinny, bandwidth-bound GEMMs), and, for m <= 8 in
// half types, our own skinny GEMV (gemv.h) beside them; the environment
// variable VLLM_CUBLASLT_TUNE=0 turns this off.
//
// Thread-safety: not thread-safe (the cache and the workspace are shared); use one instance
// per stream or serialise. The workspace is reused by every call, so calls on different
// streams through one instance would race: keep an instance's calls on one stream.
class CublasLtGemm {
 public:
  // Default workspace: 32 MiB, what cuBLAS recommends for Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Creates the handle and allocates the workspace on the current device. Internal error
  // when cuBLASLt or cudaMalloc fails (no device, out of memory).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(
      size_t workspace_bytes = kDefaultWorkspaceBytes);

  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;
  // Frees the cached descriptors, the workspace and the handle. Work still queued that uses
  // the workspace must have finished (synchronise the stream first).
  ~CublasLtGemm();

  // Enqueues y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n] when bias is non-null) on `stream`; all
  // row-major device buffers of `dtype`, 16-byte aligned (cudaMalloc'd buffers are).
  // m == 0 or n == 0 is a no-op. InvalidArgument on negative sizes, k == 0 or misaligned
  // pointers; Internal when cuBLASLt finds no algorithm or the launch fails.
  [[nodiscard]] absl::Status Linear(GemmDType dtype, const void* x, const void* w, const void* bias,
                                    void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

  // Number of distinct shapes planned so far (for tests of the cache).
  size_t num_cached_plans() const { return plans_.size(); }

  static constexpr int64_t kTuneMaxM = 256;
  static constexpr int kTuneCandidates = 8;

 private:
  // Descriptors and the chosen algorithm for one shape.
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr;  // w as column-major [k, n], transposed
    cublasLtMatrixLayout_t b = nullptr;  // x as column-major [k, m]
    cublasLtMatrixLayout_t c = nullptr;  // y as column-major [n, m]
    cublasLtMatmulAlgo_t algo{};
    // The heuristic's candidates, best first, until the shape has been timed (then empty).
    std::vector<cublasLtMatmulAlgo_t> candidates;
    bool gemv_candidate = false;  // the skinny GEMV (gemv.h) is timed too
    bool use_gemv = false;        // it won: Linear launches it instead of cuBLASLt
  };
  // Times each candidate of `plan` on the call's buffers and keeps the fastest.
  absl::Status Tune(Plan& plan, GemmDType dtype, const void* x, const void* w, const void* bias,
                    void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

  using Key = std::tuple<int64_t, int64_t, int64_t, GemmDType, bool>;

  CublasLtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);
  absl::StatusOr<Plan*> GetPlan(GemmDType dtype, int64_t m, int64_t n, int64_t k, bool has_bias);
  static void DestroyPlan(Plan& plan);

  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_GEMM_H_
