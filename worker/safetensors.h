// SafetensorsFile: one memory-mapped, validated .safetensors file.
//
// Layout (https://huggingface.co/docs/safetensors), byte by byte:
//   [0, 8)        N, the header length, unsigned 64-bit little-endian.
//   [8, 8 + N)    UTF-8 JSON object: {"<tensor>": {"dtype": "F32", "shape": [d0, d1, ...],
//                 "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v", ...}};
//                 may be padded with trailing spaces.
//   [8 + N, EOF)  the data buffer; a tensor's bytes are [begin, end) relative to its start,
//                 row-major, little-endian, not necessarily aligned.
//
// Open validates the whole header before anything is read (see worker/weights.h for the
// list), so later lookups can trust every offset. The data stays mapped read-only
// (MAP_PRIVATE) for the object's lifetime; a tensor's bytes are a span into the mapping.
// If another process truncates the file while it is mapped, reads fault (SIGBUS): the usual
// caveat of mmap, the same as for the Python reader.
//
// Thread-safety: immutable after Open; any number of threads may read concurrently.
#ifndef VLLM_WORKER_SAFETENSORS_H_
#define VLLM_WORKER_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::worker {

// The element types safetensors defines. Every one is accepted by the header validation;
// only kF32, kF16 and kBF16 can be converted to float32 by WeightSource::Load.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// The header's name for a dtype ("F32", "BF16", ...), and its size in bytes.
std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);

// One header entry, validated: nbytes == product(shape) * dtype size and
// [begin, begin + nbytes) lies within the data buffer.
struct SafetensorsTensorInfo {
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;   // offset of the first byte, relative to the data buffer
  uint64_t nbytes = 0;  // end - begin
};

// Largest header Open accepts (the Python reader's limit too).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Validates a whole file image (header length, JSON header and offsets) and returns its
// tensors by name. `file_name` only prefixes error messages. InvalidArgument for anything
// malformed, naming the tensor when one entry is to blame; never throws.
[[nodiscard]] absl::StatusOr<std::map<std::string, SafetensorsTensorInfo, std::less<>>>
ParseSafetensorsHeader(std::span<const std::byte> file, std::string_view file_name);

class SafetensorsFile {
 public:
  // Maps `path` and validates its header. NotFound when the file does not exist,
  // InvalidArgument naming the file when it is not a regular file or is malformed,
  // Internal when a system call fails.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::filesystem::path& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // The entry for `name`, or nullptr. The pointer lives as long as this object.
  const SafetensorsTensorInfo* Find(std::string_view name) const;
  // The bytes of a tensor found in this file (a view into the mapping).
  std::span<const std::byte> Data(const SafetensorsTensorInfo& info) const;
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFile(std::filesystem::path path, const std::byte* map, size_t map_size,
                  std::map<std::string, SafetensorsTensorInfo, std::less<>> tensors);

  std::filesystem::path path_;
  const std::byte* map_;  // owned mapping (munmap in the destructor); nullptr when size 0
  size_t map_size_;
  const std::byte* data_;  // start of the data buffer inside the mapping
  std::map<std::string, SafetensorsTensorInfo, std::less<>> tensors_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_SAFETENSORS_H_
