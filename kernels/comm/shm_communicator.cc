#include "kernels/comm/shm_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/comm/shm_reduce.h"

namespace vllm::kernels::comm {
namespace {

// Above this many bytes per chunk across all ranks, world sizes > 2 reduce-scatter instead of
// every rank summing every slot (which reads world_size times the chunk per rank).
constexpr size_t kOneShotMaxBytes = 256 * 1024;
// Slices of a reduce-scatter start on cache-line boundaries.
constexpr size_t kSliceAlignFloats = 16;
constexpr size_t kMaxSlotBytes = size_t{1} << 30;

int64_t DeadlineAfter(int64_t timeout_ns) {
  const int64_t now = ipc::MonoNowNs();
  return timeout_ns >= INT64_MAX - now ? INT64_MAX : now + timeout_ns;
}

int64_t ToNs(absl::Duration d) {
  if (d >= absl::Hours(24 * 365)) return INT64_MAX / 2;
  return std::max<int64_t>(0, absl::ToInt64Nanoseconds(d));
}

// [lo, hi) of rank j's slice of an n-float chunk split among `world` ranks.
std::pair<size_t, size_t> SliceOf(int32_t j, size_t n, int32_t world) {
  size_t per = (n + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
  per = (per + kSliceAlignFloats - 1) / kSliceAlignFloats * kSliceAlignFloats;
  const size_t lo = std::min(n, static_cast<size_t>(j) * per);
  return {lo, std::min(n, lo + per)};
}

absl::Status ValidateHeader(const ShmCommHeader& h, size_t segment_bytes, int32_t world_size,
                            const std::string& name) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory '", name, "' is not a usable comm group: ", what));
  };
  if (h.magic != kShmCommMagic) return bad("bad magic");
  if (h.version != kShmCommVersion) {
    return bad(absl::StrCat("layout version ", h.version, ", expected ", kShmCommVersion));
  }
  if (static_cast<int32_t>(h.world_size) != world_size) {
    return bad(absl::StrCat("world size ", h.world_size, ", the spec says ", world_size));
  }
  if (h.slot_bytes == 0 || h.slot_bytes % 64 != 0 || h.slot_bytes > kMaxSlotBytes) {
    return bad(absl::StrCat("slot size ", h.slot_bytes));
  }
  if (h.data_offset != kShmCommDataOffset ||
      h.total_bytes != ShmCommSegmentBytes(world_size, h.slot_bytes) ||
      h.total_bytes > segment_bytes) {
    return bad(
        absl::StrCat("sizes do not add up (", h.total_bytes, " of ", segment_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

// "rank 3" / "ranks 1, 3" for a mask of ranks.
std::string FormatRanks(uint32_t mask) {
  std::vector<int32_t> ranks;
  for (int32_t j = 0; j < 32; ++j) {
    if (mask & (1u << j)) ranks.push_back(j);
  }
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ipc::ShmSegment>> CreateShmCommSegment(const std::string& name,
                                                                      int32_t world_size,
                                                                      size_t slot_bytes) {
  if (world_size < 1 || world_size > kShmCommMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("shm comm group: world size ", world_size,
                                                   " outside [1, ", kShmCommMaxRanks, "]"));
  }
  if (slot_bytes == 0 || slot_bytes % 64 != 0 || slot_bytes > kMaxSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shm comm group: slot size ", slot_bytes,
                                                   " must be a positive multiple of 64 <= 1 GiB"));
  }
  const size_t bytes = ShmCommSegmentBytes(world_size, slot_bytes);
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<ipc::ShmSegment> seg, ipc::ShmSegment::Create(name, bytes));
  // The segment is zero-filled; no rank can know the name before the creator hands it out.
  auto* h = reinterpret_cast<ShmCommHeader*>(seg->data());
  h->magic = kShmCommMagic;
  h->version = kShmCommVersion;
  h->world_size = static_cast<uint32_t>(world_size);
  h->slot_bytes = slot_bytes;
  h->data_offset = kShmCommDataOffset;
  h->total_bytes = bytes;
  std::atomic_thread_fence(std::memory_order_release);
  return seg;
}

ShmCommunicator::ShmCommunicator(std::unique_ptr<ipc::ShmSegment> segment, int32_t rank,
                                 int32_t world_size, const CommOptions& options)
    : segment_(std::move(segment)),
      header_(reinterpret_cast<ShmCommHeader*>(segment_->data())),
      rank_(rank),
      world_size_(world_size),
      slot_floats_(header_->slot_bytes / sizeof(float)),
      channel_{&header_->futex_epoch, &header_->futex_sleepers},
      collective_timeout_ns_(ToNs(options.collective_timeout)) {}

ShmCommunicator::~ShmCommunicator() = default;  // closing the segment drops our liveness lock

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Join(const std::string& name,
                                                                       int32_t world_size,
                                                                       int32_t rank,
                                                                       absl::Duration join_timeout,
                                                                       const CommOptions& options) {
  const int64_t deadline = DeadlineAfter(ToNs(join_timeout));
  if (world_size < 1 || world_size > kShmCommMaxRanks || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm comm group '", name, "': rank ", rank, " of world size ", world_size));
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<ipc::ShmSegment> seg, ipc::ShmSegment::Open(name));
  if (seg->size() < sizeof(ShmCommHeader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory '", name, "' is too small for a comm group"));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  auto* h = reinterpret_cast<ShmCommHeader*>(seg->data());
  VLLM_RETURN_IF_ERROR(ValidateHeader(*h, seg->size(), world_size, name));
  if (absl::Status st = seg->LockSlot(static_cast<uint32_t>(rank)); !st.ok()) {
    if (st.code() != absl::StatusCode::kFailedPrecondition) return st;
    return absl::FailedPreconditionError(
        absl::StrCat("shm comm group '", name, "': rank ", rank, " is taken by another process"));
  }
  if (h->ranks[rank].joined.exchange(1, std::memory_order_acq_rel) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("shm comm group '", name, "': rank ", rank,
                                                      " joined before and left; it cannot rejoin"));
  }
  h->joined_count.fetch_add(1, std::memory_order_acq_rel);
  auto comm = std::unique_ptr<ShmCommunicator>(
      new ShmCommunicator(std::move(seg), rank, world_size, options));
  comm->channel_.Notify();
  const absl::Status st = comm->WaitAllJoined(deadline);
  // Every rank has the segment open (or the group failed): the name is no longer needed.
  comm->segment_->Unlink();
  if (!st.ok()) return comm->Fail(st);
  return comm;
}

absl::Status ShmCommunicator::WaitAllJoined(int64_t deadline_ns) {
  auto ready = [&] {
    return header_->joined_count.load(std::memory_order_acquire) >=
           static_cast<uint32_t>(world_size_);
  };
  absl::Status st = ipc::WaitFor(
      ready, [&] { return CheckPeers(); }, [&] { return DescribeMissing(); }, channel_,
      wait_options_, nullptr, deadline_ns);
  all_joined_ = st.ok();
  return st;
}

absl::Status ShmCommunicator::CheckPeers() {
  uint32_t dead = 0;
  for (int32_t j = 0; j < world_size_; ++j) {
    if (j == rank_ || header_->ranks[j].joined.load(std::memory_order_acquire) == 0) continue;
    if (!segment_->SlotHeldByOther(static_cast<uint32_t>(j))) dead |= 1u << j;
  }
  // Read after the locks: a rank that failed first set abort_info before it could exit, so a
  // peer that left because of that failure is not mistaken for the root cause.
  const uint64_t info = header_->abort_info.load(std::memory_order_acquire);
  if (info != 0) return AbortStatus(info);
  if (dead != 0) {
    dead_ = dead;
    return absl::UnavailableError(absl::StrCat(FormatRanks(dead), " of shm comm group '",
                                               segment_->name(),
                                               "' died or left (liveness lock gone)"));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AbortStatus(uint64_t info) const {
  const auto code = static_cast<absl::StatusCode>((info >> 40) & 0xff);
  const auto reporter = static_cast<int32_t>((info >> 32) & 0xff);
  const auto blamed = static_cast<uint32_t>(info & 0xffffffffu);
  const std::string group = absl::StrCat("shm comm group '", segment_->name(), "'");
  if (code == absl::StatusCode::kUnavailable && blamed != 0) {
    return absl::UnavailableError(absl::StrCat(FormatRanks(blamed), " of ", group,
                                               " died or left (reported by rank ", reporter, ")"));
  }
  if (code == absl::StatusCode::kDeadlineExceeded && blamed != 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", reporter, " of ", group, " timed out waiting for ", FormatRanks(blamed)));
  }
  return absl::Status(code,
                      absl::StrCat("rank ", reporter, " of ", group, " failed (",
                                   absl::StatusCodeToString(code), "); the group is aborted"));
}

absl::Status ShmCommunicator::Fail(absl::Status status) {
  if (broken_.ok()) broken_ = status;
  uint32_t blamed = 0;
  if (status.code() == absl::StatusCode::kUnavailable) blamed = dead_;
  if (status.code() == absl::StatusCode::kDeadlineExceeded) blamed = MissingRanks();
  const uint64_t info = (uint64_t{1} << 63) | (static_cast<uint64_t>(status.code()) & 0xff) << 40 |
                        static_cast<uint64_t>(rank_) << 32 | blamed;
  uint64_t expected = 0;
  header_->abort_info.compare_exchange_strong(expected, info, std::memory_order_acq_rel);
  channel_.WakeAll();
  return status;
}

uint32_t ShmCommunicator::MissingRanks() const {
  uint32_t missing = 0;
  for (int32_t j = 0; j < world_size_; ++j) {
    const bool absent = all_joined_
                            ? header_->ranks[j].arrived.load(std::memory_order_relaxed) < barrier_
                            : header_->ranks[j].joined.load(std::memory_order_relaxed) == 0;
    if (absent) missing |= 1u << j;
  }
  return missing;
}

std::string ShmCommunicator::DescribeMissing() const {
  return absl::StrCat(FormatRanks(MissingRanks()), " of shm comm group '", segment_->name(),
                      all_joined_ ? absl::StrCat("' to reach barrier ", barrier_) : "' to join");
}

float* ShmCommunicator::Slot(int buffer, int32_t rank) const {
  const size_t index =
      static_cast<size_t>(buffer) * static_cast<size_t>(world_size_) + static_cast<size_t>(rank);
  return reinterpret_cast<float*>(segment_->data() + header_->data_offset +
                                  index * header_->slot_bytes);
}

absl::Status ShmCommunicator::Barrier(int64_t deadline_ns) {
  const uint64_t seq = ++barrier_;
  header_->ranks[rank_].arrived.store(seq, std::memory_order_release);
  channel_.Notify();
  int32_t next = 0;  // ranks below `next` are known to have arrived
  auto ready = [&] {
    for (; next < world_size_; ++next) {
      if (header_->ranks[next].arrived.load(std::memory_order_acquire) < seq) return false;
    }
    return true;
  };
  return ipc::WaitFor(
      ready, [&] { return CheckPeers(); }, [&] { return DescribeMissing(); }, channel_,
      wait_options_, nullptr, deadline_ns);
}

absl::Status ShmCommunicator::ReduceChunk(float* data, size_t count, int64_t deadline_ns) {
  const int buffer = static_cast<int>(chunk_++ & 1);
  float* mine = Slot(buffer, rank_);
  std::memcpy(mine, data, count * sizeof(float));
  VLLM_RETURN_IF_ERROR(Barrier(deadline_ns));
  const float* slots[kShmCommMaxRanks];
  for (int32_t j = 0; j < world_size_; ++j) slots[j] = Slot(buffer, j);
  if (world_size_ == 2 ||
      count * sizeof(float) * static_cast<size_t>(world_size_) <= kOneShotMaxBytes) {
    SumInRankOrder(slots, world_size_, 0, count, data);
    return absl::OkStatus();
  }
  const auto [lo, hi] = SliceOf(rank_, count, world_size_);
  SumInRankOrder(slots, world_size_, lo, hi - lo, mine + lo);
  VLLM_RETURN_IF_ERROR(Barrier(deadline_ns));
  for (int32_t j = 0; j < world_size_; ++j) {
    const auto [jlo, jhi] = SliceOf(j, count, world_size_);
    std::memcpy(data + jlo, slots[j] + jlo, (jhi - jlo) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllReduceSum(float* data, size_t count) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm comm group '", segment_->name(),
                     "' is unusable after an earlier error: ", broken_.ToString()));
  }
  if (world_size_ == 1 || count == 0) return absl::OkStatus();
  if (const uint64_t info = header_->abort_info.load(std::memory_order_acquire); info != 0) {
    return Fail(AbortStatus(info));
  }
  const int64_t deadline = DeadlineAfter(collective_timeout_ns_);
  for (size_t offset = 0; offset < count; offset += slot_floats_) {
    const size_t n = std::min(slot_floats_, count - offset);
    if (absl::Status st = ReduceChunk(data + offset, n, deadline); !st.ok()) return Fail(st);
  }
  return absl::OkStatus();
}

}  // namespace vllm::kernels::comm
