// Owning handles for device memory (cudaMalloc, never managed memory) and pinned host memory
// (cudaHostAlloc), used by the CUDA worker (worker/cuda/). Move-only; the destructor frees.
//
// Thread-safety: none; one worker thread owns each buffer. Freeing device memory implicitly
// synchronises the device, so buffers are released only at load or shutdown, never per step.
#ifndef VLLM_WORKER_CUDA_DEVICE_BUFFER_H_
#define VLLM_WORKER_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace vllm::worker {

// InternalError "<what>: <CUDA error string>" for a failed CUDA call; OK for cudaSuccess.
[[nodiscard]] inline absl::Status CudaStatus(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(absl::string_view(what.data(), what.size()), ": ", cudaGetErrorString(e)));
}

// Where a CudaBuffer's memory lives.
enum class CudaMemoryKind {
  kDevice,      // cudaMalloc on the current device
  kPinnedHost,  // cudaHostAlloc: page-locked, so host-device copies are truly asynchronous
};

// `bytes` of CUDA-allocated memory of one kind; empty (get() == nullptr) when default-made or
// moved from.
template <CudaMemoryKind kKind>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  // ResourceExhausted (naming `what` and the size) when the allocation fails.
  [[nodiscard]] static absl::StatusOr<CudaBuffer> Allocate(size_t bytes, std::string_view what) {
    CudaBuffer b;
    if (bytes == 0) return b;
    const cudaError_t e = kKind == CudaMemoryKind::kDevice
                              ? cudaMalloc(&b.ptr_, bytes)
                              : cudaHostAlloc(&b.ptr_, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the error state of a failed allocation
      return absl::ResourceExhaustedError(absl::StrCat(
          kKind == CudaMemoryKind::kDevice ? "cudaMalloc" : "cudaHostAlloc", " of ", bytes,
          " bytes for ", absl::string_view(what.data(), what.size()), ": ", cudaGetErrorString(e)));
    }
    b.bytes_ = bytes;
    return b;
  }
  CudaBuffer(CudaBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer() { Reset(); }

  void Reset() {
    if (ptr_ != nullptr) {
      if constexpr (kKind == CudaMemoryKind::kDevice) {
        cudaFree(ptr_);
      } else {
        cudaFreeHost(ptr_);
      }
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<CudaMemoryKind::kDevice>;
using PinnedBuffer = CudaBuffer<CudaMemoryKind::kPinnedHost>;

}  // namespace vllm::worker

#endif  // VLLM_WORKER_CUDA_DEVICE_BUFFER_H_
