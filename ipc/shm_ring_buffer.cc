#include "ipc/shm_ring_buffer.h"

#include <unistd.h>

#include <algorithm>
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
  h->writer_heavy_fences = HeavyFencesAvailable() && HeavyFence() ? 1 : 0;
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
    : ring_(std::move(ring)),
      options_(options),
      to_writer_(ring_->to_writer()),
      n_slots_(ring_->n_slots()),
      free_below_(n_slots_),
      buffer_free_(ring_->max_chunks(), 1),
      free_buffers_(static_cast<uint32_t>(ring_->max_chunks())),
      slot_buffer_(n_slots_, kNoBuffer) {
  to_writer_.heavy_fence_on_block = ring_->header()->writer_heavy_fences != 0;
}

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
  return WaitFor(ready, check, describe, to_writer_, options_, nullptr, deadline_ns);
}

uint64_t RingWriter::MinConsumed() const {
  uint64_t min = UINT64_MAX;
  for (uint32_t r = 0; r < ring_->n_readers(); ++r) {
    min = std::min(min, ring_->cursor(r)->consumed.load(std::memory_order_acquire));
  }
  return min;
}

void RingWriter::RefreshConsumed() {
  free_below_ = std::max(free_below_, MinConsumed() + n_slots_);
}

bool RingWriter::SlotFree() {
  if (seq_ < free_below_) return true;
  RefreshConsumed();
  return seq_ < free_below_;
}

void RingWriter::ReclaimBuffers() {
  const uint64_t consumed = free_below_ - n_slots_;  // every reader consumed these messages
  for (; reclaimed_below_ < std::min(consumed, seq_); ++reclaimed_below_) {
    uint32_t& b = slot_buffer_[reclaimed_below_ % n_slots_];
    if (b == kNoBuffer) continue;
    buffer_free_[b] = 1;
    ++free_buffers_;
    b = kNoBuffer;
  }
}

uint64_t RingWriter::NeededConsumed() const {
  if (seq_ >= free_below_) return seq_ + 1 - n_slots_;  // waiting for a slot
  // Waiting for a buffer: the oldest outstanding message that holds one.
  for (uint64_t m = reclaimed_below_; m < seq_; ++m) {
    if (slot_buffer_[m % n_slots_] != kNoBuffer) return m + 1;
  }
  return seq_;
}

absl::Status RingWriter::CheckReaders() const {
  if (cancelled_.load(std::memory_order_relaxed)) return absl::CancelledError("cancelled");
  const uint64_t needed = NeededConsumed();
  for (uint32_t r = 0; r < ring_->n_readers(); ++r) {
    if (ring_->cursor(r)->consumed.load(std::memory_order_acquire) >= needed) continue;
    if (!ring_->segment().SlotHeldByOther(1 + r)) {
      return absl::UnavailableError(absl::StrCat(
          "reader ", r, " (pid ", ring_->header()->reader_pid[r].load(), ") of '",
          ring_->segment().name(), "' died (exited or was killed) with messages unread"));
    }
  }
  return absl::OkStatus();
}

std::string RingWriter::DescribeWait() const {
  const uint64_t needed = NeededConsumed();
  std::vector<std::string> slow;
  for (uint32_t r = 0; r < ring_->n_readers(); ++r) {
    if (ring_->cursor(r)->consumed.load(std::memory_order_relaxed) < needed) {
      slow.push_back(absl::StrCat(r, " (pid ", ring_->header()->reader_pid[r].load(), ")"));
    }
  }
  return absl::StrCat("reader(s) ", absl::StrJoin(slow, ", "), " of '", ring_->segment().name(),
                      "' to read message ", needed - 1, " (a free ",
                      seq_ >= free_below_ ? "slot" : "data buffer", ")");
}

uint32_t RingWriter::PickBuffer() const {
  // After a large message its buffer again (its lines are warm), else the one after it (the
  // order a waiting reader prefetches), else any.
  if (last_size_ >= kReuseAtOnceBytes && buffer_free_[last_buffer_]) return last_buffer_;
  const uint32_t next = last_buffer_ + 1 == ring_->max_chunks() ? 0 : last_buffer_ + 1;
  if (buffer_free_[next]) return next;
  uint32_t b = 0;
  while (!buffer_free_[b]) ++b;  // the caller checked free_buffers_ > 0
  return b;
}

uint8_t* RingWriter::TryAcquire(uint64_t size) {
  if (!SlotFree()) return nullptr;
  inline_ = size <= kInlineBytes;
  if (inline_) return ring_->inline_data(slot_);
  // After a large message, learn at once whether its buffer is free again (one read of each
  // reader's cursor): refilling a buffer still in cache beats streaming a cold one.
  if (last_size_ >= kReuseAtOnceBytes && reclaimed_below_ < seq_) RefreshConsumed();
  ReclaimBuffers();
  if (free_buffers_ == 0) {
    RefreshConsumed();
    ReclaimBuffers();
    if (free_buffers_ == 0) return nullptr;
  }
  buffer_ = PickBuffer();
  return ring_->chunk(buffer_);
}

