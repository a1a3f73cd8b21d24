// Byte layout of the shared-memory ring buffer behind MessageQueue (see docs/ipc_format.md).
//
// Plain fixed-size structs placed in a POSIX shared-memory segment: no pointers, no heap, only
// offsets. The classes that read and write them live in shm_ring_buffer.h.
//
// Segment (all offsets from the start of the segment, native byte order):
//
//   [0, 4096)                          RingHeader
//   [4096, + n_readers * 64)           ReaderCursor of reader r at 4096 + r * 64 (one line each)
//   [meta_offset, + n_slots * 128)     slot i at meta_offset + i * 128: a ChunkMeta line, then
//                                      inline payload (kInlineBytes from the meta's byte 24)
//                                      (meta_offset = 4096 + n_readers * 64, meta_stride = 128,
//                                      n_slots = SlotCount(max_chunks))
//   [data_offset, + max_chunks*max_chunk_bytes)
//                                      data buffer b at data_offset + b * max_chunk_bytes
//                                      (data_offset 4096-aligned)
//
// Protocol (one writer, n_readers readers). Messages are numbered 0, 1, 2, ...; message n's
// meta is slot n % n_slots. A payload of at most kInlineBytes sits in the slot itself (flag
// kChunkInline): up to n_slots small messages can be in flight, so with more readers than cores
// each process runs through a long batch per time slice. A larger payload sits in the data
// buffer the meta names (max_chunks of them, max_chunk_bytes each); the writer refills the
// buffer a large message just left (its lines are still in some cache). Each line has
// one writing side: the writer writes chunk metas, reader r writes only its own cursor line, so no
// line is written by two sides (no false sharing between readers, no reader store into a line the
// writer polls).
//   writer, message n: wait until n < n_slots or every reader's `consumed` >= n + 1 - n_slots
//     (it caches the minimum and re-reads the cursors only when that runs out), and for a
//     large payload until some buffer's last message was consumed by every reader; copy
//     payload (inline or into the buffer), size, flags, buffer; store seq = n + 1 (release);
//     fence; if readers_sleeping:
//     ++write_epoch, futex-wake write_epoch.
//   reader r, its next message n: wait until chunk meta seq == n + 1 (acquire); use the
//     payload; store its cursor's consumed = n + 1 (release); fence (or none, see below); if
//     writer_sleeping: ++read_epoch, futex-wake read_epoch.
// A slot's seq changes only when the writer reuses it for message n + n_slots, which it
// does only after every reader consumed message n: a reader never sees a stale chunk as new.
// Each side fences between its store and its load of the other's sleeping count (Dekker); with
// writer_heavy_fences == 1 a reader skips that fence and the writer, before it sleeps, makes
// every running thread fence instead (membarrier, futex.h): the release is on the reader's
// critical path, the writer's sleep (a full ring) is rare.
#ifndef VLLM_IPC_SHM_LAYOUT_H_
#define VLLM_IPC_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vllm::ipc {

inline constexpr uint64_t kRingMagic = 0x474e4952'4d4c4c56ULL;  // "VLLMRING" little-endian
inline constexpr uint32_t kRingVersion = 2;
inline constexpr uint32_t kMaxShmReaders = 64;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kRingHeaderBytes = 4096;

// ChunkMeta::flags bits.
inline constexpr uint32_t kChunkOverflow = 1u << 0;  // payload travels over ZMQ, not in the chunk
inline constexpr uint32_t kChunkInline = 1u << 1;    // payload sits in the slot, not in a buffer

// A slot: its ChunkMeta line and one more line; payloads up to kInlineBytes live in it.
inline constexpr size_t kSlotBytes = 128;
inline constexpr size_t kInlinePayloadOffset = 24;
inline constexpr size_t kInlineBytes = kSlotBytes - kInlinePayloadOffset;  // 104
// Slots: at least kMinSlots (small messages batch deep), at least one per data buffer.
inline constexpr uint64_t kMinSlots = 1024;
inline constexpr uint64_t SlotCount(uint64_t max_chunks) {
  return max_chunks > kMinSlots ? max_chunks : kMinSlots;
}

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint8_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && sizeof(std::atomic<uint8_t>) == 1);

