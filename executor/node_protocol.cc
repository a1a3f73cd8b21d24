#include "executor/node_protocol.h"

#include <exception>
#include <iterator>
#include <limits>
#include <msgpack.hpp>
#include <span>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "config/config_codec.h"

namespace vllm::executor {
namespace {

using wire::FieldReader;
using wire::Packer;

// The kinds, in the order of NodeMessage's alternatives.
constexpr std::string_view kKinds[] = {"hello",     "config",        "reject",
                                       "heartbeat", "worker_exited", "stop"};
static_assert(std::size(kKinds) == std::variant_size_v<NodeMessage>);
// Longer than every kind; a longer first element is refused before it is copied.
constexpr size_t kMaxKindBytes = 32;
// The fields before a message's own: kind and version.
constexpr uint32_t kHeaderFields = 2;
constexpr std::string_view kFrame = "node frame";
constexpr int64_t kMaxTimeoutMs = 86'400'000;

// Every field of ours is at most two arrays deep ([kind, version, ..., [comm specs]]). Strings
// and bins may be as long as the frame (they reference the frame's bytes, nothing is copied),
// so that a string over its field's limit is refused by the field reader, naming the field.
// Arrays hold at most kMaxArray elements: the header's fields, or kMaxNodeCommSpecs plus
// room for the reader to name comm_specs when a frame has too many.
constexpr size_t kMaxArray = 2 * kMaxNodeCommSpecs;
constexpr wire::UnpackLimits kLimits{.max_array = kMaxArray,
                                     .max_map = 0,
                                     .max_str = kMaxNodeFrameBytes,
                                     .max_bin = kMaxNodeFrameBytes,
                                     .max_depth = 2};

// The free text fields (REJECT's message, WORKER_EXITED's how, STOP's reason) carry error
// messages of any length: the encoder cuts them to kMaxNodeTextBytes, at a UTF-8 character
// boundary, so that the frame still decodes.
std::string_view CutText(std::string_view text) {
  if (text.size() <= kMaxNodeTextBytes) return text;
  size_t n = kMaxNodeTextBytes;
  // Back off over continuation bytes (10xxxxxx) to the start of the cut character.
  for (int i = 0; i < 3 && n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80; ++i) {
    --n;
  }
  return text.substr(0, n);
}

// The number of fields of each message type, after kind and version (what PackFields writes).
template <typename T>
constexpr uint32_t kNumFields = 0;
template <>
constexpr uint32_t kNumFields<NodeHello> = 8;
template <>
constexpr uint32_t kNumFields<NodeConfig> = 7;
template <>
constexpr uint32_t kNumFields<NodeReject> = 2;
template <>
constexpr uint32_t kNumFields<NodeWorkerExited> = 2;
template <>
constexpr uint32_t kNumFields<NodeStop> = 1;

void PackText(Packer& pk, std::string_view text) {
  pk.pack_str(static_cast<uint32_t>(text.size()));
  pk.pack_str_body(text.data(), static_cast<uint32_t>(text.size()));
}

// Fields in struct order. NodeConfig.engine_config goes as msgpack bin: it is the msgpack
// bytes of config::EncodeVllmConfig, not text.
void PackFields(Packer& pk, const NodeHello& m) {
  pk.pack(m.node_rank);
  pk.pack(m.nnodes);
  pk.pack(m.tensor_parallel_size);
  pk.pack(m.pipeline_parallel_size);
  pk.pack(m.data_parallel_size);
  PackText(pk, m.model);
  PackText(pk, m.node_address);
  pk.pack(m.pid);
}

void PackFields(Packer& pk, const NodeConfig& m) {
  pk.pack_bin(static_cast<uint32_t>(m.engine_config.size()));
  pk.pack_bin_body(m.engine_config.data(), static_cast<uint32_t>(m.engine_config.size()));
  PackText(pk, m.broadcast_handle);
  PackText(pk, m.ready_address);
  pk.pack_array(static_cast<uint32_t>(m.comm_specs.size()));
  for (const std::string& spec : m.comm_specs) PackText(pk, spec);
  pk.pack(m.startup_timeout_ms);
  pk.pack(m.heartbeat_interval_ms);
  pk.pack(m.heartbeat_timeout_ms);
}

void PackFields(Packer& pk, const NodeReject& m) {
  PackText(pk, m.flag);
  PackText(pk, CutText(m.message));
}

void PackFields(Packer&, const NodeHeartbeat&) {}

void PackFields(Packer& pk, const NodeWorkerExited& m) {
  pk.pack(m.rank);
  PackText(pk, CutText(m.how));
}

void PackFields(Packer& pk, const NodeStop& m) { PackText(pk, CutText(m.reason)); }

absl::Status CheckRange(const FieldReader& r, std::string_view field, int64_t value, int64_t lo,
                        int64_t hi) {
  if (value < lo || value > hi) {
    return r.Error(field, absl::StrFormat("%d is outside %d..%d", value, lo, hi));
  }
  return absl::OkStatus();
}

absl::Status NonEmpty(const FieldReader& r, std::string_view field, const std::string& value) {
  if (value.empty()) return r.Error(field, "empty");
  return absl::OkStatus();
}

// A msgpack bin of at most `max_bytes`.
absl::Status ReadBin(FieldReader& r, std::string_view field, size_t max_bytes, std::string* out) {
  const msgpack::object& o = r.Next();
  if (o.type != msgpack::type::BIN) {
    return r.Error(field, absl::StrFormat("expected a bin, got %s", wire::TypeName(o.type)));
  }
  if (o.via.bin.size > max_bytes) {
    return r.Error(field, absl::StrFormat("bin of %d bytes exceeds the limit of %d", o.via.bin.size,
                                          max_bytes));
  }
  out->assign(o.via.bin.ptr, o.via.bin.size);
  return absl::OkStatus();
}

absl::Status ReadFields(FieldReader& r, NodeHello* m) {
  VLLM_RETURN_IF_ERROR(r.Int("node_rank", &m->node_rank));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "node_rank", m->node_rank, 1, 1023));
  VLLM_RETURN_IF_ERROR(r.Int("nnodes", &m->nnodes));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "nnodes", m->nnodes, 1, 1024));
  VLLM_RETURN_IF_ERROR(r.Int("tensor_parallel_size", &m->tensor_parallel_size));
  VLLM_RETURN_IF_ERROR(r.Int("pipeline_parallel_size", &m->pipeline_parallel_size));
  VLLM_RETURN_IF_ERROR(r.Int("data_parallel_size", &m->data_parallel_size));
  VLLM_RETURN_IF_ERROR(r.String("model", kMaxNodeTextBytes, &m->model));
  VLLM_RETURN_IF_ERROR(r.String("node_address", kMaxNodeAddressBytes, &m->node_address));
  VLLM_RETURN_IF_ERROR(NonEmpty(r, "node_address", m->node_address));
  VLLM_RETURN_IF_ERROR(r.Int("pid", &m->pid));
  return CheckRange(r, "pid", m->pid, 1, std::numeric_limits<int64_t>::max());
}

