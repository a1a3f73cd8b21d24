#include "base/msgpack_fields.h"

#include <array>
#include <cmath>
#include <cstring>

namespace vllm::wire {

std::string_view TypeName(msgpack::type::object_type type) {
  switch (type) {
    case msgpack::type::NIL:
      return "NIL";
    case msgpack::type::BOOLEAN:
      return "BOOLEAN";
    case msgpack::type::POSITIVE_INTEGER:
      return "POSITIVE_INTEGER";
    case msgpack::type::NEGATIVE_INTEGER:
      return "NEGATIVE_INTEGER";
    case msgpack::type::FLOAT32:
      return "FLOAT32";
    case msgpack::type::FLOAT64:
      return "FLOAT64";
    case msgpack::type::STR:
      return "STR";
    case msgpack::type::BIN:
      return "BIN";
    case msgpack::type::ARRAY:
      return "ARRAY";
    case msgpack::type::MAP:
      return "MAP";
    case msgpack::type::EXT:
      return "EXT";
  }
  return "UNKNOWN";
}

namespace {
// Appends raw bytes to the packer's stream (pack_bin_body writes its argument verbatim; the
// bin header is pack_bin's job, which we do not call).
// Appends msgpack's float `marker` (0xca float32, 0xcb float64) and `value`'s IEEE-754 bits,
// big-endian. pack_bin_body writes its argument verbatim (the bin header is pack_bin's job,
// which we do not call).
template <typename Bits, typename T>
void PackIeee(Packer& pk, unsigned char marker, T value) {
  static_assert(sizeof(Bits) == sizeof(T));
  Bits bits;
  std::memcpy(&bits, &value, sizeof(bits));
  std::array<char, 1 + sizeof(T)> buf{static_cast<char>(marker)};
  for (size_t i = 0; i < sizeof(T); ++i) {
    buf[1 + i] = static_cast<char>(bits >> (8 * (sizeof(T) - 1 - i)));
  }
  pk.pack_bin_body(buf.data(), static_cast<uint32_t>(buf.size()));
}
}  // namespace

void PackFloat(Packer& pk, float value) { PackIeee<uint32_t>(pk, 0xca, value); }

void PackDouble(Packer& pk, double value) { PackIeee<uint64_t>(pk, 0xcb, value); }

absl::StatusOr<FieldReader> FieldReader::Open(const msgpack::object& object, std::string_view what,
                                              uint32_t num_fields) {
  if (object.type != msgpack::type::ARRAY) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: expected an array of %d fields, got %s",
                                                      what, num_fields, TypeName(object.type)));
  }
  if (object.via.array.size != num_fields) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected %d fields, got %d", what, num_fields, object.via.array.size));
  }
  return FieldReader(what, object.via.array);
}

std::optional<double> AsNumber(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return o.via.f64;
    case msgpack::type::POSITIVE_INTEGER:
      return static_cast<double>(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return static_cast<double>(o.via.i64);
    default:
      return std::nullopt;
  }
}

absl::Status FieldReader::Double(std::string_view field, double* out) {
  const msgpack::object& o = Next();
  const std::optional<double> value = AsNumber(o);
  if (!value.has_value()) {
    return Error(field, absl::StrFormat("expected a number, got %s", TypeName(o.type)));
  }
  *out = *value;
  return absl::OkStatus();
}

absl::Status FieldReader::Float(std::string_view field, float* out) {
  double value = 0;
  if (absl::Status s = Double(field, &value); !s.ok()) return s;
  *out = static_cast<float>(value);
  return absl::OkStatus();
}

absl::Status FieldReader::Bool(std::string_view field, bool* out) {
  const msgpack::object& o = Next();
  if (o.type != msgpack::type::BOOLEAN) {
    return Error(field, absl::StrFormat("expected a boolean, got %s", TypeName(o.type)));
  }
  *out = o.via.boolean;
  return absl::OkStatus();
}

absl::Status FieldReader::ReadString(const msgpack::object& o, std::string_view field,
                                     size_t max_bytes, std::string* out) const {
  if (o.type != msgpack::type::STR) {
    return Error(field, absl::StrFormat("expected a string, got %s", TypeName(o.type)));
  }
  if (o.via.str.size > max_bytes) {
    return Error(field, absl::StrFormat("string of %d bytes exceeds the limit of %d",
                                        o.via.str.size, max_bytes));
  }
  out->assign(o.via.str.ptr, o.via.str.size);
  return absl::OkStatus();
}

absl::Status FieldReader::OptionalString(std::string_view field, size_t max_bytes,
                                         std::optional<std::string>* out) {
  const msgpack::object& o = Next();
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  std::string value;
  if (absl::Status s = ReadString(o, field, max_bytes, &value); !s.ok()) return s;
  *out = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::span<const msgpack::object>> FieldReader::List(
    std::string_view field, const msgpack::object& object) const {
  if (object.type != msgpack::type::ARRAY) {
    return Error(field, absl::StrFormat("expected an array, got %s", TypeName(object.type)));
  }
  return std::span<const msgpack::object>(object.via.array.ptr, object.via.array.size);
}

absl::Status FieldReader::FloatList(std::string_view field, std::vector<float>* out) {
  auto list = List(field, Next());
  if (!list.ok()) return list.status();
  out->resize(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const msgpack::object& o = (*list)[i];
    switch (o.type) {
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64:
        (*out)[i] = static_cast<float>(o.via.f64);
        break;
      case msgpack::type::POSITIVE_INTEGER:
        (*out)[i] = static_cast<float>(o.via.u64);
        break;
      case msgpack::type::NEGATIVE_INTEGER:
        (*out)[i] = static_cast<float>(o.via.i64);
        break;
      default:
        return Error(field, absl::StrFormat("expected a number, got %s", TypeName(o.type)));
    }
  }
  return absl::OkStatus();
}

absl::Status FieldReader::StringList(std::string_view field, size_t max_bytes,
                                     std::vector<std::string>* out) {
  auto list = List(field, Next());
  if (!list.ok()) return list.status();
  out->resize(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    if (absl::Status s = ReadString((*list)[i], field, max_bytes, &(*out)[i]); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace vllm::wire
