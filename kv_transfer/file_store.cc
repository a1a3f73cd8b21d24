#include "kv_transfer/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <system_error>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "xxhash.h"

namespace vllm::kv_transfer::file_store {
namespace {

static_assert(std::endian::native == std::endian::little, "the file format is little-endian");

constexpr char kMagic[8] = {'v', 'L', 'L', 'M', 'k', 'v', 'F', '\0'};

// The header byte by byte (file_store.h).
struct RawHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  int32_t layout[7];
  int32_t num_blocks;
  int32_t num_tokens;
  uint32_t reserved;
  uint64_t data_xxh3;
  uint64_t header_xxh3;
};
static_assert(std::is_standard_layout_v<RawHeader> && std::is_trivially_copyable_v<RawHeader>);
static_assert(sizeof(RawHeader) == kKvFileHeaderBytes);
static_assert(offsetof(RawHeader, layout) == 16 && offsetof(RawHeader, num_blocks) == 44 &&
              offsetof(RawHeader, data_xxh3) == 56 && offsetof(RawHeader, header_xxh3) == 64);

absl::Status ErrnoStatus(int err, const char* what, const std::string& path) {
  const std::string message = absl::StrFormat("%s %s: %s", what, path, std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Closes a descriptor at scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status WriteAll(int fd, const uint8_t* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write", path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Reads exactly n bytes at `offset`; DataLoss when the file ends first.
absl::Status ReadAt(int fd, uint8_t* data, size_t n, off_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read", path);
    }
    if (r == 0) return absl::DataLossError(absl::StrFormat("%s: truncated", path));
    data += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
  return absl::OkStatus();
}

absl::Status CheckBlockIds(const KvCacheView& view, std::span<const int32_t> block_ids) {
  if (block_ids.size() > static_cast<size_t>(kMaxFileBlocks)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d blocks exceed the limit of %d", block_ids.size(), kMaxFileBlocks));
  }
  for (int32_t id : block_ids) {
    if (absl::Status s = CheckBlockId(view, id); !s.ok()) {
      return absl::InvalidArgumentError(s.message());
    }
  }
  return absl::OkStatus();
}

// An open entry file whose header decoded and whose size matches it.
struct OpenEntry {
  Fd fd;
  KvFileHeader header;
};

absl::Status OpenEntryFile(const std::string& path, OpenEntry* entry) {
  entry->fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (entry->fd.fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat st {};
  if (::fstat(entry->fd.fd, &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat("%s: not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) < kKvFileHeaderBytes) {
    return absl::DataLossError(absl::StrFormat("%s: %d bytes, shorter than the %d-byte header",
                                               path, st.st_size, kKvFileHeaderBytes));
  }
  uint8_t raw[kKvFileHeaderBytes];
  VLLM_RETURN_IF_ERROR(ReadAt(entry->fd.fd, raw, sizeof(raw), 0, path));
  auto header = DecodeKvFileHeader(raw);
  if (!header.ok()) {
    return absl::Status(header.status().code(),
                        absl::StrCat(path, ": ", header.status().message()));
  }
  entry->header = *header;
  const uint64_t want =
      kKvFileHeaderBytes + static_cast<uint64_t>(header->num_blocks) *
                               static_cast<uint64_t>(header->layout.block_bytes());
  if (static_cast<uint64_t>(st.st_size) != want) {
    return absl::DataLossError(
        absl::StrFormat("%s: %d bytes, but its header says %d (%d blocks of %d bytes): %s", path,
                        st.st_size, want, header->num_blocks, header->layout.block_bytes(),
                        static_cast<uint64_t>(st.st_size) < want ? "truncated" : "trailing bytes"));
  }
  return absl::OkStatus();
}

// Streams the blocks into `fd` after the header and returns their XXH3-64.
absl::StatusOr<uint64_t> WriteData(int fd, const KvCacheView& view,
                                   std::span<const int32_t> block_ids, const std::string& path) {
  const size_t block = static_cast<size_t>(view.layout.block_bytes());
  const size_t per_chunk = std::max<size_t>(1, (size_t{4} << 20) / block);
  std::vector<uint8_t> buffer(std::min(per_chunk, std::max<size_t>(block_ids.size(), 1)) * block);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (state == nullptr) return absl::ResourceExhaustedError("XXH3_createState failed");
  XXH3_64bits_reset(state.get());
  for (size_t i = 0; i < block_ids.size(); i += per_chunk) {
    const size_t n = std::min(per_chunk, block_ids.size() - i);
    for (size_t j = 0; j < n; ++j) CopyBlockOut(view, block_ids[i + j], &buffer[j * block]);
    XXH3_64bits_update(state.get(), buffer.data(), n * block);
    VLLM_RETURN_IF_ERROR(WriteAll(fd, buffer.data(), n * block, path));
  }
  return XXH3_64bits_digest(state.get());
}

std::string TempPath(const std::string& final_path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrFormat("%s.tmp-%d-%d", final_path, ::getpid(), counter.fetch_add(1));
}

absl::Status MakeEntryDir(const std::string& dir, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir), ec);
  if (ec) {
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrFormat("cannot create %s: %s", dir, ec.message()));
  }
  const std::string key_dir = absl::StrCat(dir, "/", key);
  if (::mkdir(key_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "cannot create", key_dir);
  }
  return absl::OkStatus();
}

// Writes the whole entry into the new file `fd` (header last, once the checksum is known).
absl::Status WriteEntry(int fd, const KvCacheView& view, std::span<const int32_t> block_ids,
                        int32_t num_tokens, const std::string& path) {
  if (::lseek(fd, static_cast<off_t>(kKvFileHeaderBytes), SEEK_SET) < 0) {
    return ErrnoStatus(errno, "cannot seek", path);
  }
  VLLM_ASSIGN_OR_RETURN(uint64_t checksum, WriteData(fd, view, block_ids, path));
  KvFileHeader header{view.layout, static_cast<int32_t>(block_ids.size()), num_tokens, checksum};
  const std::string bytes = EncodeKvFileHeader(header);
  if (::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    return ErrnoStatus(errno, "cannot write", path);
  }
  if (::fsync(fd) != 0) return ErrnoStatus(errno, "cannot fsync", path);
  return absl::OkStatus();
}

}  // namespace

std::string EncodeKvFileHeader(const KvFileHeader& header) {
  RawHeader raw{};
  std::memcpy(raw.magic, kMagic, sizeof(kMagic));
  raw.version = kKvFileVersion;
  raw.header_bytes = kKvFileHeaderBytes;
  const KvLayout& l = header.layout;
  const int32_t layout[7] = {l.num_layers,  l.num_kv_heads, l.head_dim, l.block_size,
                             l.dtype_bytes, l.tp_size,      l.tp_rank};
  std::memcpy(raw.layout, layout, sizeof(layout));
  raw.num_blocks = header.num_blocks;
  raw.num_tokens = header.num_tokens;
  raw.data_xxh3 = header.data_checksum;
  raw.header_xxh3 = XXH3_64bits(&raw, offsetof(RawHeader, header_xxh3));
  return std::string(reinterpret_cast<const char*>(&raw), sizeof(raw));
}

absl::StatusOr<KvFileHeader> DecodeKvFileHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kKvFileHeaderBytes) {
    return absl::DataLossError(absl::StrFormat("%d bytes, shorter than the %d-byte header",
                                               bytes.size(), kKvFileHeaderBytes));
  }
  RawHeader raw;
  std::memcpy(&raw, bytes.data(), sizeof(raw));
  if (std::memcmp(raw.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a KV block file (bad magic)");
  }
  if (raw.version != kKvFileVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV block file version %d (this build reads %d)", raw.version, kKvFileVersion));
  }
  if (XXH3_64bits(&raw, offsetof(RawHeader, header_xxh3)) != raw.header_xxh3) {
    return absl::DataLossError("header checksum mismatch (corrupt header)");
  }
  if (raw.header_bytes != kKvFileHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("header_bytes %d (expected %d)", raw.header_bytes, kKvFileHeaderBytes));
  }
  KvFileHeader h;
  h.layout = KvLayout{raw.layout[0], raw.layout[1], raw.layout[2], raw.layout[3],
                      raw.layout[4], raw.layout[5], raw.layout[6]};
  VLLM_RETURN_IF_ERROR(ValidateKvLayout(h.layout));
  h.num_blocks = raw.num_blocks;
  h.num_tokens = raw.num_tokens;
  h.data_checksum = raw.data_xxh3;
  if (h.num_blocks < 0 || h.num_blocks > kMaxFileBlocks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_blocks %d is not in [0, %d]", h.num_blocks, kMaxFileBlocks));
  }
  const int64_t max_tokens = int64_t{h.num_blocks} * h.layout.block_size;
  if (h.num_tokens < 0 || h.num_tokens > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_tokens %d is not in [0, %d]", h.num_tokens, max_tokens));
  }
  return h;
}

