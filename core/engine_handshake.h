// The frames of the start-up handshake between an engine core and the frontend (the
// "handshake" socket of core/engine_core_proc.h) and the engine's heartbeat, each a small
// msgpack value with a fixed schema. Every decoder is bounded (wire::UnpackBounded) and checks
// types and ranges; it never trusts the peer.
//
//   HELLO   [engine_index, data_parallel_size, host]      engine → frontend
//   CONFIG  [input_address, output_address, [handshake_address...], coordinator_stats,
//            coordinator_waves, coordinator_report_key]  frontend → engine (the list: the
//                                                          other API servers' handshake
//                                                          sockets, which the engine joins too;
//                                                          sent by API server 0 only; then the
//                                                          DP coordinator's report address and,
//                                                          in lockstep mode, its wave address:
//                                                          "" when there is none; the report
//                                                          datagrams' key in hex, "" unless the
//                                                          report address is udp://)
//   REJECT  [message]                                     frontend → engine
//   READY   [engine_index, num_gpu_blocks, max_model_len] engine → frontend
//   FAILED  [message]                                     engine → frontend
//   'H'     engine_index                                  engine → frontend (output socket)
#ifndef VLLM_CORE_ENGINE_HANDSHAKE_H_
#define VLLM_CORE_ENGINE_HANDSHAKE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::core {

// Host names and addresses are at most this long; messages are cut to it when encoded.
inline constexpr size_t kMaxHandshakeString = 1024;

struct HelloMessage {
  int32_t engine_index = 0;        // >= 0
  int32_t data_parallel_size = 1;  // >= 1
  std::string host;                // the engine's host name, <= 255 bytes
  bool operator==(const HelloMessage&) const = default;
};

struct ReadyMessage {
  int32_t engine_index = 0;    // >= 0
  int32_t num_gpu_blocks = 0;  // >= 0
  int32_t max_model_len = 0;   // >= 2
  bool operator==(const ReadyMessage&) const = default;
};

// At most this many API servers (--api-server-count) per head.
inline constexpr size_t kMaxFrontends = 64;

struct EngineAddresses {
  std::string input;  // ipc:// or tcp://, <= kMaxHandshakeString bytes
  std::string output;
  std::vector<std::string> peers;  // <= kMaxFrontends - 1 handshake addresses
  // The DP coordinator (core/dp_coordinator.h): where the engine pushes its load reports, and
  // (lockstep mode) where it subscribes to the request waves. Empty: no coordinator / no
  // lockstep. A wave address needs a report address.
  std::string coordinator_stats;
  std::string coordinator_waves;
  // udp:// coordinator_stats: the key that seals each report (kReportKeyBytes = 32 raw bytes,
  // core/dp_coordinator.h); otherwise empty.
  std::string coordinator_report_key;
  bool operator==(const EngineAddresses&) const = default;
};

std::string EncodeHello(const HelloMessage& m);
std::string EncodeReady(const ReadyMessage& m);
std::string EncodeAddresses(const EngineAddresses& m);
// REJECT and FAILED: one message (cut to kMaxHandshakeString bytes).
std::string EncodeHandshakeMessage(std::string_view message);
std::string EncodeHeartbeat(int32_t engine_index);

// Each returns InvalidArgument naming the frame and the field for anything off-schema.
[[nodiscard]] absl::StatusOr<HelloMessage> DecodeHello(std::string_view bytes);
[[nodiscard]] absl::StatusOr<ReadyMessage> DecodeReady(std::string_view bytes);
[[nodiscard]] absl::StatusOr<EngineAddresses> DecodeAddresses(std::string_view bytes);
[[nodiscard]] absl::StatusOr<std::string> DecodeHandshakeMessage(std::string_view bytes);
[[nodiscard]] absl::StatusOr<int32_t> DecodeHeartbeat(std::string_view bytes);

}  // namespace vllm::core

#endif  // VLLM_CORE_ENGINE_HANDSHAKE_H_
