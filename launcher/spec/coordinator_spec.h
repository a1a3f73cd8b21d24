// What the launcher and its DP coordinator process (`vllm-launch dp-coordinator`,
// launcher/dp_coordinator_main.h) say to each other on descriptor 3, as length-prefixed frames
// (launcher/spec/frames.h) of one msgpack array each:
//
//   launcher → coordinator   ["DpCoordinatorSpec", 1, num_engines, api_servers, tcp_host,
//                             waves, cluster_key_file]
//   coordinator → launcher   ["DpCoordinatorAddresses", 1, stats, publish, waves,
//                             report_key_hex]
//
// Decoding is bounded (at most kMaxCoordinatorSpecBytes, strings of at most kMaxSpecString
// bytes, depth 1), checks types and ranges, and names the field at fault; it never trusts the
// peer. Whatever decodes re-encodes to the same bytes.
#ifndef VLLM_LAUNCHER_SPEC_COORDINATOR_SPEC_H_
#define VLLM_LAUNCHER_SPEC_COORDINATOR_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vllm::launcher {

inline constexpr size_t kMaxSpecString = 4096;
// core::kMaxDpEngines and core::kReportKeyBytes (core/dp_coordinator.h; checked equal where the
// launcher uses both), kept here so this library needs no more than config/ and ipc/.
inline constexpr int32_t kSpecMaxDpEngines = 4096;
inline constexpr size_t kSpecReportKeyBytes = 32;
inline constexpr size_t kMaxCoordinatorSpecBytes = 4 * kMaxSpecString + 256;

// How the coordinator is to run.
struct DpCoordinatorSpec {
  int32_t num_engines = 2;  // 1 .. kSpecMaxDpEngines
  int32_t api_servers = 1;  // subscribers to wait for before unlinking ipc:// files: 1 .. 1024
  std::string tcp_host;     // an IP: TCP at free ports there (several nodes); empty: ipc://
  bool waves = false;       // --data-parallel-lockstep
  std::string cluster_key_file;
  bool operator==(const DpCoordinatorSpec&) const = default;
};

// Where engines and API servers reach a running coordinator.
struct DpCoordinatorAddresses {
  // Engines' load reports: ipc:// (one node; ZMQ PUSH → PULL) or udp:// (several nodes: sealed
  // datagrams, core::SealReportDatagram with report_key).
  std::string stats;
  std::string publish;     // publications to the API servers (XPUB → SUB)
  std::string waves;       // lockstep waves to the engines (XPUB → SUB); empty: no lockstep
  std::string report_key;  // udp:// stats: kSpecReportKeyBytes bytes; else empty
  bool operator==(const DpCoordinatorAddresses&) const = default;
};

std::string EncodeDpCoordinatorSpec(const DpCoordinatorSpec& spec);
// InvalidArgument naming the field for anything off-schema or out of range.
[[nodiscard]] absl::StatusOr<DpCoordinatorSpec> DecodeDpCoordinatorSpec(std::string_view bytes);

std::string EncodeDpCoordinatorAddresses(const DpCoordinatorAddresses& addresses);
// InvalidArgument naming the field: empty stats or publish address, a report key that is not
// kSpecReportKeyBytes bytes with a udp:// stats address (or one without).
[[nodiscard]] absl::StatusOr<DpCoordinatorAddresses> DecodeDpCoordinatorAddresses(
    std::string_view bytes);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SPEC_COORDINATOR_SPEC_H_
