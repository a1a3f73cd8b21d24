#include "config/config_codec.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "config/config_fields.h"

namespace vllm::config {
namespace {

using wire::FieldReader;
using wire::Packer;

constexpr std::string_view kTag = "VllmConfig";

void PackString(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// The wire form of one field's value: enums as their flag spelling, doubles always float64,
// an empty optional as nil.
template <class T>
void Pack(Packer& pk, const T& value) {
  if constexpr (std::is_enum_v<T>) {
    PackString(pk, EnumName(value));
  } else if constexpr (std::is_same_v<T, double>) {
    wire::PackDouble(pk, value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    PackString(pk, value);
  } else if constexpr (std::is_same_v<T, std::filesystem::path>) {
    PackString(pk, value.native());
  } else {
    pk.pack(value);  // bool and integers
  }
}
template <class T>
void Pack(Packer& pk, const std::optional<T>& value) {
  if (value.has_value()) {
    Pack(pk, *value);
  } else {
    pk.pack_nil();
  }
}

// Packs one part as an array of its fields (VisitFields order).
struct PartEncoder {
  Packer& pk;
  template <class T>
  void operator()(std::string_view, const T& value, FieldBounds = {}) {
    Pack(pk, value);
  }
};
struct ConfigEncoder {
  Packer& pk;
  template <class Part>
  void operator()(std::string_view, const Part& part) {
    pk.pack_array(NumFields<Part>());
    PartEncoder fields{pk};
    VisitFields(part, fields);
  }
};

// The wire type of a field, for the schema fingerprint.
template <class T>
std::string WireType(const T*) {
  if constexpr (std::is_enum_v<T>) {
    return "enum";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_same_v<T, double>) {
    return "f64";
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::filesystem::path>) {
    return "str";
  } else {
    static_assert(std::is_integral_v<T>);
    return std::is_signed_v<T> ? "int" : "uint";
  }
}
template <class T>
std::string WireType(const std::optional<T>*) {
  return WireType(static_cast<const T*>(nullptr)) + "?";
}

// FNV-1a over "part.field:type;" for every field in wire order.
struct Fingerprinter {
  uint64_t hash = 14695981039346656037ull;
  void Add(std::string_view text) {
    for (const char c : text) {
      hash ^= static_cast<uint8_t>(c);
      hash *= 1099511628211ull;
    }
  }
  template <class T>
  void operator()(std::string_view part, std::string_view field, const T& value, FieldBounds) {
    Add(std::string(part) + "." + std::string(field) + ":" + WireType(&value) + ";");
  }
};

// Reads one field of type T from `r` (the next element): its type only. The values each field
// may hold are its bounds in its part's `Fields` list, which VllmConfig::Validate() checks once
// the whole config is read (DecodeVllmConfig); strings are bounded here by the frame's limit.
template <class T>
absl::Status Read(FieldReader& r, std::string_view field, T* out) {
  if constexpr (std::is_enum_v<T>) {
    std::string name;
    VLLM_RETURN_IF_ERROR(r.String(field, kMaxNameBytes, &name));
    absl::StatusOr<T> value = ParseEnum(name, out);
    if (!value.ok()) return r.Error(field, std::string(value.status().message()));
    *out = *value;
    return absl::OkStatus();
  } else if constexpr (std::is_same_v<T, bool>) {
    return r.Bool(field, out);
  } else if constexpr (std::is_same_v<T, double>) {
    return r.Double(field, out);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return r.String(field, kMaxPathBytes, out);
  } else if constexpr (std::is_same_v<T, std::filesystem::path>) {
    std::string path;
    VLLM_RETURN_IF_ERROR(r.String(field, kMaxPathBytes, &path));
    *out = path;
    return absl::OkStatus();
  } else {
    static_assert(std::is_integral_v<T>);
    return r.Int(field, out);
  }
}
absl::Status Read(FieldReader& r, std::string_view field, std::optional<std::string>* out) {
  return r.OptionalString(field, kMaxPathBytes, out);
}
template <class T>
absl::Status Read(FieldReader& r, std::string_view field, std::optional<T>* out) {
  static_assert(std::is_integral_v<T>);
  return r.OptionalInt(field, out);
}

// Reads one part from its array, stopping at the first error.
struct PartDecoder {
  FieldReader& r;
  absl::Status status;
  template <class T>
  void operator()(std::string_view field, T& value, FieldBounds = {}) {
    if (status.ok()) status = Read(r, field, &value);
  }
};
struct ConfigDecoder {
  FieldReader& envelope;
  absl::Status status;
  template <class Part>
  void operator()(std::string_view name, Part& part) {
    if (!status.ok()) return;
    const std::string what = absl::StrFormat("VllmConfig.%s", name);  // outlives the reader
    absl::StatusOr<FieldReader> r = FieldReader::Open(envelope.Next(), what, NumFields<Part>());
    if (!r.ok()) {
      status = r.status();
      return;
    }
    PartDecoder fields{*r, absl::OkStatus()};
    VisitFields(part, fields);
    status = fields.status;
  }
};

}  // namespace

uint64_t VllmConfigSchema() {
  static const uint64_t kSchema = [] {
    Fingerprinter fingerprint;
    const VllmConfig config{};
    VisitAllFields(config, fingerprint);
    return fingerprint.hash;
  }();
  return kSchema;
}

std::string EncodeVllmConfig(const VllmConfig& c) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(2 + NumParts());  // tag, schema fingerprint, then one array per part
  PackString(pk, kTag);
  pk.pack(VllmConfigSchema());
  ConfigEncoder parts{pk};
  VisitParts(c, parts);
  return std::string(buf.data(), buf.size());
}

absl::StatusOr<VllmConfig> DecodeVllmConfig(std::string_view bytes) {
  if (bytes.size() > kMaxEncodedConfigBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "VllmConfig: %d bytes exceeds the limit of %d", bytes.size(), kMaxEncodedConfigBytes));
  }
  wire::UnpackLimits limits;
  limits.max_array = 16;
  limits.max_map = 0;
  limits.max_str = kMaxPathBytes;
  limits.max_bin = 0;
  limits.max_depth = 2;
  absl::StatusOr<msgpack::object_handle> handle = wire::UnpackBounded(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      limits);
  if (!handle.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("VllmConfig: ", handle.status().message()));
  }
  VLLM_ASSIGN_OR_RETURN(FieldReader r,
                        FieldReader::Open(handle->get(), "VllmConfig", 2 + NumParts()));
  std::string tag;
  VLLM_RETURN_IF_ERROR(r.String("tag", kMaxNameBytes, &tag));
  if (tag != kTag) return r.Error("tag", absl::StrCat("expected 'VllmConfig', got '", tag, "'"));
  uint64_t schema = 0;
  VLLM_RETURN_IF_ERROR(r.Int("schema", &schema));
  if (schema != VllmConfigSchema()) {
    return r.Error("schema", absl::StrFormat("%016x, this build reads %016x (the two builds list "
                                             "different config fields)",
                                             schema, VllmConfigSchema()));
  }
  VllmConfig c;
  ConfigDecoder parts{r, absl::OkStatus()};
  VisitParts(c, parts);
  VLLM_RETURN_IF_ERROR(parts.status);
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("VllmConfig: ", s.message()));
  }
  return c;
}

