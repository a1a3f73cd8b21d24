// ShmCommunicator: all-reduce among the processes of one node through one POSIX shared-memory
// segment (layout in shm_layout.h).
//
// Algorithm, per chunk of at most slot_bytes (chunk k uses buffer k % 2):
//   1. every rank copies its chunk into its own slot of the buffer; barrier;
//   2a. one-shot (world size 2, or small chunks): every rank sums all slots, in rank order,
//       straight into its output — one barrier per chunk;
//   2b. reduce-scatter (larger chunks, world size > 2): rank r sums slice r of all slots into
//       slice r of its own slot; barrier; every rank copies slice j from slot j, for all j.
// Sums are taken in rank order 0..N-1 everywhere, so all ranks get bit-identical results.
// Alternating buffers make a third barrier unnecessary: a rank writes buffer b again (chunk
// k+2) only after passing chunk k+1's first barrier, which every rank reaches only after it
// finished reading chunk k.
//
// Barriers: rank r stores the barrier's number into its `arrived` word (release), then waits
// (acquire) until every rank's word has reached it — spinning briefly, yielding, then blocking
// on the group's futex (ipc::WaitFor; the arriving rank wakes sleepers, a syscall only when
// someone sleeps). Every wait has a deadline, and while blocked a rank checks every 50 ms
// whether each peer still holds its liveness lock: a dead peer is reported as Unavailable
// naming it; a rank that fails marks the group aborted so that its peers fail at once too.
#ifndef VLLM_KERNELS_COMM_SHM_COMMUNICATOR_H_
#define VLLM_KERNELS_COMM_SHM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ipc/shm_segment.h"
#include "ipc/wait_strategy.h"
#include "kernels/comm/group_spec.h"
#include "kernels/comm/shm_layout.h"
#include "kernels/communicator.h"

namespace vllm::kernels::comm {

// Creator side: creates segment `name` for `world_size` ranks and writes its header. The
// returned segment unlinks the name when destroyed (see CommGroup). InvalidArgument for a
// world size outside [1, kShmCommMaxRanks] or a slot size that is 0, not a multiple of 64 or
// over 1 GiB; AlreadyExists / ResourceExhausted from ipc::ShmSegment::Create.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ipc::ShmSegment>> CreateShmCommSegment(
    const std::string& name, int32_t world_size, size_t slot_bytes);

class ShmCommunicator final : public Communicator {
 public:
  // Attaches to segment `name` as `rank`, takes the rank's liveness lock and waits (until
  // `join_timeout`) for every rank to do the same; then unlinks the name. Errors as JoinGroup.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Join(
      const std::string& name, int32_t world_size, int32_t rank, absl::Duration join_timeout,
      const CommOptions& options);

  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  // Not thread-safe (one thread per rank). Errors: Unavailable (a peer died or left, naming
  // it), DeadlineExceeded (naming the ranks that did not arrive), the status another rank
  // aborted the group with, FailedPrecondition after an earlier error.
  [[nodiscard]] absl::Status AllReduceSum(float* data, size_t count) override;

 private:
  ShmCommunicator(std::unique_ptr<ipc::ShmSegment> segment, int32_t rank, int32_t world_size,
                  const CommOptions& options);

  absl::Status WaitAllJoined(int64_t deadline_ns);
  absl::Status ReduceChunk(float* data, size_t count, int64_t deadline_ns);
  // Arrives at the next barrier and waits until every rank has arrived.
  absl::Status Barrier(int64_t deadline_ns);
  // Called while blocked: the failure another rank aborted the group with (it names the root
  // cause: the rank that died first, or did not arrive), else Unavailable naming dead peers.
  absl::Status CheckPeers();
  // Ranks that have not joined (before all joined) or not reached barrier_ (after).
  uint32_t MissingRanks() const;
  std::string DescribeMissing() const;
  absl::Status AbortStatus(uint64_t abort_info) const;
  // Records the first error, marks the group aborted (blaming the dead or missing ranks) and
  // wakes every blocked rank.
  absl::Status Fail(absl::Status status);
  float* Slot(int buffer, int32_t rank) const;

  std::unique_ptr<ipc::ShmSegment> segment_;
  ShmCommHeader* header_;
  int32_t rank_;
  int32_t world_size_;
  size_t slot_floats_;
  ipc::FutexChannel channel_;
  ipc::WaitOptions wait_options_;
  int64_t collective_timeout_ns_;
  uint64_t barrier_ = 0;  // number of the last barrier this rank arrived at
  uint64_t chunk_ = 0;    // chunks reduced so far (chooses the buffer)
  bool all_joined_ = false;
  uint32_t dead_ = 0;    // ranks CheckPeers found dead (bit r = rank r)
  absl::Status broken_;  // first error; the group is unusable once set
};

}  // namespace vllm::kernels::comm

#endif  // VLLM_KERNELS_COMM_SHM_COMMUNICATOR_H_
