#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_probe.h"

namespace vllm::kernels {
namespace {

__global__ void AddKernel(const float* a, const float* b, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// Owns device buffers for the probe; frees them on every path.
struct DeviceBuffers {
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  float* Alloc(size_t n) {
    void* p = nullptr;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return nullptr;
    ptrs.push_back(p);
    return static_cast<float*>(p);
  }
};

std::string CudaError(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return n;
}

CudaProbeResult RunCudaProbe() {
  CudaProbeResult r;
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess) {
    r.error = CudaError("cudaSetDevice", e);
    return r;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  r.device_name = prop.name;
  DeviceBuffers buf;

  // 1. Our own kernel.
  constexpr int kN = 1000;
  std::vector<float> ha(kN), hb(kN), hout(kN);
  for (int i = 0; i < kN; ++i) {
    ha[i] = static_cast<float>(i);
    hb[i] = 0.5f * static_cast<float>(i);
  }
  float *da = buf.Alloc(kN), *db = buf.Alloc(kN), *dout = buf.Alloc(kN);
  if (!da || !db || !dout) {
    r.error = "cudaMalloc failed";
    return r;
  }
  cudaMemcpy(da, ha.data(), kN * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), kN * sizeof(float), cudaMemcpyHostToDevice);
  AddKernel<<<(kN + 255) / 256, 256>>>(da, db, dout, kN);
  if (cudaError_t e = cudaMemcpy(hout.data(), dout, kN * sizeof(float), cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    r.error = CudaError("vector add", e);
    return r;
  }
  for (int i = 0; i < kN; ++i) {
    if (hout[i] != 1.5f * static_cast<float>(i)) {
      r.error = "vector add gave a wrong result at " + std::to_string(i);
      return r;
    }
  }

  // 2. cuBLASLt: C[m×n] = A[m×k] · B[k×n], column-major fp32.
  constexpr int m = 64, n = 48, k = 32;
  std::vector<float> A(m * k), B(k * n), C(m * n), ref(m * n, 0.f);
  for (int i = 0; i < m * k; ++i) A[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
  for (int i = 0; i < k * n; ++i) B[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      for (int i = 0; i < m; ++i) ref[i + j * m] += A[i + p * m] * B[p + j * k];
  float *dA = buf.Alloc(m * k), *dB = buf.Alloc(k * n), *dC = buf.Alloc(m * n);
  if (!dA || !dB || !dC) {
    r.error = "cudaMalloc failed";
    return r;
  }
  cudaMemcpy(dA, A.data(), A.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), B.size() * sizeof(float), cudaMemcpyHostToDevice);
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasStatus_t s = cublasLtCreate(&lt);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m);
  const float alpha = 1.f, beta = 0.f;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatmul(lt, op, &alpha, dA, la, dB, lb, &beta, dC, lc, dC, lc, nullptr, nullptr, 0,
                       nullptr);
  }
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  if (lt) cublasLtDestroy(lt);
  if (s != CUBLAS_STATUS_SUCCESS) {
    r.error = "cublasLtMatmul failed with status " + std::to_string(static_cast<int>(s));
    return r;
  }
  cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (int i = 0; i < m * n; ++i) {
    r.max_gemm_error = std::fmax(r.max_gemm_error, std::fabs(C[i] - ref[i]));
  }
  if (r.max_gemm_error > 1e-3) {
    r.error = "cuBLASLt GEMM differs from the host by " + std::to_string(r.max_gemm_error);
    return r;
  }

  // 3. NCCL: a one-rank communicator all-reduces in place (sum over one rank = identity).
  ncclComm_t comm = nullptr;
  int dev = 0;
  if (ncclResult_t nr = ncclCommInitAll(&comm, 1, &dev); nr != ncclSuccess) {
    r.error = std::string("ncclCommInitAll: ") + ncclGetErrorString(nr);
    return r;
  }
  ncclResult_t nr = ncclAllReduce(dout, dout, kN, ncclFloat, ncclSum, comm, nullptr);
  cudaDeviceSynchronize();
  ncclCommDestroy(comm);
  if (nr != ncclSuccess) {
    r.error = std::string("ncclAllReduce: ") + ncclGetErrorString(nr);
    return r;
  }
  cudaMemcpy(hout.data(), dout, kN * sizeof(float), cudaMemcpyDeviceToHost);
  for (int i = 0; i < kN; ++i) {
    if (hout[i] != 1.5f * static_cast<float>(i)) {
      r.error = "NCCL all-reduce changed the data at " + std::to_string(i);
      return r;
    }
  }
  r.ok = true;
  return r;
}

}  // namespace vllm::kernels