// The segment's first page. Written once by the writer before any reader attaches, except the
// fields marked "live".
struct RingHeader {
  // Line 0: geometry, immutable after creation.
  uint64_t magic;            // 0   kRingMagic
  uint32_t version;          // 8   kRingVersion
  uint32_t n_readers;        // 12  readers that use this segment (local readers)
  uint64_t max_chunks;       // 16
  uint64_t max_chunk_bytes;  // 24
  uint64_t meta_offset;      // 32
  uint64_t meta_stride;      // 40
  uint64_t data_offset;      // 48
  uint64_t total_bytes;      // 56  size of the whole segment
  // Line 1: attachment and lifetime (live).
  alignas(kCacheLine) std::atomic<uint32_t> attached;  // 64  readers that attached
  std::atomic<uint32_t> closed;                        // 68  1 once the writer closed the queue
  int32_t writer_pid;                                  // 72
  // 1 when the writer issues a heavy fence (futex.h) before it sleeps waiting for readers, so
  // readers may release chunks without a CPU fence; 0 (older writers, kernels without
  // membarrier) when readers must fence.
  uint32_t writer_heavy_fences;  // 76
  // Lines 2..5: pid of each reader slot, 0 until it attaches (for error messages).
  alignas(kCacheLine) std::atomic<int32_t> reader_pid[kMaxShmReaders];  // 128
  // Line 6: the readers' futex word (live).
  alignas(kCacheLine) std::atomic<uint32_t> write_epoch;  // 384 bumped by a write with sleepers
  std::atomic<uint32_t> readers_sleeping;                 // 388 readers blocked or about to
  // Line 7: the writer's futex word (live).
  alignas(kCacheLine) std::atomic<uint32_t> read_epoch;  // 448 bumped by a read with a sleeper
  std::atomic<uint32_t> writer_sleeping;                 // 452 1 while the writer blocks
};
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(offsetof(RingHeader, attached) == 64);
static_assert(offsetof(RingHeader, reader_pid) == 128);
static_assert(offsetof(RingHeader, write_epoch) == 384);
static_assert(offsetof(RingHeader, read_epoch) == 448);
static_assert(sizeof(RingHeader) <= kRingHeaderBytes);

// One reader's progress; the only thing that reader writes, alone on its cache line.
struct alignas(kCacheLine) ReaderCursor {
  std::atomic<uint64_t> consumed;  // 0   messages this reader has released (n + 1 after n)
};
static_assert(sizeof(ReaderCursor) == kCacheLine);

// Per-chunk metadata, written by the writer only, one cache line per chunk.
struct alignas(kCacheLine) ChunkMeta {
  std::atomic<uint64_t> seq;  // 0   n + 1 once message n is in the chunk; 0 before first use
  uint32_t flags;             // 8   kChunkOverflow, kChunkInline
  uint32_t buffer;            // 12  the data buffer holding the payload (< max_chunks)
  uint64_t size;              // 16  payload bytes (the ZMQ frame's size when overflowing)
                              // 24  inline payload (kChunkInline), into the slot's next line
};
static_assert(std::is_standard_layout_v<ChunkMeta>);
static_assert(sizeof(ChunkMeta) == kCacheLine);
static_assert(offsetof(ChunkMeta, size) + sizeof(uint64_t) == kInlinePayloadOffset);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

inline constexpr uint64_t kReaderCursorOffset = kRingHeaderBytes;

// Geometry derived from (n_readers, max_chunks, max_chunk_bytes).
struct RingGeometry {
  uint64_t meta_offset;
  uint64_t meta_stride;
  uint64_t data_offset;
  uint64_t total_bytes;
};

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline constexpr RingGeometry ComputeGeometry(uint32_t n_readers, uint64_t max_chunks,
                                              uint64_t max_chunk_bytes) {
  RingGeometry g{};
  g.meta_offset = kReaderCursorOffset + uint64_t{n_readers} * kCacheLine;
  g.meta_stride = kSlotBytes;
  g.data_offset = AlignUp(g.meta_offset + SlotCount(max_chunks) * g.meta_stride, 4096);
  g.total_bytes = g.data_offset + max_chunks * max_chunk_bytes;  // max_chunk_bytes % 64 == 0
  return g;
}

}  // namespace vllm::ipc

#endif  // VLLM_IPC_SHM_LAYOUT_H_