absl::Status ReadFields(FieldReader& r, NodeConfig* m) {
  VLLM_RETURN_IF_ERROR(
      ReadBin(r, "engine_config", config::kMaxEncodedConfigBytes, &m->engine_config));
  VLLM_RETURN_IF_ERROR(r.String("broadcast_handle", kMaxNodeTextBytes, &m->broadcast_handle));
  VLLM_RETURN_IF_ERROR(NonEmpty(r, "broadcast_handle", m->broadcast_handle));
  VLLM_RETURN_IF_ERROR(r.String("ready_address", kMaxNodeTextBytes, &m->ready_address));
  VLLM_RETURN_IF_ERROR(NonEmpty(r, "ready_address", m->ready_address));
  VLLM_ASSIGN_OR_RETURN(std::span<const msgpack::object> specs, r.List("comm_specs", r.Next()));
  if (specs.empty() || specs.size() > kMaxNodeCommSpecs) {
    return r.Error("comm_specs",
                   absl::StrFormat("%d entries, outside 1..%d", specs.size(), kMaxNodeCommSpecs));
  }
  m->comm_specs.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    VLLM_RETURN_IF_ERROR(
        r.ReadString(specs[i], "comm_specs", kMaxNodeTextBytes, &m->comm_specs[i]));
  }
  VLLM_RETURN_IF_ERROR(r.Int("startup_timeout_ms", &m->startup_timeout_ms));
  VLLM_RETURN_IF_ERROR(
      CheckRange(r, "startup_timeout_ms", m->startup_timeout_ms, 1, kMaxTimeoutMs));
  VLLM_RETURN_IF_ERROR(r.Int("heartbeat_interval_ms", &m->heartbeat_interval_ms));
  VLLM_RETURN_IF_ERROR(
      CheckRange(r, "heartbeat_interval_ms", m->heartbeat_interval_ms, 1, kMaxTimeoutMs));
  VLLM_RETURN_IF_ERROR(r.Int("heartbeat_timeout_ms", &m->heartbeat_timeout_ms));
  return CheckRange(r, "heartbeat_timeout_ms", m->heartbeat_timeout_ms, 1, kMaxTimeoutMs);
}