absl::StatusOr<int> MakeConfigPipe(const VllmConfig& config) {
  const std::string bytes = EncodeVllmConfig(config);
  if (bytes.size() > kMaxEncodedConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the engine config encodes to %d bytes, over the limit of %d", bytes.size(),
                        kMaxEncodedConfigBytes));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  // The whole config must fit the pipe now: nobody reads it until the child runs. A pipe
  // holds 64 KiB by default; ask for that much in case a pipe quota left it at one page.
  (void)fcntl(fds[1], F_SETPIPE_SZ, 64 * 1024);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fds[1], bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EAGAIN;
      close(fds[0]);
      close(fds[1]);
      return absl::InternalError(
          absl::StrCat("cannot write the engine config to a pipe: ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  close(fds[1]);
  return fds[0];
}

absl::StatusOr<VllmConfig> ReadVllmConfigFd(int fd, absl::Duration timeout) {
  const std::string what = absl::StrCat("--config-fd ", fd);
  std::string bytes;
  char buf[4096];
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status status;
  // Never block past the deadline, whatever the parent made the descriptor.
  if (const int flags = fcntl(fd, F_GETFL); flags >= 0)
    (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      bytes.append(buf, static_cast<size_t>(n));
      if (bytes.size() > kMaxEncodedConfigBytes) {
        status = absl::InvalidArgumentError(absl::StrFormat(
            "%s: more than %d bytes (not an engine config)", what, kMaxEncodedConfigBytes));
        break;
      }
      continue;
    }
    if (n == 0) break;  // end of file: the whole config
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      status = absl::InvalidArgumentError(absl::StrCat(what, ": ", strerror(errno)));
      break;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      status = absl::DeadlineExceededError(absl::StrCat(
          what, ": the engine config did not arrive within ", absl::FormatDuration(timeout)));
      break;
    }
    pollfd p = {fd, POLLIN, 0};
    (void)poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
  }
  close(fd);
  VLLM_RETURN_IF_ERROR(status);
  absl::StatusOr<VllmConfig> config = DecodeVllmConfig(bytes);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(what, ": ", config.status().message()));
  }
  return config;
}

}  // namespace vllm::config
