#include "ipc/shm_ring_buffer.h"

#include <unistd.h>

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vllm::ipc {
namespace {

absl::Status ValidateGeometry(uint32_t n_readers, uint64_t max_chunks, uint64_t max_chunk_bytes) {
  if (n_readers < 1 || n_readers > kMaxShmReaders) {
    return absl::InvalidArgumentError(
        absl::StrCat("local readers must be within 1..", kMaxShmReaders, ", got ", n_readers));
  }
  if (max_chunks < 1 || max_chunks > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_chunks must be within 1..4096, got ", max_chunks));
  }
  if (max_chunk_bytes < kCacheLine || max_chunk_bytes % kCacheLine != 0 ||
      max_chunk_bytes > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_bytes must be a multiple of 64 within 64..4 GiB, got ", max_chunk_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRingBuffer>> ShmRingBuffer::Create(const std::string& name,
                                                                     uint32_t n_readers,
                                                                     uint64_t max_chunks,
                                                                     uint64_t max_chunk_bytes) {
  if (absl::Status st = ValidateGeometry(n_readers, max_chunks, max_chunk_bytes); !st.ok()) {
    return st;
  }
  const RingGeometry g = ComputeGeometry(n_readers, max_chunks, max_chunk_bytes);
  auto segment = ShmSegment::Create(name, g.total_bytes);
  if (!segment.ok()) return segment.status();
  // The creator is the writer: slot 0 of the liveness locks is its.
  if (absl::Status st = (*segment)->LockSlot(0); !st.ok()) return st;
  auto ring = std::unique_ptr<ShmRingBuffer>(new ShmRingBuffer(std::move(*segment)));
  // The segment is zero-filled by the kernel: atomics start at 0, every chunk unwritten.
  RingHeader* h = new (ring->base()) RingHeader{};
  h->version = kRingVersion;
  h->n_readers = n_readers;
  h->max_chunks = max_chunks;
  h->max_chunk_bytes = max_chunk_bytes;
  h->meta_offset = g.meta_offset;
  h->meta_stride = g.meta_stride;
  h->data_offset = g.data_offset;
  h->total_bytes = g.total_bytes;
  h->writer_pid = getpid();
  // Publish the magic last: a reader that sees it sees the geometry.
  std::atomic_ref<uint64_t>(h->magic).store(kRingMagic, std::memory_order_release);
  return ring;
}

absl::StatusOr<std::unique_ptr<ShmRingBuffer>> ShmRingBuffer::Open(const std::string& name,
                                                                   uint32_t n_readers,
                                                                   uint64_t max_chunks,
                                                                   uint64_t max_chunk_bytes) {
  if (absl::Status st = ValidateGeometry(n_readers, max_chunks, max_chunk_bytes); !st.ok()) {
    return st;
  }
  auto segment = ShmSegment::Open(name);
  if (!segment.ok()) return segment.status();
  if ((*segment)->size() < kRingHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("shared memory '", name, "' is too small for a ring header"));
  }
  auto ring = std::unique_ptr<ShmRingBuffer>(new ShmRingBuffer(std::move(*segment)));
  const RingHeader* h = ring->header_;
  const uint64_t magic =
      std::atomic_ref<uint64_t>(const_cast<RingHeader*>(h)->magic).load(std::memory_order_acquire);
  if (magic != kRingMagic) {
    return absl::DataLossError(absl::StrCat("shared memory '", name, "' is not a message ring"));
  }
  if (h->version != kRingVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ring '", name, "' has layout version ", h->version, ", this build reads ", kRingVersion));
  }
  const RingGeometry g = ComputeGeometry(n_readers, max_chunks, max_chunk_bytes);
  if (h->n_readers != n_readers || h->max_chunks != max_chunks ||
      h->max_chunk_bytes != max_chunk_bytes || h->meta_offset != g.meta_offset ||
      h->meta_stride != g.meta_stride || h->data_offset != g.data_offset ||
      h->total_bytes != g.total_bytes || ring->segment_->size() < g.total_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring '", name, "' geometry does not match its handle (readers ", h->n_readers,
                     " vs ", n_readers, ", chunks ", h->max_chunks, " vs ", max_chunks,
                     ", chunk bytes ", h->max_chunk_bytes, " vs ", max_chunk_bytes, ", segment ",
                     ring->segment_->size(), " bytes)"));
  }
  return ring;
}

// ---------------------------------------------------------------------------------------------
// RingWriter

RingWriter::RingWriter(std::unique_ptr<ShmRingBuffer> ring, WaitOptions options)
    : ring_(std::move(ring)), options_(options) {}

absl::Status RingWriter::WaitForReaders(int64_t deadline_ns) {
  RingHeader* h = ring_->header();
  auto ready = [&] { return h->attached.load(std::memory_order_acquire) >= h->n_readers; };
  auto check = [&]() -> absl::Status {
    if (cancelled_.load(std::memory_order_relaxed)) return absl::CancelledError("cancelled");
    return absl::OkStatus();
  };
  auto describe = [&] {
    return absl::StrCat(h->n_readers - h->attached.load(), " of ", h->n_readers,
                        " reader(s) to attach to '", ring_->segment().name(), "'");
  };
  return WaitFor(ready, check, describe, ring_->to_writer(), options_, nullptr, deadline_ns);
}

bool RingWriter::ChunkFree(const ChunkMeta* m) const {
  if (m->written.load(std::memory_order_acquire) == 0) return true;
  const uint32_t n = ring_->n_readers();
  for (uint32_t r = 0; r < n; ++r) {
    if (m->read[r].load(std::memory_order_acquire) == 0) return false;
  }
  return true;
}

absl::Status RingWriter::CheckReaders(uint64_t idx) const {
  if (cancelled_.load(std::memory_order_relaxed)) return absl::CancelledError("cancelled");
  const ChunkMeta* m = ring_->meta(idx);
  for (uint32_t r = 0; r < ring_->n_readers(); ++r) {
    if (m->read[r].load(std::memory_order_acquire) != 0) continue;
    if (!ring_->segment().SlotHeldByOther(1 + r)) {
      return absl::UnavailableError(absl::StrCat(
          "reader ", r, " (pid ", ring_->header()->reader_pid[r].load(), ") of '",
          ring_->segment().name(), "' died (exited or was killed) with messages unread"));
    }
  }
  return absl::OkStatus();
}

std::string RingWriter::DescribeWait(uint64_t idx) const {
  const ChunkMeta* m = ring_->meta(idx);
  std::vector<std::string> slow;
  for (uint32_t r = 0; r < ring_->n_readers(); ++r) {
    if (m->read[r].load(std::memory_order_relaxed) == 0) {
      slow.push_back(absl::StrCat(r, " (pid ", ring_->header()->reader_pid[r].load(), ")"));
    }
  }
  return absl::StrCat("reader(s) ", absl::StrJoin(slow, ", "), " of '", ring_->segment().name(),
                      "' to read chunk ", idx);
}

absl::StatusOr<uint8_t*> RingWriter::Acquire(int64_t deadline_ns) {
  ChunkMeta* m = ring_->meta(idx_);
  absl::Status st = WaitFor([&] { return ChunkFree(m); }, [&] { return CheckReaders(idx_); },
                            [&] { return DescribeWait(idx_); }, ring_->to_writer(), options_,
                            nullptr, deadline_ns);
  if (!st.ok()) return st;
  // Readers whose read flag is set ignore this chunk; clearing `written` before their flags are
  // reset (release, in Publish) keeps them from seeing the old written == 1.
  m->written.store(0, std::memory_order_relaxed);
  return ring_->chunk(idx_);
}

void RingWriter::Publish(uint64_t size, uint32_t flags) {
  ChunkMeta* m = ring_->meta(idx_);
  m->size = size;
  m->flags = flags;
  for (uint32_t r = 0; r < ring_->n_readers(); ++r) {
    m->read[r].store(0, std::memory_order_release);
  }
  m->written.store(1, std::memory_order_release);
  ring_->to_readers().Notify();
  idx_ = idx_ + 1 == ring_->max_chunks() ? 0 : idx_ + 1;
}

void RingWriter::Close() {
  ring_->header()->closed.store(1, std::memory_order_release);
  ring_->to_readers().WakeAll();
}

void RingWriter::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  ring_->to_writer().WakeAll();
}

