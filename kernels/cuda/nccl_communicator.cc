#include "kernels/cuda/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace vllm::kernels::cuda {
namespace {

// A non-blocking communicator's enqueue (a collective's host side, including NCCL's lazy
// connection set-up on the first one) must finish within this.
constexpr absl::Duration kEnqueueTimeout = absl::Seconds(120);
// ncclCommFinalize flushes outstanding work; past this the destructor aborts instead.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(10);

ncclDataType_t NcclType(GemmDType dtype) {
  switch (dtype) {
    case GemmDType::kFloat32:
      return ncclFloat32;
    case GemmDType::kFloat16:
      return ncclFloat16;
    case GemmDType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

// "<what>: <NCCL error string> (<ncclGetLastError detail>)".
absl::Status NcclError(absl::string_view what, ncclResult_t r, ncclComm_t comm) {
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(r));
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&message, " (", detail, ")");
  return absl::InternalError(message);
}

// Polls a non-blocking communicator until its state leaves ncclInProgress. Returns that state
// (or the polling call's own error); sets *timed_out and returns ncclInProgress when
// `deadline` passes first. Spins briefly, then sleeps 100 µs between polls (initialisation
// takes milliseconds to seconds; an enqueue normally finishes during the spin).
ncclResult_t WaitWhileInProgress(ncclComm_t comm, absl::Time deadline, bool* timed_out) {
  *timed_out = false;
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (absl::Now() >= deadline) {
      *timed_out = true;
      return ncclInProgress;
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return NcclError("ncclGetUniqueId", r, nullptr);
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    absl::string_view unique_id, int32_t rank, int32_t world_size, absl::Duration init_timeout) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL unique id has ", kNcclUniqueIdBytes,
                                                   " bytes, got ", unique_id.size()));
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank, " is outside a group of ", world_size));
  }
  const absl::Time deadline = absl::Now() + init_timeout;
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // poll the initialisation so a missing peer cannot hang us
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status error =
        NcclError(absl::StrCat("ncclCommInitRank (rank ", rank, " of ", world_size, ")"), r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return error;
  }
  if (comm == nullptr) {
    return absl::InternalError("ncclCommInitRankConfig returned no communicator");
  }
  bool timed_out = false;
  r = WaitWhileInProgress(comm, deadline, &timed_out);
  if (timed_out) {
    ncclCommAbort(comm);
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL group of ", world_size, " ranks not formed within ",
        absl::FormatDuration(init_timeout), " (rank ", rank, "): a peer is missing or dead"));
  }
  if (r != ncclSuccess) {
    absl::Status error =
        NcclError(absl::StrCat("ncclCommInitRank (rank ", rank, " of ", world_size, ")"), r, comm);
    ncclCommAbort(comm);
    return error;
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, world_size));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  if (!failed_) {
    ncclResult_t r = ncclCommFinalize(comm_);
    if (r == ncclSuccess || r == ncclInProgress) {
      bool timed_out = false;
      r = WaitWhileInProgress(comm_, absl::Now() + kFinalizeTimeout, &timed_out);
      if (!timed_out && r == ncclSuccess) {
        ncclCommDestroy(comm_);
        return;
      }
    }
  }
  ncclCommAbort(comm_);  // frees everything and stops work still running on the device
}

absl::Status NcclCommunicator::AllReduceSum(void* data, size_t count, GemmDType dtype,
                                            cudaStream_t stream) {
  if (failed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator of rank ", rank_, " failed earlier"));
  }
  if (count == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("AllReduceSum of a null buffer");
  ncclResult_t r = ncclAllReduce(data, data, count, NcclType(dtype), ncclSum, comm_, stream);
  if (r == ncclInProgress) {
    bool timed_out = false;
    r = WaitWhileInProgress(comm_, absl::Now() + kEnqueueTimeout, &timed_out);
    if (timed_out) {
      failed_ = true;
      return absl::DeadlineExceededError(
          absl::StrCat("ncclAllReduce (rank ", rank_, " of ", world_size_, ") not enqueued within ",
                       absl::FormatDuration(kEnqueueTimeout), ": a peer may be dead"));
    }
  }
  if (r != ncclSuccess) {
    failed_ = true;
    return NcclError(
        absl::StrCat("ncclAllReduce (rank ", rank_, " of ", world_size_, ", ", count, " elements)"),
        r, comm_);
  }
  return absl::OkStatus();
}

}  // namespace vllm::kernels::cuda