absl::Status ValidateKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxFileKeyBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV store key of %d characters (expected 1 to %d)", key.size(), kMaxFileKeyBytes));
  }
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return absl::InvalidArgumentError(
          "KV store key: only lowercase hex digits [0-9a-f] are allowed");
    }
  }
  return absl::OkStatus();
}

std::string EntryPath(const std::string& dir, const std::string& key, int32_t tp_rank) {
  return absl::StrFormat("%s/%s/rank%d.kv", dir, key, tp_rank);
}

absl::Status WriteBlocks(const std::string& dir, const std::string& key, const KvLayout& layout,
                         const KvCacheView& view, std::span<const int32_t> block_ids,
                         int32_t num_tokens) {
  VLLM_RETURN_IF_ERROR(ValidateKey(key));
  VLLM_RETURN_IF_ERROR(ValidateKvCacheView(view));
  if (const std::string diff = KvLayoutDifference(layout, view.layout); !diff.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteBlocks: the layout differs from the view's: ", diff));
  }
  VLLM_RETURN_IF_ERROR(CheckBlockIds(view, block_ids));
  const int64_t max_tokens = static_cast<int64_t>(block_ids.size()) * layout.block_size;
  if (num_tokens < 0 || num_tokens > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("WriteBlocks: num_tokens %d is not in [0, %d] for %d blocks of %d tokens",
                        num_tokens, max_tokens, block_ids.size(), layout.block_size));
  }
  VLLM_RETURN_IF_ERROR(MakeEntryDir(dir, key));
  const std::string path = EntryPath(dir, key, layout.tp_rank);
  const std::string tmp = TempPath(path);
  absl::Status status;
  {
    Fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
    if (fd.fd < 0) return ErrnoStatus(errno, "cannot create", tmp);
    status = WriteEntry(fd.fd, view, block_ids, num_tokens, tmp);
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, "cannot rename into", path);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