absl::Status ReadFields(FieldReader& r, NodeReject* m) {
  VLLM_RETURN_IF_ERROR(r.String("flag", kMaxNodeAddressBytes, &m->flag));
  return r.String("message", kMaxNodeTextBytes, &m->message);
}

absl::Status ReadFields(FieldReader&, NodeHeartbeat*) { return absl::OkStatus(); }

absl::Status ReadFields(FieldReader& r, NodeWorkerExited* m) {
  VLLM_RETURN_IF_ERROR(r.Int("rank", &m->rank));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "rank", m->rank, 0, 65535));
  return r.String("how", kMaxNodeTextBytes, &m->how);
}

absl::Status ReadFields(FieldReader& r, NodeStop* m) {
  return r.String("reason", kMaxNodeTextBytes, &m->reason);
}

// The struct names that error messages give ("NodeHello.node_rank: ...").
constexpr std::string_view kStructNames[] = {"NodeHello",     "NodeConfig",       "NodeReject",
                                             "NodeHeartbeat", "NodeWorkerExited", "NodeStop"};
static_assert(std::size(kStructNames) == std::variant_size_v<NodeMessage>);

// Decodes the message of alternative I (the frame's kind) from the whole frame array.
template <size_t I>
absl::StatusOr<NodeMessage> DecodeAs(const msgpack::object& frame) {
  using T = std::variant_alternative_t<I, NodeMessage>;
  VLLM_ASSIGN_OR_RETURN(FieldReader r,
                        FieldReader::Open(frame, kStructNames[I], kHeaderFields + kNumFields<T>));
  r.Next();  // kind
  r.Next();  // version
  T message;
  VLLM_RETURN_IF_ERROR(ReadFields(r, &message));
  return NodeMessage(std::in_place_index<I>, std::move(message));
}

template <size_t... I>
absl::StatusOr<NodeMessage> DecodeKind(size_t kind, const msgpack::object& frame,
                                       std::index_sequence<I...>) {
  using Decoder = absl::StatusOr<NodeMessage> (*)(const msgpack::object&);
  constexpr Decoder kDecoders[] = {&DecodeAs<I>...};
  return kDecoders[kind](frame);
}

absl::StatusOr<NodeMessage> DecodeObject(const msgpack::object& frame) {
  if (frame.type != msgpack::type::ARRAY || frame.via.array.size < kHeaderFields) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected an array [kind, version, fields...], got %s", kFrame,
        frame.type == msgpack::type::ARRAY ? absl::StrFormat("%d elements", frame.via.array.size)
                                           : std::string(wire::TypeName(frame.type))));
  }
  // A reader over the whole array, for kind and version only (the kind's reader checks the
  // number of fields).
  VLLM_ASSIGN_OR_RETURN(FieldReader header, FieldReader::Open(frame, kFrame, frame.via.array.size));
  std::string kind;
  VLLM_RETURN_IF_ERROR(header.String("kind", kMaxKindBytes, &kind));
  uint32_t version = 0;
  VLLM_RETURN_IF_ERROR(header.Int("version", &version));
  // Before the kind: a newer build may have kinds this one does not know.
  if (version != kNodeProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node protocol version %d, this vllm-launch speaks %d: run the same build on every node",
        version, kNodeProtocolVersion));
  }
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (kind == kKinds[i]) {
      return DecodeKind(i, frame, std::make_index_sequence<std::size(kKinds)>());
    }
  }
  return header.Error("kind", absl::StrFormat("unknown kind \"%s\"", absl::CHexEscape(kind)));
}

}  // namespace

std::string EncodeNodeMessage(const NodeMessage& message) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        pk.pack_array(kHeaderFields + kNumFields<T>);
        PackText(pk, NodeMessageKind(message));
        pk.pack(kNodeProtocolVersion);
        PackFields(pk, m);
      },
      message);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<NodeMessage> DecodeNodeMessage(std::string_view bytes) {
  if (bytes.size() > kMaxNodeFrameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d bytes exceeds the limit of %d",
                                                      kFrame, bytes.size(), kMaxNodeFrameBytes));
  }
  try {
    auto handle = wire::UnpackBounded(
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
        kLimits);
    if (!handle.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s", kFrame, handle.status().message()));
    }
    return DecodeObject(handle->get());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: malformed (%s)", kFrame, e.what()));
  }
}

std::string_view NodeMessageKind(const NodeMessage& message) { return kKinds[message.index()]; }

}  // namespace vllm::executor
