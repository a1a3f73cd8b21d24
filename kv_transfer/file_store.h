// KV blocks stored in files (vLLM's ExampleConnector stores KV in files; ours): one file per
// (entry key, tensor-parallel rank), `{dir}/{key}/rank{tp_rank}.kv`, written atomically (a
// temporary file in the same directory, fsync, rename), mode 0600, in a 0700 key directory.
//
// File format (little-endian, kKvFileHeaderBytes = 72 bytes of header, then the data):
//   offset size  field
//        0    8  magic "vLLMkvF\0"
//        8    4  version (uint32, kKvFileVersion)
//       12    4  header_bytes (uint32, 72)
//       16   28  layout: num_layers, num_kv_heads, head_dim, block_size, dtype_bytes, tp_size,
//                tp_rank (int32 each; ValidateKvLayout's ranges)
//       44    4  num_blocks (int32, 0..kMaxFileBlocks)
//       48    4  num_tokens (int32, 0..num_blocks * block_size)
//       52    4  reserved (0)
//       56    8  data_xxh3 (uint64): XXH3-64 of all the data bytes
//       64    8  header_xxh3 (uint64): XXH3-64 of bytes 0..63
//       72       data: num_blocks blocks of layout.block_bytes() bytes, each in wire order
//                (kv_cache_view.h: every layer's K then V), in the order of the block ids given
//                to WriteBlocks — the same bytes as kv_wire's DATA frames.
// The file is exactly 72 + num_blocks * block_bytes bytes.
//
// Keys are made by the caller (hex strings of a hash); anything but 1..kMaxFileKeyBytes
// characters of [0-9a-f] is refused (InvalidArgument), so a key can never name another path.
// Errors name the file and the problem. Functions are thread-safe; concurrent writers of one
// entry each leave a whole file (the last rename wins); a reader sees a whole file or none.
#ifndef VLLM_KV_TRANSFER_FILE_STORE_H_
#define VLLM_KV_TRANSFER_FILE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/kv_cache_view.h"
#include "kv_transfer/types.h"

namespace vllm::kv_transfer::file_store {

inline constexpr uint32_t kKvFileVersion = 1;
inline constexpr size_t kKvFileHeaderBytes = 72;
inline constexpr int32_t kMaxFileBlocks = int32_t{1} << 20;
inline constexpr size_t kMaxFileKeyBytes = 256;

// The header's fields (everything but magic, version, sizes and the header checksum).
struct KvFileHeader {
  KvLayout layout;
  int32_t num_blocks = 0;
  int32_t num_tokens = 0;
  uint64_t data_checksum = 0;
  friend bool operator==(const KvFileHeader&, const KvFileHeader&) = default;
};

// The 72 header bytes of `header`.
std::string EncodeKvFileHeader(const KvFileHeader& header);

// Decodes the first kKvFileHeaderBytes of `bytes` (more bytes are ignored): DataLoss for fewer
// bytes, a wrong magic or a header checksum mismatch; FailedPrecondition for another version;
// InvalidArgument for a field out of range. Never aborts.
[[nodiscard]] absl::StatusOr<KvFileHeader> DecodeKvFileHeader(std::span<const uint8_t> bytes);

// OK when `key` is 1..kMaxFileKeyBytes characters of [0-9a-f]; InvalidArgument otherwise.
[[nodiscard]] absl::Status ValidateKey(std::string_view key);

// `{dir}/{key}/rank{tp_rank}.kv` (the key unchecked).
std::string EntryPath(const std::string& dir, const std::string& key, int32_t tp_rank);

// Writes blocks `block_ids` of `view` (and num_tokens) as the entry (`key`, layout.tp_rank),
// creating `dir` and `{dir}/{key}` (0700) when missing and replacing an existing entry
// atomically. `layout` must equal view.layout. InvalidArgument for a bad key, layout, view,
// block id (any id outside the view) or num_tokens (not in [0, blocks * block_size]); the
// errno's status naming the file when the file system fails (no temporary file is left).
[[nodiscard]] absl::Status WriteBlocks(const std::string& dir, const std::string& key,
                                       const KvLayout& layout, const KvCacheView& view,
                                       std::span<const int32_t> block_ids, int32_t num_tokens);

// Reads the entry (`key`, expected.tp_rank) into blocks `block_ids` of `view` (the i-th stored
// block into block_ids[i]) and sets *num_tokens. Everything is checked before a byte of the
// cache is written (the whole data is read into a buffer first, bounded by the expected size):
// NotFound when there is no such file; FailedPrecondition when its version, layout (naming
// the field: "block_size 16 != 32", the file's first) or block count differs from what the
// caller expects; DataLoss when it is truncated, too long, corrupt (magic, a header or data
// checksum) — each naming the file. InvalidArgument for a bad key or block id, before any I/O.
// On any error the cache is untouched.
[[nodiscard]] absl::Status ReadBlocks(const std::string& dir, const std::string& key,
                                      const KvLayout& expected, const KvCacheView& view,
                                      std::span<const int32_t> block_ids, int32_t* num_tokens);

// Whether the entry (`key`, tp_rank) exists with a valid header whose size matches the file
// (reads only the header).
bool Exists(const std::string& dir, const std::string& key, int32_t tp_rank);

// The entry's num_tokens (reads only the header; errors as ReadBlocks's before the data).
[[nodiscard]] absl::StatusOr<int32_t> StoredTokens(const std::string& dir, const std::string& key,
                                                   int32_t tp_rank);

}  // namespace vllm::kv_transfer::file_store

#endif  // VLLM_KV_TRANSFER_FILE_STORE_H_