// ---------------------------------------------------------------------------------------------
// RingReader

absl::StatusOr<std::unique_ptr<RingReader>> RingReader::Attach(std::unique_ptr<ShmRingBuffer> ring,
                                                               uint32_t index,
                                                               WaitOptions options) {
  if (index >= ring->n_readers()) {
    return absl::InvalidArgumentError(absl::StrCat("reader index ", index, " is out of range for ",
                                                   ring->n_readers(), " readers"));
  }
  if (absl::Status st = ring->segment().LockSlot(1 + index); !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("reader ", index, " of '", ring->segment().name(),
                     "' is already attached by another process: ", st.message()));
  }
  RingHeader* h = ring->header();
  h->reader_pid[index].store(getpid(), std::memory_order_relaxed);
  h->attached.fetch_add(1, std::memory_order_acq_rel);
  ring->to_writer().WakeAll();
  return std::unique_ptr<RingReader>(new RingReader(std::move(ring), index, options));
}

bool RingReader::Poll() const {
  const ChunkMeta* m = ring_->meta(idx_);
  // Own read flag first, then `written` (see shm_layout.h).
  return m->read[index_].load(std::memory_order_acquire) == 0 &&
         m->written.load(std::memory_order_acquire) == 1;
}

absl::Status RingReader::CheckWriter() const {
  if (cancelled_.load(std::memory_order_relaxed)) return absl::CancelledError("cancelled");
  const RingHeader* h = ring_->header();
  if (h->closed.load(std::memory_order_acquire) != 0) {
    return absl::CancelledError(
        absl::StrCat("queue '", ring_->segment().name(), "' was closed by its writer"));
  }
  if (!ring_->segment().SlotHeldByOther(0)) {
    return absl::UnavailableError(absl::StrCat("writer (pid ", h->writer_pid, ") of '",
                                               ring_->segment().name(),
                                               "' died (exited or was killed)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RingReader::Chunk> RingReader::Acquire(int64_t deadline_ns) {
  absl::Status st =
      WaitFor([&] { return Poll(); }, [&] { return CheckWriter(); },
              [&] {
                return absl::StrCat("writer (pid ", ring_->header()->writer_pid, ") of '",
                                    ring_->segment().name(), "' to write chunk ", idx_,
                                    " for reader ", index_);
              },
              ring_->to_readers(), options_, &predictor_, deadline_ns);
  if (!st.ok()) return st;
  predictor_.OnArrival(MonoNowNs());
  const ChunkMeta* m = ring_->meta(idx_);
  return Chunk{ring_->chunk(idx_), m->size, m->flags};
}

void RingReader::Release() {
  ring_->meta(idx_)->read[index_].store(1, std::memory_order_release);
  ring_->to_writer().Notify();
  idx_ = idx_ + 1 == ring_->max_chunks() ? 0 : idx_ + 1;
}

void RingReader::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  ring_->to_readers().WakeAll();
}

}  // namespace vllm::ipc
