// Byte layout of the shared-memory ring buffer behind MessageQueue (see docs/ipc_format.md).
//
// Plain fixed-size structs placed in a POSIX shared-memory segment: no pointers, no heap, only
// offsets. The classes that read and write them live in shm_ring_buffer.h.
//
// Segment (all offsets from the start of the segment, native byte order, 4096-aligned parts):
//
//   [0, 4096)                          RingHeader
//   [meta_offset, + max_chunks*meta_stride)
//                                      ChunkMeta for chunk i at meta_offset + i * meta_stride;
//                                      meta_stride = 64 * ceil((16 + n_readers) / 64)
//   [data_offset, + max_chunks*max_chunk_bytes)
//                                      payload of chunk i at data_offset + i * max_chunk_bytes
//
// Protocol (one writer, n_readers readers; vLLM's ShmRingBuffer "written flag + read flags"):
//   writer, chunk i in ring order: wait until written == 0 or every read[r] == 1;
//     written := 0; copy payload, size, flags; read[r] := 0 for all r (release);
//     written := 1 (release); if readers_sleeping: ++write_epoch, futex-wake write_epoch.
//   reader r, its next chunk i: wait until read[r] == 0 (acquire) and then written == 1
//     (acquire); use the payload; read[r] := 1 (release);
//     if writer_sleeping: ++read_epoch, futex-wake read_epoch.
// The writer resets the read flags only after clearing `written`, and a reader loads its read
// flag before `written`, so a reader never sees a stale written == 1 with a fresh read flag.
#ifndef VLLM_IPC_SHM_LAYOUT_H_
#define VLLM_IPC_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vllm::ipc {

inline constexpr uint64_t kRingMagic = 0x474e4952'4d4c4c56ULL;  // "VLLMRING" little-endian
inline constexpr uint32_t kRingVersion = 1;
inline constexpr uint32_t kMaxShmReaders = 64;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kRingHeaderBytes = 4096;

// ChunkMeta::flags bits.
inline constexpr uint32_t kChunkOverflow = 1u << 0;  // payload travels over ZMQ, not in the chunk

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
  uint32_t reserved0;                                  // 76
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

// Per-chunk metadata; followed in memory by `n_readers` one-byte read flags.
struct ChunkMeta {
  std::atomic<uint32_t> written;  // 0   1 while the chunk holds an unread-by-someone message
  uint32_t flags;                 // 4   kChunkOverflow, ...
  uint64_t size;                  // 8   payload bytes (the ZMQ frame's size when overflowing)
  std::atomic<uint8_t> read[1];   // 16  one flag per reader; really n_readers long
};
static_assert(std::is_standard_layout_v<ChunkMeta>);
static_assert(offsetof(ChunkMeta, read) == 16);

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
  g.meta_offset = kRingHeaderBytes;
  g.meta_stride = AlignUp(offsetof(ChunkMeta, read) + n_readers, kCacheLine);
  g.data_offset = AlignUp(g.meta_offset + max_chunks * g.meta_stride, 4096);
  g.total_bytes = g.data_offset + max_chunks * max_chunk_bytes;  // max_chunk_bytes % 64 == 0
  return g;
}

}  // namespace vllm::ipc

#endif  // VLLM_IPC_SHM_LAYOUT_H_
