#include "worker/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vllm::worker {
namespace {

using json = nlohmann::json;
using TensorMap = std::map<std::string, SafetensorsTensorInfo, std::less<>>;

struct DtypeEntry {
  SafetensorsDtype dtype;
  std::string_view name;
  int64_t size;
};

constexpr std::array<DtypeEntry, 15> kDtypes = {{
    {SafetensorsDtype::kBool, "BOOL", 1},
    {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},
    {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},
    {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},
    {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
}};

const DtypeEntry& Entry(SafetensorsDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e;
  }
  return kDtypes[0];  // unreachable: every enumerator is in the table
}

std::optional<SafetensorsDtype> DtypeFromName(std::string_view name) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

// A valid header nests three levels deep (object → entry → shape). Rejecting deeper text
// before parsing keeps a hostile "[[[[..." header from costing gigabytes of JSON nodes.
constexpr int kMaxJsonDepth = 8;

bool NestsTooDeeply(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Messages are built with absl::StrCat, which (Debian's Abseil has its own string_view)
// takes absl::string_view, not std::string_view: helpers here take the former.
absl::Status EntryError(absl::string_view file, absl::string_view tensor, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": tensor '", tensor, "': ", what));
}

// Reads a JSON array of non-negative integers, each at most `max`.
absl::StatusOr<std::vector<uint64_t>> ReadUnsignedArray(const json& value, absl::string_view field,
                                                        uint64_t max) {
  if (!value.is_array()) return absl::InvalidArgumentError(absl::StrCat(field, " is not a list"));
  std::vector<uint64_t> out;
  out.reserve(value.size());
  for (const json& v : value) {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > max) {
        return absl::InvalidArgumentError(absl::StrCat(field, " value ", u, " is too large"));
      }
      out.push_back(u);
    } else if (v.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " has a negative value ", v.get<int64_t>()));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " holds a non-integer ", v.type_name()));
    }
  }
  return out;
}

// Validates one header entry against a data buffer of `buffer_size` bytes.
absl::StatusOr<SafetensorsTensorInfo> ParseEntry(const json& entry, uint64_t buffer_size) {
  if (!entry.is_object()) return absl::InvalidArgumentError("entry is not an object");
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || shape_it == entry.end() || offsets_it == entry.end()) {
    return absl::InvalidArgumentError("entry needs dtype, shape and data_offsets");
  }
  if (!dtype_it->is_string()) return absl::InvalidArgumentError("dtype is not a string");
  const auto& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<SafetensorsDtype> dtype = DtypeFromName(dtype_name);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", dtype_name, "'"));

  SafetensorsTensorInfo info;
  info.dtype = *dtype;
  // Dimensions beyond 2^40 cannot describe a real tensor; the cap keeps products in range.
  auto dims = ReadUnsignedArray(*shape_it, "shape", uint64_t{1} << 40);
  if (!dims.ok()) return dims.status();
  uint64_t count = 1;
  for (uint64_t d : *dims) {
    info.shape.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(count, d, &count)) {
      return absl::InvalidArgumentError("shape has too many elements");
    }
  }
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(Entry(*dtype).size), &expected_bytes)) {
    return absl::InvalidArgumentError("shape has too many elements");
  }

  auto offsets = ReadUnsignedArray(*offsets_it, "data_offsets", UINT64_MAX);
  if (!offsets.ok()) return offsets.status();
  if (offsets->size() != 2) return absl::InvalidArgumentError("data_offsets needs 2 values");
  uint64_t begin = (*offsets)[0];
  uint64_t end = (*offsets)[1];
  if (begin > end || end > buffer_size) {
    return absl::InvalidArgumentError(absl::StrCat("data_offsets [", begin, ", ", end,
                                                   "] out of range of the ", buffer_size,
                                                   "-byte data buffer"));
  }
  if (end - begin != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_offsets span ", end - begin, " bytes but shape and dtype need ", expected_bytes));
  }
  info.begin = begin;
  info.nbytes = end - begin;
  return info;
}

