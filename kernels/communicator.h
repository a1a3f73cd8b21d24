// Communicator: the tensor-parallel collective a model calls after each row-parallel layer.
// The CPU backend implements it over gloo or shared memory, the CUDA backend over
// NCCL; a single-rank group is the identity.
//
// Thread-safety: one thread per rank calls it; every rank of the group must make the same
// calls in the same order (collective semantics).
#ifndef VLLM_KERNELS_COMMUNICATOR_H_
#define VLLM_KERNELS_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace vllm::kernels {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // Sums `count` floats element-wise across the group; every rank gets the sum in `data`.
  // An error (a peer died, a timeout) leaves `data` unspecified and the group unusable.
  [[nodiscard]] virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
};

// The group of one: AllReduceSum is a no-op.
class SingleRankCommunicator final : public Communicator {
 public:
  int32_t rank() const override { return 0; }
  int32_t world_size() const override { return 1; }
  absl::Status AllReduceSum(float*, size_t) override { return absl::OkStatus(); }
};

}  // namespace vllm::kernels

#endif  // VLLM_KERNELS_COMMUNICATOR_H_
