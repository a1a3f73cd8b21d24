// cuBLASLt GEMM for row-major x · wᵀ. Row-major [r, c] is column-major [c, r] with the same
// leading dimension, so y[m, n] = x[m, k] · w[n, k]ᵀ is, column-major, Y[n, m] = Wᵀ · X
// with W = w as [k, n] (transposed: op(A) = Aᵀ) and X = x as [k, m]; cuBLASLt's bias
// epilogue adds bias along Y's rows, i.e. bias[n] per output feature.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/gemv.h"

namespace vllm::kernels::cuda {
namespace {

cudaDataType_t CudaType(GemmDType dtype) {
  switch (dtype) {
    case GemmDType::kFloat32:
      return CUDA_R_32F;
    case GemmDType::kFloat16:
      return CUDA_R_16F;
    case GemmDType::kBFloat16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

absl::Status CublasError(const char* what, cublasStatus_t s) {
  return absl::InternalError(absl::StrCat(what, " failed: cuBLAS status ", static_cast<int>(s)));
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool TuningEnabled() {
  static const bool kEnabled = [] {
    const char* v = std::getenv("VLLM_CUBLASLT_TUNE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return kEnabled;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(size_t workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
    return CublasError("cublasLtCreate", s);
  }
  void* workspace = nullptr;
  if (workspace_bytes > 0) {
    if (cudaError_t e = cudaMalloc(&workspace, workspace_bytes); e != cudaSuccess) {
      cublasLtDestroy(handle);
      return absl::InternalError(
          absl::StrCat("cudaMalloc of the GEMM workspace: ", cudaGetErrorString(e)));
    }
  }
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(handle, workspace, workspace_bytes));
}

CublasLtGemm::CublasLtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

CublasLtGemm::~CublasLtGemm() {
  for (auto& [key, plan] : plans_) DestroyPlan(plan);
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

void CublasLtGemm::DestroyPlan(Plan& plan) {
  if (plan.c != nullptr) cublasLtMatrixLayoutDestroy(plan.c);
  if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.op != nullptr) cublasLtMatmulDescDestroy(plan.op);
  plan = Plan{};
}

absl::StatusOr<CublasLtGemm::Plan*> CublasLtGemm::GetPlan(GemmDType dtype, int64_t m, int64_t n,
                                                          int64_t k, bool has_bias) {
  const Key key{m, n, k, dtype, has_bias};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;

  Plan plan;
  const cudaDataType_t type = CudaType(dtype);
  // Builds the plan step by step; the first failure is reported and the partial plan freed.
  auto build = [&]() -> absl::Status {
    cublasStatus_t s = cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulDescCreate", s);
    const cublasOperation_t trans_a = CUBLAS_OP_T;
    s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                       sizeof(trans_a));
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("setting TRANSA", s);
    if (has_bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof(epilogue));
      if (s != CUBLAS_STATUS_SUCCESS) return CublasError("setting the bias epilogue", s);
      s = cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                         sizeof(type));
      if (s != CUBLAS_STATUS_SUCCESS) return CublasError("setting the bias type", s);
    }
    s = cublasLtMatrixLayoutCreate(&plan.a, type, static_cast<uint64_t>(k),
                                   static_cast<uint64_t>(n), k);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatrixLayoutCreate(w)", s);
    s = cublasLtMatrixLayoutCreate(&plan.b, type, static_cast<uint64_t>(k),
                                   static_cast<uint64_t>(m), k);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatrixLayoutCreate(x)", s);
    s = cublasLtMatrixLayoutCreate(&plan.c, type, static_cast<uint64_t>(n),
                                   static_cast<uint64_t>(m), n);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatrixLayoutCreate(y)", s);

    cublasLtMatmulPreference_t pref = nullptr;
    s = cublasLtMatmulPreferenceCreate(&pref);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulPreferenceCreate", s);
    // The plan is reused for any pointers, so it may assume only what Linear checks: 16 bytes.
    const uint32_t alignment = 16;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &workspace_bytes_, sizeof(workspace_bytes_));
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment));
    }
    const int wanted = m <= kTuneMaxM && TuningEnabled() ? kTuneCandidates : 1;
    cublasLtMatmulHeuristicResult_t results[kTuneCandidates]{};
    int found = 0;
    s = cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref,
                                       wanted, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulAlgoGetHeuristic", s);
    if (found == 0) {
      return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for ", m, "x", n, "x", k));
    }
    plan.algo = results[0].algo;
    plan.gemv_candidate = wanted > 1 && SkinnyGemvSupports(dtype, m, n, k);
    if (found > 1 || plan.gemv_candidate) {
      for (int i = 0; i < found; ++i) {
        if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status st = build(); !st.ok()) {
    DestroyPlan(plan);
    return st;
  }
  auto [it, inserted] = plans_.emplace(key, plan);
  return &it->second;
}