// Every tensor owns its bytes alone: sorted by start, each must end before the next starts.
absl::Status CheckNoOverlap(const TensorMap& tensors, absl::string_view file) {
  std::vector<std::pair<const std::string*, const SafetensorsTensorInfo*>> order;
  order.reserve(tensors.size());
  for (const auto& [name, info] : tensors) order.emplace_back(&name, &info);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->nbytes) <
           std::pair(b.second->begin, b.second->nbytes);
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const SafetensorsTensorInfo& prev = *order[i - 1].second;
    if (prev.begin + prev.nbytes > order[i].second->begin) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": tensors '", *order[i - 1].first,
                                                     "' and '", *order[i].first,
                                                     "' overlap in the data buffer"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMap> ParseHeaderJson(std::string_view text, uint64_t buffer_size,
                                          absl::string_view file) {
  if (NestsTooDeeply(text)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": header JSON nests too deeply"));
  }
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": header is not valid JSON"));
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": header is not a JSON object"));
  }
  TensorMap tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing we rely on
    absl::StatusOr<SafetensorsTensorInfo> info = ParseEntry(entry, buffer_size);
    if (!info.ok()) return EntryError(file, name, info.status().message());
    tensors.emplace(name, *std::move(info));
  }
  if (absl::Status s = CheckNoOverlap(tensors, file); !s.ok()) return s;
  return tensors;
}

// The 8-byte little-endian header length at the start of the file.
uint64_t ReadHeaderLength(const std::byte* p) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<uint64_t>(p[i]);
  return n;
}

absl::Status ErrnoError(absl::string_view what, const std::filesystem::path& path) {
  return absl::InternalError(absl::StrCat(what, " ", path.string(), ": ", std::strerror(errno)));
}

}  // namespace

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return Entry(dtype).name; }

int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Entry(dtype).size; }

absl::StatusOr<TensorMap> ParseSafetensorsHeader(std::span<const std::byte> file,
                                                 std::string_view file_name_std) {
  const absl::string_view file_name(file_name_std.data(), file_name_std.size());
  if (file.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": ", file.size(), " bytes is too short for a header length"));
  }
  const uint64_t header_len = ReadHeaderLength(file.data());
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": header length ", header_len,
                                                   " exceeds the limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_len > file.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": header length ", header_len,
                                                   " runs past the end of the ", file.size(),
                                                   "-byte file"));
  }
  std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_len);
  const uint64_t buffer_size = file.size() - 8 - header_len;
  // The parse neither throws nor lets through a bad type, but an allocation failure inside
  // nlohmann (or a bug there) must still not escape as an exception.
  try {
    return ParseHeaderJson(text, buffer_size, file_name);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": bad header: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  const std::string name = path.string();
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(name, ": no such file"));
    return ErrnoError("cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = nullptr;
  if (size > 0) {  // mmap rejects length 0; an empty file fails validation below anyway
    map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      absl::Status s = ErrnoError("cannot mmap", path);
      ::close(fd);
      return s;
    }
  }
  ::close(fd);  // the mapping keeps the file alive
  const auto* bytes = static_cast<const std::byte*>(map);
  absl::StatusOr<TensorMap> tensors = ParseSafetensorsHeader({bytes, size}, name);
  if (!tensors.ok()) {
    if (map != nullptr) ::munmap(map, size);
    return tensors.status();
  }
  return std::unique_ptr<SafetensorsFile>(
      new SafetensorsFile(path, bytes, size, *std::move(tensors)));
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path, const std::byte* map, size_t map_size,
                                 TensorMap tensors)
    : path_(std::move(path)), map_(map), map_size_(map_size), tensors_(std::move(tensors)) {
  // Validation guaranteed at least 8 bytes and a header length within the file.
  data_ = map_ + 8 + ReadHeaderLength(map_);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), map_size_);
}

const SafetensorsTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::span<const std::byte> SafetensorsFile::Data(const SafetensorsTensorInfo& info) const {
  return {data_ + info.begin, static_cast<size_t>(info.nbytes)};
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) names.push_back(name);
  return names;
}

}  // namespace vllm::worker
