// Walking the field lists of a VllmConfig (each part's static `Fields`, VllmConfig::Parts):
// VisitFields(part, visitor) calls `visitor(name, member, bounds)` for every field in wire
// order, and VisitParts(config, visitor) calls `visitor(name, part)` for every part. The
// codec's encoder and decoder, Validate()'s bounds check and DescribeVllmConfig are visitors
// over these lists, so a new setting is its line in its part's `Fields` and nothing here.
//
// Internal to config/ (the codec, Validate and DescribeVllmConfig); the other folders use those.
#ifndef VLLM_CONFIG_CONFIG_FIELDS_H_
#define VLLM_CONFIG_CONFIG_FIELDS_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "config/vllm_config.h"

namespace vllm::config {

// The flag spelling of each enum (EnumName) and its parser (ParseEnum), by overload.
inline std::string_view EnumName(LoadFormat e) { return LoadFormatName(e); }
inline std::string_view EnumName(Device e) { return DeviceName(e); }
inline std::string_view EnumName(ModelDType e) { return ModelDTypeName(e); }
inline std::string_view EnumName(SchedulingPolicy e) { return SchedulingPolicyName(e); }
inline std::string_view EnumName(ExecutorBackend e) { return ExecutorBackendName(e); }
inline std::string_view EnumName(CommBackend e) { return CommBackendName(e); }
inline absl::StatusOr<LoadFormat> ParseEnum(std::string_view s, LoadFormat*) {
  return ParseLoadFormat(s);
}
inline absl::StatusOr<Device> ParseEnum(std::string_view s, Device*) { return ParseDevice(s); }
inline absl::StatusOr<ModelDType> ParseEnum(std::string_view s, ModelDType*) {
  return ParseModelDType(s);
}
inline absl::StatusOr<SchedulingPolicy> ParseEnum(std::string_view s, SchedulingPolicy*) {
  return ParseSchedulingPolicy(s);
}
inline absl::StatusOr<ExecutorBackend> ParseEnum(std::string_view s, ExecutorBackend*) {
  return ParseExecutorBackend(s);
}
inline absl::StatusOr<CommBackend> ParseEnum(std::string_view s, CommBackend*) {
  return ParseCommBackend(s);
}

// `Self` is `Part` or `const Part`: one list serves the encoder (const) and the decoder.
template <class Self, class Part>
concept PartOf = std::same_as<std::remove_const_t<Self>, Part>;

// Calls `visitor(name, member, bounds)` for every field of `part` in wire order (the part's
// static `Fields` list).
template <class Part, class V>
void VisitFields(Part& part, V& v) {
  std::remove_const_t<Part>::Fields(part, v);
}

// Calls `visitor(name, part)` for every part of a VllmConfig in wire order.
template <PartOf<VllmConfig> C, class V>
void VisitParts(C& c, V& v) {
  VllmConfig::Parts(c, v);
}

// Calls `visitor(part, field, member, bounds)` for every field of every part, in wire order.
template <PartOf<VllmConfig> C, class V>
void VisitAllFields(C& c, V& v) {
  auto each_part = [&v](std::string_view part, auto& members) {
    auto each_field = [&v, part](std::string_view field, auto& value, FieldBounds bounds = {}) {
      v(part, field, value, bounds);
    };
    VisitFields(members, each_field);
  };
  VisitParts(c, each_part);
}

// Counts the fields (or parts) it visits.
struct FieldCounter {
  uint32_t n = 0;
  template <class T>
  void operator()(std::string_view, const T&, FieldBounds = {}) {
    ++n;
  }
};

// The number of fields of `Part` (the length of its wire array).
template <class Part>
uint32_t NumFields() {
  FieldCounter counter;
  const Part part{};
  VisitFields(part, counter);
  return counter.n;
}

// The number of parts of a VllmConfig.
inline uint32_t NumParts() {
  FieldCounter counter;
  const VllmConfig config{};
  VisitParts(config, counter);
  return counter.n;
}

}  // namespace vllm::config

#endif  // VLLM_CONFIG_CONFIG_FIELDS_H_