absl::Status CublasLtGemm::Linear(GemmDType dtype, const void* x, const void* w, const void* bias,
                                  void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: negative shape ", m, "x", n, "x", k));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) return absl::InvalidArgumentError("Linear: k == 0 is not supported");
  if (!Aligned16(x) || !Aligned16(w) || !Aligned16(y) || (bias != nullptr && !Aligned16(bias))) {
    return absl::InvalidArgumentError("Linear: buffers must be 16-byte aligned");
  }
  absl::StatusOr<Plan*> plan = GetPlan(dtype, m, n, k, bias != nullptr);
  if (!plan.ok()) return plan.status();
  Plan& p = **plan;
  if (bias != nullptr) {
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof(bias));
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError("setting the bias pointer", s);
  }
  if (!p.candidates.empty()) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
        capturing == cudaStreamCaptureStatusNone) {
      VLLM_RETURN_IF_ERROR(Tune(p, dtype, x, w, bias, y, m, n, k, stream));
    }
  }
  if (p.use_gemv) {
    if (cudaError_t e = LaunchSkinnyGemv(dtype, x, w, bias, y, m, n, k, stream); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("skinny GEMV launch: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t s = cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y,
                                          p.c, &p.algo, workspace_, workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmul", s);
  return absl::OkStatus();
}

// Each candidate (cuBLASLt's, then the GEMV when eligible) runs once untimed (one that is
// refused drops out), then kRounds rounds time kReps runs of every candidate between two
// events, round-robin, and each keeps its smallest time: interleaving keeps a clock change
// during the tuning from favouring whichever candidate ran at the faster clock. Runs on the
// caller's stream and waits for it, so only outside a capture, and once per shape.
absl::Status CublasLtGemm::Tune(Plan& p, GemmDType dtype, const void* x, const void* w,
                                const void* bias, void* y, int64_t m, int64_t n, int64_t k,
                                cudaStream_t stream) {
  constexpr int kRounds = 3;
  constexpr int kReps = 3;
  std::vector<cublasLtMatmulAlgo_t> algos;
  algos.swap(p.candidates);
  const bool with_gemv = p.gemv_candidate;
  p.gemv_candidate = false;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  // Candidate i < algos.size() is cuBLASLt's algos[i]; i == algos.size() is the GEMV.
  auto launch = [&](size_t i) -> cudaError_t {
    if (i == algos.size()) return LaunchSkinnyGemv(dtype, x, w, bias, y, m, n, k, stream);
    const cublasStatus_t s = cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y,
                                            p.c, &algos[i], workspace_, workspace_bytes_, stream);
    return s == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
  };
  const size_t count = algos.size() + (with_gemv ? 1 : 0);
  std::vector<float> best(count, std::numeric_limits<float>::infinity());
  std::vector<bool> usable(count, false);
  for (size_t i = 0; i < count; ++i) usable[i] = launch(i) == cudaSuccess;

  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    if (start != nullptr) cudaEventDestroy(start);
    return absl::InternalError("cudaEventCreate failed while tuning a GEMM");
  }
  cudaError_t err = cudaSuccess;
  for (int round = 0; round < kRounds && err == cudaSuccess; ++round) {
    for (size_t i = 0; i < count && err == cudaSuccess; ++i) {
      if (!usable[i]) continue;
      err = cudaEventRecord(start, stream);
      for (int r = 0; r < kReps && err == cudaSuccess; ++r) err = launch(i);
      if (err == cudaSuccess) err = cudaEventRecord(stop, stream);
      if (err == cudaSuccess) err = cudaEventSynchronize(stop);
      float ms = 0;
      if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
      if (err == cudaSuccess) best[i] = std::min(best[i], ms);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (err != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("timing GEMM algorithms failed: ", cudaGetErrorString(err)));
  }
  const size_t winner =
      static_cast<size_t>(std::min_element(best.begin(), best.end()) - best.begin());
  if (std::isinf(best[winner])) return absl::OkStatus();  // none ran: keep the heuristic's
  if (winner == algos.size()) {
    p.use_gemv = true;
  } else {
    p.algo = algos[winner];
  }
  return absl::OkStatus();
}

}  // namespace vllm::kernels::cuda