absl::StatusOr<uint8_t*> RingWriter::Acquire(uint64_t size, int64_t deadline_ns) {
  if (uint8_t* data = TryAcquire(size)) return data;
  uint8_t* data = nullptr;
  absl::Status st =
      WaitFor([&] { return (data = TryAcquire(size)) != nullptr; }, [&] { return CheckReaders(); },
              [&] { return DescribeWait(); }, to_writer_, options_, nullptr, deadline_ns);
  if (!st.ok()) return st;
  return data;
}

void RingWriter::Publish(uint64_t size, uint32_t flags) {
  ChunkMeta* m = ring_->meta(slot_);
  if (inline_) {
    flags |= kChunkInline;
    m->buffer = 0;
  } else {
    buffer_free_[buffer_] = 0;
    --free_buffers_;
    slot_buffer_[slot_] = buffer_;
    last_buffer_ = buffer_;
    m->buffer = buffer_;
  }
  last_size_ = size;
  m->size = size;
  m->flags = flags;
  m->seq.store(seq_ + 1, std::memory_order_release);
  ring_->to_readers().Notify();
  ++seq_;
  slot_ = slot_ + 1 == n_slots_ ? 0 : slot_ + 1;
  // The next Acquire re-reads the readers' cursors: fetch their lines now, while the message
  // just published is read, not when the next one is due.
  if (seq_ == free_below_) {
    for (uint32_t r = 0; r < ring_->n_readers(); ++r) __builtin_prefetch(ring_->cursor(r));
  }
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

RingReader::RingReader(std::unique_ptr<ShmRingBuffer> ring, uint32_t index, WaitOptions options)
    : ring_(std::move(ring)),
      index_(index),
      options_(options),
      to_writer_(ring_->to_writer()),
      n_slots_(ring_->n_slots()) {
  // Releases skip their CPU fence when the writer fences for them before it sleeps and this
  // process is one its fence reaches.
  to_writer_.light_notify = ring_->header()->writer_heavy_fences != 0 && RegisterForHeavyFences();
}

bool RingReader::Poll() const {
  return ring_->meta(slot_)->seq.load(std::memory_order_acquire) == seq_ + 1;
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

std::optional<RingReader::Chunk> RingReader::TryAcquire() {
  if (!Poll()) return std::nullopt;
  // No clock read here: the arrival predictor learns the gaps a reader waits across, and a
  // message that was already there ends no wait.
  return Current();
}

RingReader::Chunk RingReader::Current() {
  const ChunkMeta* m = ring_->meta(slot_);
  const uint32_t flags = m->flags;
  const uint64_t size = m->size;
  last_size_ = size;
  if (flags & kChunkInline) {
    // A size beyond the slot is a corrupt meta: no data (the caller reports it).
    if (size > kInlineBytes && !(flags & kChunkOverflow)) return Chunk{nullptr, size, flags};
    return Chunk{ring_->inline_data(slot_), size, flags};
  }
  const uint32_t buffer = m->buffer;
  if (buffer >= ring_->max_chunks()) return Chunk{nullptr, size, flags};  // corrupt
  last_buffer_ = buffer;
  return Chunk{ring_->chunk(buffer), size, flags};
}

absl::StatusOr<RingReader::Chunk> RingReader::Acquire(int64_t deadline_ns) {
  if (std::optional<Chunk> ready = TryAcquire()) return *ready;
  // Where the payload most likely is: inline in the slot after a small message, else the
  // buffer the writer picks (PickBuffer: the last one again after a large message, else the
  // next one).
  const uint32_t next_buffer =
      last_size_ >= RingWriter::kReuseAtOnceBytes
          ? last_buffer_
          : (last_buffer_ + 1 == ring_->max_chunks() ? 0 : last_buffer_ + 1);
  const uint8_t* next_chunk =
      last_size_ <= kInlineBytes ? ring_->inline_data(slot_) + 40 : ring_->chunk(next_buffer);
  int64_t arrived_ns = 0;
  absl::Status st = WaitFor(
      [&] {
        // Ask for the payload's first line (of the buffer the writer most likely picks) while
        // polling the chunk's meta: when the meta turns, the payload is on its way already
        // (two cache-line misses overlap instead of following each other).
        __builtin_prefetch(next_chunk);
        return Poll();
      },
      [&] { return CheckWriter(); },
      [&] {
        return absl::StrCat("writer (pid ", ring_->header()->writer_pid, ") of '",
                            ring_->segment().name(), "' to write message ", seq_, " (slot ", slot_,
                            ") for reader ", index_);
      },
      ring_->to_readers(), options_, &predictor_, deadline_ns, &arrived_ns);
  if (!st.ok()) return st;
  predictor_.OnArrival(arrived_ns);
  return Current();
}

void RingReader::Release() {
  ++seq_;
  ring_->cursor(index_)->consumed.store(seq_, std::memory_order_release);
  to_writer_.Notify();
  slot_ = slot_ + 1 == n_slots_ ? 0 : slot_ + 1;
}

void RingReader::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  ring_->to_readers().WakeAll();
}

}  // namespace vllm::ipc
