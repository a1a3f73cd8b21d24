// Proof that the CUDA toolchain works end to end: a kernel of ours, a cuBLASLt GEMM and an NCCL
// all-reduce, each checked against a host computation. Built whenever nvcc is present (so CI
// compiles and links it without a GPU); tests/gpu/cuda_probe_test.cc runs it when a device is
// visible. Framework-free: plain structs and strings, no exceptions.
#ifndef VLLM_KERNELS_CUDA_CUDA_PROBE_H_
#define VLLM_KERNELS_CUDA_CUDA_PROBE_H_

#include <string>

namespace vllm::kernels {

// Number of visible CUDA devices; 0 when there is none or no driver (cudaGetDeviceCount then
// fails with cudaErrorInsufficientDriver / cudaErrorNoDevice, which we treat as "no GPU").
int CudaDeviceCount();

struct CudaProbeResult {
  bool ok = false;
  std::string device_name;  // e.g. "NVIDIA H100 80GB HBM3"
  std::string error;        // what failed, when !ok
  double max_gemm_error = 0;
};

// On device 0: runs a vector-add kernel, a 64×48×32 fp32 GEMM through cuBLASLt and a one-rank
// NCCL all-reduce, comparing each with the host. Requires CudaDeviceCount() > 0.
CudaProbeResult RunCudaProbe();

}  // namespace vllm::kernels

#endif  // VLLM_KERNELS_CUDA_CUDA_PROBE_H_
