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

// `bytes` of device memory on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // ResourceExhausted (naming `what` and the size) when cudaMalloc fails.
  [[nodiscard]] static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, std::string_view what) {
    DeviceBuffer b;
    if (bytes == 0) return b;
    if (cudaError_t e = cudaMalloc(&b.ptr_, bytes); e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of ", bytes, " bytes for ",
                                                       absl::string_view(what.data(), what.size()),
                                                       ": ", cudaGetErrorString(e)));
    }
    b.bytes_ = bytes;
    return b;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
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

// `bytes` of page-locked host memory (so host-device copies are truly asynchronous).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  [[nodiscard]] static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes, std::string_view what) {
    PinnedBuffer b;
    if (bytes == 0) return b;
    if (cudaError_t e = cudaHostAlloc(&b.ptr_, bytes, cudaHostAllocDefault); e != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat("cudaHostAlloc of ", bytes, " bytes for ",
                                                       absl::string_view(what.data(), what.size()),
                                                       ": ", cudaGetErrorString(e)));
    }
    b.bytes_ = bytes;
    return b;
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Reset(); }

  void Reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
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

}  // namespace vllm::worker

#endif  // VLLM_WORKER_CUDA_DEVICE_BUFFER_H_
