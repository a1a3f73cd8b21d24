// Typed, bounds-checked access to the fields of an unpacked msgpack array, and float packing
// that never changes the wire type with the value: the building blocks of every codec of ours
// (core/codec.cc, worker/worker_protocol.cc, config/config_codec.cc). Knows no LLM types.
//
// Every reader returns InvalidArgument naming the struct and field ("SamplingParams.top_k:
// expected an integer, got STR") instead of throwing, so malformed frames from another
// process become a Status.
#ifndef VLLM_BASE_MSGPACK_FIELDS_H_
#define VLLM_BASE_MSGPACK_FIELDS_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "msgpack.hpp"

namespace vllm::wire {

using Packer = msgpack::packer<msgpack::sbuffer>;

// Name of a msgpack type for error messages.
std::string_view TypeName(msgpack::type::object_type type);

// A float or an integer as a double (decoders accept either, so a peer may pack an integral
// value as an integer); nullopt for any other type.
std::optional<double> AsNumber(const msgpack::object& o);

// Always msgpack float32 / float64, whatever the value. msgpack-c's pack_float/pack_double
// write an integral value (a logprob of exactly 0.0, a temperature of 1.0) as an integer,
// which changes the wire type with the value and, at 2^64, converts out of range (UB).
void PackFloat(Packer& pk, float value);
void PackDouble(Packer& pk, double value);

template <typename T>
void PackOptional(Packer& pk, const std::optional<T>& value) {
  if (value.has_value()) {
    pk.pack(*value);
  } else {
    pk.pack_nil();
  }
}

template <typename T>
void PackList(Packer& pk, std::span<const T> values) {
  pk.pack_array(static_cast<uint32_t>(values.size()));
  for (const T& v : values) pk.pack(v);
}

// Reads the fields of one msgpack array in order. The struct name and field names only
// feed error messages. Not thread-safe; borrows the object (which must outlive it).
class FieldReader {
 public:
  // Succeeds when `object` is an array of exactly `num_fields` elements.
  static absl::StatusOr<FieldReader> Open(const msgpack::object& object, std::string_view what,
                                          uint32_t num_fields);

  // The next field as a raw object (for nested structs and lists).
  const msgpack::object& Next() { return array_.ptr[index_++]; }

  template <typename T>
  absl::Status Int(std::string_view field, T* out) {
    return ReadInt(Next(), field, out);
  }
  template <typename T>
  absl::Status OptionalInt(std::string_view field, std::optional<T>* out) {
    const msgpack::object& o = Next();
    if (o.type == msgpack::type::NIL) {
      out->reset();
      return absl::OkStatus();
    }
    T value;
    if (absl::Status s = ReadInt(o, field, &value); !s.ok()) return s;
    *out = value;
    return absl::OkStatus();
  }
  absl::Status Double(std::string_view field, double* out);
  absl::Status Float(std::string_view field, float* out);
  absl::Status Bool(std::string_view field, bool* out);
  absl::Status String(std::string_view field, size_t max_bytes, std::string* out) {
    return ReadString(Next(), field, max_bytes, out);
  }
  absl::Status OptionalString(std::string_view field, size_t max_bytes,
                              std::optional<std::string>* out);
  // `Container` is a std::vector or absl::InlinedVector of integers.
  template <typename Container>
  absl::Status IntList(std::string_view field, Container* out) {
    return ReadIntList(Next(), field, out);
  }
  // Floats accept msgpack integers too (peers that write integral floats as integers).
  absl::Status FloatList(std::string_view field, std::vector<float>* out);
  absl::Status StringList(std::string_view field, size_t max_bytes, std::vector<std::string>* out);

  // Checks that `object` is an array and returns its elements.
  absl::StatusOr<std::span<const msgpack::object>> List(std::string_view field,
                                                        const msgpack::object& object) const;

  absl::Status Error(std::string_view field, std::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrFormat("%s.%s: %s", what_, field, problem));
  }

  template <typename T>
  absl::Status ReadInt(const msgpack::object& o, std::string_view field, T* out) const {
    static_assert(std::is_integral_v<T>);
    if (o.type == msgpack::type::POSITIVE_INTEGER) {
      if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        return Error(field, absl::StrFormat("integer %d out of range", o.via.u64));
      }
      *out = static_cast<T>(o.via.u64);
      return absl::OkStatus();
    }
    if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      if constexpr (std::is_signed_v<T>) {
        if (o.via.i64 >= static_cast<int64_t>(std::numeric_limits<T>::min())) {
          *out = static_cast<T>(o.via.i64);
          return absl::OkStatus();
        }
      }
      return Error(field, absl::StrFormat("integer %d out of range", o.via.i64));
    }
    return Error(field, absl::StrFormat("expected an integer, got %s", TypeName(o.type)));
  }
  template <typename Container>
  absl::Status ReadIntList(const msgpack::object& o, std::string_view field, Container* out) const {
    auto list = List(field, o);
    if (!list.ok()) return list.status();
    out->resize(list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      if (absl::Status s = ReadInt((*list)[i], field, &(*out)[i]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status ReadString(const msgpack::object& o, std::string_view field, size_t max_bytes,
                          std::string* out) const;

 private:
  FieldReader(std::string_view what, const msgpack::object_array& array)
      : what_(what), array_(array) {}

  std::string_view what_;
  msgpack::object_array array_;
  uint32_t index_ = 0;
};

}  // namespace vllm::wire

#endif  // VLLM_BASE_MSGPACK_FIELDS_H_
