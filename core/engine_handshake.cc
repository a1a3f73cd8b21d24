#include "core/engine_handshake.h"

#include <msgpack.hpp>
#include <optional>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "core/dp_coordinator.h"

namespace vllm::core {
namespace {

// A handshake frame is a few hundred bytes: anything bigger, deeper or longer is refused.
constexpr wire::UnpackLimits kLimits{.max_array = kMaxFrontends,
                                     .max_map = 0,
                                     .max_str = kMaxHandshakeString,
                                     .max_bin = 0,
                                     .max_depth = 3};

std::string_view Cut(std::string_view s) { return s.substr(0, kMaxHandshakeString); }

template <typename... Fields>
std::string PackArray(const Fields&... fields) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(sizeof...(fields));
  (pk.pack(fields), ...);
  return std::string(b.data(), b.size());
}

absl::StatusOr<msgpack::object_handle> Unpack(std::string_view bytes, const char* frame) {
  auto oh =
      wire::UnpackBounded({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, kLimits);
  if (!oh.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(frame, ": ", oh.status().message()));
  }
  return oh;
}

// The `n` elements of a top-level array, or InvalidArgument.
absl::StatusOr<const msgpack::object*> Fields(const msgpack::object& o, uint32_t n,
                                              const char* frame) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != n) {
    return absl::InvalidArgumentError(absl::StrCat(frame, ": expected an array of ", n));
  }
  return o.via.array.ptr;
}

absl::StatusOr<int32_t> Int(const msgpack::object& o, const char* frame, const char* field,
                            int32_t min) {
  auto v = wire::ConvertAs<int32_t>(o, field);
  if (!v.ok() || *v < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(frame, ".", field, ": expected an integer >= ", min));
  }
  return *v;
}

absl::StatusOr<std::string> Str(const msgpack::object& o, const char* frame, const char* field,
                                size_t max_bytes) {
  if (o.type != msgpack::type::STR || o.via.str.size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(frame, ".", field, ": expected a string of at most ", max_bytes, " bytes"));
  }
  return std::string(o.via.str.ptr, o.via.str.size);
}

}  // namespace

std::string EncodeHello(const HelloMessage& m) {
  return PackArray(m.engine_index, m.data_parallel_size, std::string(m.host.substr(0, 255)));
}

std::string EncodeReady(const ReadyMessage& m) {
  return PackArray(m.engine_index, m.num_gpu_blocks, m.max_model_len);
}

std::string EncodeAddresses(const EngineAddresses& m) {
  std::vector<std::string> peers;
  for (size_t i = 0; i < m.peers.size() && i + 1 < kMaxFrontends; ++i) {
    peers.emplace_back(Cut(m.peers[i]));
  }
  return PackArray(std::string(Cut(m.input)), std::string(Cut(m.output)), peers,
                   std::string(Cut(m.coordinator_stats)), std::string(Cut(m.coordinator_waves)),
                   absl::BytesToHexString(m.coordinator_report_key.substr(0, kReportKeyBytes)));
}

std::string EncodeHandshakeMessage(std::string_view message) {
  return PackArray(std::string(Cut(message)));
}

std::string EncodeHeartbeat(int32_t engine_index) {
  msgpack::sbuffer b;
  msgpack::pack(b, engine_index);
  return std::string(b.data(), b.size());
}

absl::StatusOr<HelloMessage> DecodeHello(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "HELLO"));
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* f, Fields(oh.get(), 3, "HELLO"));
  HelloMessage m;
  VLLM_ASSIGN_OR_RETURN(m.engine_index, Int(f[0], "HELLO", "engine_index", 0));
  VLLM_ASSIGN_OR_RETURN(m.data_parallel_size, Int(f[1], "HELLO", "data_parallel_size", 1));
  VLLM_ASSIGN_OR_RETURN(m.host, Str(f[2], "HELLO", "host", 255));
  return m;
}

absl::StatusOr<ReadyMessage> DecodeReady(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "READY"));
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* f, Fields(oh.get(), 3, "READY"));
  ReadyMessage m;
  VLLM_ASSIGN_OR_RETURN(m.engine_index, Int(f[0], "READY", "engine_index", 0));
  VLLM_ASSIGN_OR_RETURN(m.num_gpu_blocks, Int(f[1], "READY", "num_gpu_blocks", 0));
  VLLM_ASSIGN_OR_RETURN(m.max_model_len, Int(f[2], "READY", "max_model_len", 2));
  return m;
}

absl::StatusOr<EngineAddresses> DecodeAddresses(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "CONFIG"));
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* f, Fields(oh.get(), 6, "CONFIG"));
  EngineAddresses m;
  VLLM_ASSIGN_OR_RETURN(m.input, Str(f[0], "CONFIG", "input_address", kMaxHandshakeString));
  VLLM_ASSIGN_OR_RETURN(m.output, Str(f[1], "CONFIG", "output_address", kMaxHandshakeString));
  if (m.input.empty() || m.output.empty()) {
    return absl::InvalidArgumentError("CONFIG: empty address");
  }
  if (f[2].type != msgpack::type::ARRAY || f[2].via.array.size >= kMaxFrontends) {
    return absl::InvalidArgumentError(
        absl::StrCat("CONFIG.peers: expected an array of at most ", kMaxFrontends - 1));
  }
  for (uint32_t i = 0; i < f[2].via.array.size; ++i) {
    VLLM_ASSIGN_OR_RETURN(std::string peer,
                          Str(f[2].via.array.ptr[i], "CONFIG", "peers", kMaxHandshakeString));
    if (peer.empty()) return absl::InvalidArgumentError("CONFIG: empty peer address");
    m.peers.push_back(std::move(peer));
  }
  VLLM_ASSIGN_OR_RETURN(m.coordinator_stats,
                        Str(f[3], "CONFIG", "coordinator_stats", kMaxHandshakeString));
  VLLM_ASSIGN_OR_RETURN(m.coordinator_waves,
                        Str(f[4], "CONFIG", "coordinator_waves", kMaxHandshakeString));
  if (m.coordinator_stats.empty() && !m.coordinator_waves.empty()) {
    return absl::InvalidArgumentError("CONFIG: a wave address without a coordinator");
  }
  VLLM_ASSIGN_OR_RETURN(const std::string key_hex,
                        Str(f[5], "CONFIG", "coordinator_report_key", 2 * kReportKeyBytes));
  const bool datagrams = absl::StartsWith(m.coordinator_stats, "udp://");
  std::optional<std::string> key = ReportKeyFromHex(key_hex);
  if (key.has_value()) m.coordinator_report_key = *std::move(key);
  if (datagrams != !key_hex.empty() || (datagrams && !key.has_value())) {
    return absl::InvalidArgumentError(
        absl::StrCat("CONFIG.coordinator_report_key: expected ", 2 * kReportKeyBytes,
                     " hex digits with a udp:// report address, and none otherwise"));
  }
  return m;
}

absl::StatusOr<std::string> DecodeHandshakeMessage(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "message"));
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* f, Fields(oh.get(), 1, "message"));
  return Str(f[0], "message", "text", kMaxHandshakeString);
}

absl::StatusOr<int32_t> DecodeHeartbeat(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "heartbeat"));
  return Int(oh.get(), "heartbeat", "engine_index", 0);
}

}  // namespace vllm::core