absl::Status ReadBlocks(const std::string& dir, const std::string& key, const KvLayout& expected,
                        const KvCacheView& view, std::span<const int32_t> block_ids,
                        int32_t* num_tokens) {
  VLLM_RETURN_IF_ERROR(ValidateKey(key));
  VLLM_RETURN_IF_ERROR(ValidateKvCacheView(view));
  if (const std::string diff = KvLayoutDifference(expected, view.layout); !diff.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadBlocks: the expected layout differs from the view's: ", diff));
  }
  VLLM_RETURN_IF_ERROR(CheckBlockIds(view, block_ids));
  const std::string path = EntryPath(dir, key, expected.tp_rank);
  OpenEntry entry;
  VLLM_RETURN_IF_ERROR(OpenEntryFile(path, &entry));
  const KvFileHeader& h = entry.header;
  if (const std::string diff = KvLayoutDifference(h.layout, expected); !diff.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: stored with another KV layout (file vs ours): %s", path, diff));
  }
  if (static_cast<size_t>(h.num_blocks) != block_ids.size()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: holds %d blocks, %d expected", path, h.num_blocks, block_ids.size()));
  }
  // The data, bounded by the expected size (block_ids.size() blocks), checked before use.
  const size_t block = static_cast<size_t>(expected.block_bytes());
  std::vector<uint8_t> data;
  try {
    data.resize(block_ids.size() * block);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: cannot allocate %d bytes to read it", path, block_ids.size() * block));
  }
  VLLM_RETURN_IF_ERROR(
      ReadAt(entry.fd.fd, data.data(), data.size(), static_cast<off_t>(kKvFileHeaderBytes), path));
  if (XXH3_64bits(data.data(), data.size()) != h.data_checksum) {
    return absl::DataLossError(absl::StrFormat("%s: data checksum mismatch (corrupt file)", path));
  }
  for (size_t i = 0; i < block_ids.size(); ++i) {
    CopyBlockIn(view, block_ids[i], &data[i * block]);
  }
  *num_tokens = h.num_tokens;
  return absl::OkStatus();
}

bool Exists(const std::string& dir, const std::string& key, int32_t tp_rank) {
  return StoredTokens(dir, key, tp_rank).ok();
}

absl::StatusOr<int32_t> StoredTokens(const std::string& dir, const std::string& key,
                                     int32_t tp_rank) {
  VLLM_RETURN_IF_ERROR(ValidateKey(key));
  const std::string path = EntryPath(dir, key, tp_rank);
  OpenEntry entry;
  VLLM_RETURN_IF_ERROR(OpenEntryFile(path, &entry));
  if (entry.header.layout.tp_rank != tp_rank) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: stored by tp_rank %d", path, entry.header.layout.tp_rank));
  }
  return entry.header.num_tokens;
}

}  // namespace vllm::kv_transfer::file_store
