// The shared-memory ring of MessageQueue: SlotCount(max_chunks) slots (small payloads inline)
// and `max_chunks` data buffers of `max_chunk_bytes`, one writer, `n_readers` readers, laid out
// as shm_layout.h describes. ShmRingBuffer owns the mapping and
// validates it; RingWriter and RingReader are the two sides' views of it.
//
// Liveness: slot 0 of the segment's OFD locks is the writer's, slot 1 + r is reader r's
// (ShmSegment::LockSlot), so a waiting side tells a dead peer from a slow one.
//
// Thread-safety: a RingWriter or RingReader is used by one thread at a time; only Cancel() may
// be called from any thread.
#ifndef VLLM_IPC_SHM_RING_BUFFER_H_
#define VLLM_IPC_SHM_RING_BUFFER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ipc/shm_layout.h"
#include "ipc/shm_segment.h"
#include "ipc/wait_strategy.h"

namespace vllm::ipc {

class ShmRingBuffer {
 public:
  // Creates a segment for n_readers (1..kMaxShmReaders) readers; max_chunk_bytes must be a
  // positive multiple of 64 and max_chunks positive. InvalidArgument names the bad value.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmRingBuffer>> Create(
      const std::string& name, uint32_t n_readers, uint64_t max_chunks, uint64_t max_chunk_bytes);
  // Maps an existing segment and checks that its header is ours (magic, version) and matches
  // the expected geometry and the segment's size: DataLoss or InvalidArgument otherwise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmRingBuffer>> Open(
      const std::string& name, uint32_t n_readers, uint64_t max_chunks, uint64_t max_chunk_bytes);

  RingHeader* header() const { return header_; }
  ReaderCursor* cursor(uint32_t r) const {
    return reinterpret_cast<ReaderCursor*>(base() + kReaderCursorOffset + r * kCacheLine);
  }
  ChunkMeta* meta(uint64_t i) const {
    return reinterpret_cast<ChunkMeta*>(base() + header_->meta_offset + i * header_->meta_stride);
  }
  uint8_t* inline_data(uint64_t slot) const {
    return reinterpret_cast<uint8_t*>(meta(slot)) + kInlinePayloadOffset;
  }
  uint64_t n_slots() const { return SlotCount(header_->max_chunks); }
  uint8_t* chunk(uint64_t i) const {
    return base() + header_->data_offset + i * header_->max_chunk_bytes;
  }
  uint32_t n_readers() const { return header_->n_readers; }
  uint64_t max_chunks() const { return header_->max_chunks; }
  uint64_t max_chunk_bytes() const { return header_->max_chunk_bytes; }
  ShmSegment& segment() const { return *segment_; }

  FutexChannel to_readers() const { return {&header_->write_epoch, &header_->readers_sleeping}; }
  FutexChannel to_writer() const { return {&header_->read_epoch, &header_->writer_sleeping}; }

 private:
  explicit ShmRingBuffer(std::unique_ptr<ShmSegment> segment)
      : segment_(std::move(segment)), header_(reinterpret_cast<RingHeader*>(segment_->data())) {}
  uint8_t* base() const { return segment_->data(); }

  std::unique_ptr<ShmSegment> segment_;
  RingHeader* header_;
};

// The writer's side: takes chunks in ring order once every reader has read them.
// Messages are numbered from 0; message n's meta is slot n % n_slots, its payload inline in the
// slot or in a data buffer the writer picks (shm_layout.h).
class RingWriter {
 public:
  // After a message at least this large, the next Acquire re-reads the readers' cursors to
  // refill the same (cache-warm) buffer if it is free.
  static constexpr uint64_t kReuseAtOnceBytes = 64 << 10;

  RingWriter(std::unique_ptr<ShmRingBuffer> ring, WaitOptions options);

  // Waits until every reader has attached (or the deadline passes, naming the missing ones).
  [[nodiscard]] absl::Status WaitForReaders(int64_t deadline_ns);

  // Waits until message `size` bytes long can be written: a free slot, and for a payload over
  // kInlineBytes a free data buffer too. Returns where to write it (the slot's inline bytes or
  // the buffer, max_chunk_bytes long), filled by the caller before Publish(). An overflowing
  // message (sent over ZMQ) asks for 0 bytes. Errors: Unavailable naming a reader that died,
  // DeadlineExceeded naming the readers behind, Cancelled.
  [[nodiscard]] absl::StatusOr<uint8_t*> Acquire(uint64_t size, int64_t deadline_ns);
  // The same if it can be had now, else nullptr: no clock read, no waiting.
  uint8_t* TryAcquire(uint64_t size);
  // Publishes the chunk returned by the last Acquire() with `size` bytes and `flags`.
  void Publish(uint64_t size, uint32_t flags);

