// DeviceCommunicator: the tensor-parallel collective of the CUDA backend, called by the model
// after each row-parallel layer on the worker's stream (kernels::Communicator's twin for
// device buffers). NcclCommunicator implements it; a single-rank group is the identity.
//
// Thread-safety: one thread per rank calls it; every rank makes the same calls in the same
// order (collective semantics).
#ifndef VLLM_KERNELS_CUDA_DEVICE_COMMUNICATOR_H_
#define VLLM_KERNELS_CUDA_DEVICE_COMMUNICATOR_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/gemm.h"

namespace vllm::kernels::cuda {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // Enqueues an in-place element-wise sum of `count` elements of `dtype` at device pointer
  // `data` across the group on `stream`; no host synchronisation, capturable into a CUDA
  // graph. An error leaves `data` unspecified and the group unusable.
  [[nodiscard]] virtual absl::Status AllReduceSum(void* data, size_t count, GemmDType dtype,
                                                  cudaStream_t stream) = 0;
};

// The group of one: AllReduceSum is a no-op.
class SingleRankDeviceCommunicator final : public DeviceCommunicator {
 public:
  int32_t rank() const override { return 0; }
  int32_t world_size() const override { return 1; }
  absl::Status AllReduceSum(void*, size_t, GemmDType, cudaStream_t) override {
    return absl::OkStatus();
  }
};

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_DEVICE_COMMUNICATOR_H_
