// The shared-memory segment of a ShmCommunicator group: plain fixed-size structs, no pointers,
// standard layout. The code that reads and writes them is in shm_communicator.cc; the group's
// creator initialises the header (CreateShmCommSegment), the ranks only attach.
//
// Segment (all offsets in bytes from the start of the mapping, little-endian, x86-64):
//
//   [0, 2176)            ShmCommHeader (below)
//   [2176, 8192)         zero padding
//   [8192, 8192 + 2 * world_size * slot_bytes)
//                        data: two buffers (b = 0, 1, used alternately by consecutive chunks)
//                        of world_size slots each; slot (b, r) starts at
//                        data_offset + (b * world_size + r) * slot_bytes and holds floats.
//
// ShmCommHeader:
//   line 0 — written once by the creator before any rank can know the name, then read-only:
//     0   uint64  magic          kShmCommMagic ("VLLMCOMM" read as little-endian bytes)
//     8   uint32  version        kShmCommVersion
//     12  uint32  world_size     1..kShmCommMaxRanks
//     16  uint64  slot_bytes     bytes of one slot, a multiple of 64
//     24  uint64  data_offset    kShmCommDataOffset
//     32  uint64  total_bytes    data_offset + 2 * world_size * slot_bytes (= segment size)
//     40  24 bytes reserved (zero)
//   line 1 — group state, written by the ranks:
//     64  atomic<uint32> futex_epoch     bumped to wake ranks blocked in a barrier
//     68  atomic<uint32> futex_sleepers  ranks currently blocked (see ipc/wait_strategy.h)
//     72  atomic<uint32> joined_count    ranks that hold their liveness lock; the name is
//                                        unlinked once it reaches world_size
//     76  uint32  reserved (zero)
//     80  atomic<uint64> abort_info      0 while healthy; set once (by the first rank whose
//                                        collective or join failed) to
//                                          bit 63      1
//                                          bits 40-47  absl::StatusCode of the failure
//                                          bits 32-39  the reporting rank
//                                          bits 0-31   bit r set: rank r was blamed (dead, or
//                                                      not arrived in time)
//     88  40 bytes reserved (zero)
//   lines 2..33 — ShmCommRankLine ranks[kShmCommMaxRanks], rank r at 128 + 64 * r, each alone
//   in its cache line:
//     +0  atomic<uint64> arrived   number of the last barrier rank r reached (0 = none)
//     +8  atomic<uint32> joined    1 once rank r took its liveness lock (never reset)
//     +12 52 bytes reserved (zero)
//
// Liveness: rank r holds an OFD lock (F_OFD_SETLK) on byte r of the segment's file for as long
// as it has the segment open. The kernel drops it when the process dies (kill -9 included), so
// a waiting rank detects a dead peer with one F_OFD_GETLK, also after the name was unlinked.
#ifndef VLLM_KERNELS_COMM_SHM_LAYOUT_H_
#define VLLM_KERNELS_COMM_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vllm::kernels::comm {

inline constexpr uint64_t kShmCommMagic = 0x4d4d4f434d4c4c56ULL;  // "VLLMCOMM"
inline constexpr uint32_t kShmCommVersion = 1;
inline constexpr int32_t kShmCommMaxRanks = 32;  // abort_info has a 32-bit rank mask
inline constexpr size_t kShmCommDataOffset = 8192;

struct alignas(64) ShmCommRankLine {
  std::atomic<uint64_t> arrived;
  std::atomic<uint32_t> joined;
  uint8_t reserved[52];
};

struct alignas(64) ShmCommHeader {
  // Line 0: immutable after creation.
  uint64_t magic;
  uint32_t version;
  uint32_t world_size;
  uint64_t slot_bytes;
  uint64_t data_offset;
  uint64_t total_bytes;
  uint8_t reserved0[24];
  // Line 1: group state.
  std::atomic<uint32_t> futex_epoch;
  std::atomic<uint32_t> futex_sleepers;
  std::atomic<uint32_t> joined_count;
  uint32_t reserved1;
  std::atomic<uint64_t> abort_info;
  uint8_t reserved2[40];
  // Lines 2..33.
  ShmCommRankLine ranks[kShmCommMaxRanks];
};

static_assert(std::is_standard_layout_v<ShmCommRankLine>);
static_assert(std::is_standard_layout_v<ShmCommHeader>);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && sizeof(std::atomic<uint64_t>) == 8);
static_assert(sizeof(ShmCommRankLine) == 64);
static_assert(offsetof(ShmCommRankLine, joined) == 8);
static_assert(offsetof(ShmCommHeader, version) == 8);
static_assert(offsetof(ShmCommHeader, world_size) == 12);
static_assert(offsetof(ShmCommHeader, slot_bytes) == 16);
static_assert(offsetof(ShmCommHeader, data_offset) == 24);
static_assert(offsetof(ShmCommHeader, total_bytes) == 32);
static_assert(offsetof(ShmCommHeader, futex_epoch) == 64);
static_assert(offsetof(ShmCommHeader, futex_sleepers) == 68);
static_assert(offsetof(ShmCommHeader, joined_count) == 72);
static_assert(offsetof(ShmCommHeader, abort_info) == 80);
static_assert(offsetof(ShmCommHeader, ranks) == 128);
static_assert(sizeof(ShmCommHeader) == 128 + 64 * kShmCommMaxRanks);
static_assert(sizeof(ShmCommHeader) == 2176);
static_assert(sizeof(ShmCommHeader) <= kShmCommDataOffset);

// Bytes of a segment for `world_size` ranks with `slot_bytes` per slot.
constexpr size_t ShmCommSegmentBytes(int32_t world_size, size_t slot_bytes) {
  return kShmCommDataOffset + 2 * static_cast<size_t>(world_size) * slot_bytes;
}

}  // namespace vllm::kernels::comm

#endif  // VLLM_KERNELS_COMM_SHM_LAYOUT_H_
