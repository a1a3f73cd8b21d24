// The fields of each part of a VllmConfig, listed once: VisitFields(part, visitor) calls
// `visitor(name, member, bounds)` for every field in declaration order (the wire order of
// config_codec.h), and VisitParts(config, visitor) calls `visitor(name, part)` for every part.
// The codec's encoder and decoder and DescribeVllmConfig are visitors over these lists, so a
// new setting is one line here and nothing else in the codec.
//
// Internal to config/ (the codec and DescribeVllmConfig); the other folders use those.
#ifndef VLLM_CONFIG_CONFIG_FIELDS_H_
#define VLLM_CONFIG_CONFIG_FIELDS_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "config/vllm_config.h"

namespace vllm::config {

// Longest enum spelling and host name accepted on the wire.
inline constexpr size_t kMaxNameBytes = 255;

// What a field may hold on the wire, beyond its type: the decoder refuses anything else,
// naming the field (VllmConfig::Validate checks the values a user can get wrong; these bound
// what a peer may send).
struct FieldBounds {
  int64_t min = std::numeric_limits<int64_t>::min();  // integers
  int64_t max = std::numeric_limits<int64_t>::max();
  size_t max_bytes = kMaxNameBytes;                // strings and paths
  std::span<const std::string_view> choices = {};  // strings: one of these (empty: any)

  static constexpr FieldBounds Range(int64_t lo, int64_t hi) { return {lo, hi}; }
  static constexpr FieldBounds Bytes(size_t n) { return {.max_bytes = n}; }
  static constexpr FieldBounds OneOf(std::span<const std::string_view> c) { return {.choices = c}; }
};

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

template <PartOf<ModelConfig> M, class V>
void VisitFields(M& m, V& v) {
  v("model", m.model, FieldBounds::Bytes(kMaxPathBytes));
  v("max_model_len", m.max_model_len);
  v("dtype", m.dtype);
  v("seed", m.seed);
  v("enforce_eager", m.enforce_eager);
}

template <PartOf<CacheConfig> C, class V>
void VisitFields(C& c, V& v) {
  v("block_size", c.block_size);
  v("enable_prefix_caching", c.enable_prefix_caching);
  v("kv_cache_memory_bytes", c.kv_cache_memory_bytes);
  v("gpu_memory_utilization", c.gpu_memory_utilization);
  v("num_gpu_blocks_override", c.num_gpu_blocks_override);
}

template <PartOf<ParallelConfig> P, class V>
void VisitFields(P& p, V& v) {
  v("tensor_parallel_size", p.tensor_parallel_size);
  v("pipeline_parallel_size", p.pipeline_parallel_size);
  v("data_parallel_size", p.data_parallel_size);
  v("data_parallel_size_local", p.data_parallel_size_local);
  v("data_parallel_start_rank", p.data_parallel_start_rank);
  v("data_parallel_rank", p.data_parallel_rank);
  v("data_parallel_address", p.data_parallel_address);
  v("data_parallel_rpc_port", p.data_parallel_rpc_port);
  v("distributed_executor_backend", p.distributed_executor_backend);
  v("comm_backend", p.comm_backend);
}

template <PartOf<SchedulerConfig> S, class V>
void VisitFields(S& s, V& v) {
  v("max_num_seqs", s.max_num_seqs);
  v("max_num_batched_tokens", s.max_num_batched_tokens);
  v("enable_chunked_prefill", s.enable_chunked_prefill);
  v("long_prefill_token_threshold", s.long_prefill_token_threshold);
  v("scheduling_policy", s.policy);
}

template <PartOf<DeviceConfig> D, class V>
void VisitFields(D& d, V& v) {
  v("device", d.device);
}

template <PartOf<LoadConfig> L, class V>
void VisitFields(L& l, V& v) {
  v("load_format", l.load_format);
}

inline constexpr std::string_view kKvEventsPublishers[] = {"null", "zmq"};

template <PartOf<KvEventsConfig> K, class V>
void VisitFields(K& k, V& v) {
  v("enable_kv_cache_events", k.enable);
  v("publisher", k.publisher, FieldBounds::OneOf(kKvEventsPublishers));
  v("endpoint", k.endpoint, FieldBounds::Bytes(kMaxKvEventsEndpointBytes));
  v("replay_endpoint", k.replay_endpoint, FieldBounds::Bytes(kMaxKvEventsEndpointBytes));
  v("buffer_steps", k.buffer_steps, FieldBounds::Range(0, kMaxKvEventsBufferSteps));
  v("hwm", k.hwm, FieldBounds::Range(0, std::numeric_limits<int32_t>::max()));
  v("max_queue_size", k.max_queue_size, FieldBounds::Range(1, kMaxKvEventsQueueSize));
  v("topic", k.topic, FieldBounds::Bytes(kMaxKvEventsTopicBytes));
}

// The parts of a VllmConfig in wire order.
template <PartOf<VllmConfig> C, class V>
void VisitParts(C& c, V& v) {
  v("model", c.model);
  v("cache", c.cache);
  v("parallel", c.parallel);
  v("scheduler", c.scheduler);
  v("device", c.device);
  v("load", c.load);
  v("kv_events", c.kv_events);
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