  // Marks the queue closed: readers drain what was published, then get Cancelled.
  void Close();
  // Makes a wait in progress (or the next one) return Cancelled. Thread-safe.
  void Cancel();

  ShmRingBuffer& ring() const { return *ring_; }

 private:
  // True once every reader has consumed the message that last used seq_'s slot. Re-reads the
  // readers' cursors only when the cached bound does not cover seq_.
  bool SlotFree();
  void RefreshConsumed();  // re-reads the cursors into free_below_
  // What the readers behind must have consumed for this wait to end.
  uint64_t NeededConsumed() const;
  // The smallest `consumed` over the readers.
  uint64_t MinConsumed() const;
  absl::Status CheckReaders() const;
  std::string DescribeWait() const;

  std::unique_ptr<ShmRingBuffer> ring_;
  WaitOptions options_;
  FutexChannel to_writer_;  // readers → this writer (heavy fence before sleeping, if offered)
  // Returns to buffer_free_ the buffers of messages every reader consumed (known so far).
  void ReclaimBuffers();
  // Picks the buffer for message seq_: after a large message its buffer again if free (its
  // lines are warm), else the next one (the order readers prefetch), else any free one.
  uint32_t PickBuffer() const;

  static constexpr uint32_t kNoBuffer = UINT32_MAX;
  const uint64_t n_slots_;
  uint64_t seq_ = 0;     // next message to write
  uint64_t slot_ = 0;    // its slot: seq_ % n_slots_
  uint64_t free_below_;  // messages < free_below_ have a free slot (cached)
  bool inline_ = false;  // the last Acquire handed out the slot's inline bytes
  // Data buffers: which are free and how many, the buffer each outstanding message's slot
  // holds (kNoBuffer: inline), and the messages whose buffers were reclaimed so far.
  std::vector<uint8_t> buffer_free_;
  uint32_t free_buffers_;
  std::vector<uint32_t> slot_buffer_;
  uint64_t reclaimed_below_ = 0;
  uint32_t buffer_ = 0;  // the buffer the last Acquire handed out
  uint32_t last_buffer_ = 0;
  uint64_t last_size_ = 0;  // the last message's size: large ones reuse their buffer at once
  std::atomic<bool> cancelled_{false};
};

// Reader r's side: reads every chunk in ring order.
class RingReader {
 public:
  struct Chunk {
    const uint8_t* data;  // valid until Release(); nullptr if the meta names no valid buffer
    uint64_t size;
    uint32_t flags;
  };

  // Takes the liveness slot of reader `index` and registers as attached. FailedPrecondition if
  // another process already attached as this reader.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RingReader>> Attach(
      std::unique_ptr<ShmRingBuffer> ring, uint32_t index, WaitOptions options);

  // Waits for the next chunk. Errors: Cancelled (closed by the writer once everything was read,
  // or Cancel()), Unavailable if the writer died, DeadlineExceeded.
  [[nodiscard]] absl::StatusOr<Chunk> Acquire(int64_t deadline_ns);
  // The next chunk if it is written already, else nullopt: no clock read, no waiting (the fast
  // path of Acquire).
  std::optional<Chunk> TryAcquire();
  // Marks the chunk returned by Acquire() read, letting the writer reuse it.
  void Release();
  // True if the next chunk is already written (no waiting needed).
  bool Poll() const;

  void Cancel();
  uint32_t index() const { return index_; }
  ShmRingBuffer& ring() const { return *ring_; }

 private:
  RingReader(std::unique_ptr<ShmRingBuffer> ring, uint32_t index, WaitOptions options);
  absl::Status CheckWriter() const;
  Chunk Current();  // the chunk of message seq_, once written

  std::unique_ptr<ShmRingBuffer> ring_;
  uint32_t index_;
  WaitOptions options_;
  FutexChannel to_writer_;  // this reader → the writer (light notify when the writer fences)
  uint64_t n_slots_;
  uint64_t seq_ = 0;          // next message to read
  uint64_t slot_ = 0;         // its slot: seq_ % n_slots_
  uint32_t last_buffer_ = 0;  // the last buffered message's buffer, and the last size: where
  uint64_t last_size_ = 0;    // the next payload most likely is (RingWriter::PickBuffer)
  ArrivalPredictor predictor_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace vllm::ipc

#endif  // VLLM_IPC_SHM_RING_BUFFER_H_
