// NcclCommunicator: the CUDA backend's tensor-parallel group over NCCL (vLLM's
// PyNcclCommunicator). One instance per rank, each in its own thread or process with its own
// GPU current.
//
//   executor (no GPU needed)                 worker of rank r (its GPU made current)
//   ---------------------------------        -----------------------------------------
//   id = NewNcclUniqueId()                   (receives id through the broadcast queue)
//   hand id's bytes to every rank       ->   comm = NcclCommunicator::Create(id, r, N, timeout)
//                                            comm->AllReduceSum(x, n, dtype, stream) ...
//
// The process that calls NewNcclUniqueId hosts NCCL's bootstrap root (a thread listening on a
// TCP port) until every rank has joined: it must outlive the ranks' Create calls.
//
// The communicator is NCCL "non-blocking" (ncclConfig_t::blocking = 0): Create polls the
// initialisation against a deadline, so a rank whose peer never shows up gets
// DeadlineExceeded instead of hanging in ncclCommInitRank forever; the half-made
// communicator is aborted. Collectives are enqueued on the caller's stream without host
// synchronisation (a call may return after polling NCCL's enqueue state, which is host-only),
// so AllReduceSum is capturable into a CUDA graph. NCCL connects the ranks lazily, on the
// first collective: run one eagerly before capturing. Tests: tests/gpu/nccl_communicator_test.cc
// (the 2-rank cases need 2 GPUs).
//
// Thread-safety: one thread uses an instance at a time (collective semantics: every rank makes
// the same calls in the same order). Failure: every error is an absl::Status naming the NCCL
// call and NCCL's error string (plus ncclGetLastError's detail when there is one); after a
// failed collective the communicator refuses further calls (FailedPrecondition) and its
// destructor aborts it (ncclCommAbort) rather than finalising.
#ifndef VLLM_KERNELS_CUDA_NCCL_COMMUNICATOR_H_
#define VLLM_KERNELS_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/cuda/device_communicator.h"
#include "kernels/cuda/gemm.h"

namespace vllm::kernels::cuda {

// Size of an ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kNcclUniqueIdBytes = sizeof(ncclUniqueId);

// Makes a fresh ncclUniqueId (ncclGetUniqueId) and returns its kNcclUniqueIdBytes bytes. Needs
// no GPU; starts NCCL's bootstrap root in this process (see above). Internal on NCCL errors
// (e.g. no usable network interface).
[[nodiscard]] absl::StatusOr<std::string> NewNcclUniqueId();

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Joins the group `unique_id` names as `rank` of `world_size` on the current CUDA device
  // (cudaSetDevice is the caller's). Every rank must call it, concurrently, with the same id
  // and world size. InvalidArgument for an id that is not kNcclUniqueIdBytes long or a rank
  // outside [0, world_size); DeadlineExceeded when the group is not formed within
  // `init_timeout` (a peer is missing or dead); Internal for any other NCCL error.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      absl::string_view unique_id, int32_t rank, int32_t world_size,
      absl::Duration init_timeout = absl::Minutes(5));

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // Finalises and destroys the communicator (waiting at most 10 s for NCCL to flush its
  // work), or aborts it when a collective failed or finalising does not finish. Work
  // enqueued on streams should have completed (synchronise them first).
  ~NcclCommunicator() override;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }

  // ncclAllReduce(ncclSum) in place on `stream` (see DeviceCommunicator). count == 0 is a
  // no-op; InvalidArgument for null data with count > 0; FailedPrecondition after an earlier
  // failure; DeadlineExceeded when NCCL has not enqueued it within 120 s (a peer may be dead);
  // Internal naming NCCL's error otherwise.
  [[nodiscard]] absl::Status AllReduceSum(void* data, size_t count, GemmDType dtype,
                                          cudaStream_t stream) override;

  // The NCCL communicator (for tests and for other collectives built on the same group).
  ncclComm_t comm() const { return comm_; }

 private:
  NcclCommunicator(ncclComm_t comm, int32_t rank, int32_t world_size)
      : comm_(comm), rank_(rank), world_size_(world_size) {}

  ncclComm_t comm_;
  int32_t rank_;
  int32_t world_size_;
  bool failed_ = false;
};

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_NCCL_COMMUNICATOR_H_
