// The one wire form of a VllmConfig, and how a parent hands it to a child process.
//
// Encoding: a msgpack array
//   ["VllmConfig", schema, [model fields], [cache fields], [parallel fields],
//    [scheduler fields], [device fields], [load fields], [kv_events fields]]
// where each part's array holds its fields in the order of its static `Fields` list
// (vllm_config.h, kv_events_config.h): an optional as its value or nil, every enum as its flag
// spelling ("bfloat16", "priority", ...), doubles always float64. `schema` (VllmConfigSchema)
// is a fingerprint of those lists — every part's and field's name and wire type, in order — so
// a field added to a list is on the wire, in the decoder and in DescribeVllmConfig with nothing
// to write here, and a peer built with other lists (a node running another build) is refused
// by name instead of misread. Decoding is bounded (kMaxEncodedConfigBytes, strings ≤
// kMaxPathBytes, depth 2, arrays ≤ 16), names the field at fault, and validates the result
// (VllmConfig::Validate): a frame that decodes is a config that can run.
//
// Hand-off: the parent puts the encoding in a pipe (MakeConfigPipe) whose read end the child
// inherits as descriptor kConfigFd and reads once at start-up (ReadVllmConfigFd); the child's
// command line says only `--config-fd 3`.
#ifndef VLLM_CONFIG_CONFIG_CODEC_H_
#define VLLM_CONFIG_CONFIG_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"

namespace vllm::config {

inline constexpr size_t kMaxEncodedConfigBytes = 16 * 1024;
// The descriptor number a child process finds its config on.
inline constexpr int kConfigFd = 3;

// The fingerprint of the field lists this build encodes and decodes (FNV-1a 64 of every
// "part.field:type;" in wire order).
uint64_t VllmConfigSchema();

std::string EncodeVllmConfig(const VllmConfig& config);
// InvalidArgument naming the field (or the limit) for anything malformed, and for a config
// that decodes but does not validate.
[[nodiscard]] absl::StatusOr<VllmConfig> DecodeVllmConfig(std::string_view bytes);

// A pipe that already holds EncodeVllmConfig(config), its write end closed. Returns the read
// end (close-on-exec; posix_spawn's dup2 onto kConfigFd clears that in the child). The caller
// closes it once the child is started.
[[nodiscard]] absl::StatusOr<int> MakeConfigPipe(const VllmConfig& config);

// Reads `fd` to end of file (at most kMaxEncodedConfigBytes, within `timeout`), closes it, and
// decodes. Errors name the descriptor: "--config-fd 3: ...".
[[nodiscard]] absl::StatusOr<VllmConfig> ReadVllmConfigFd(
    int fd, absl::Duration timeout = absl::Seconds(30));

}  // namespace vllm::config

#endif  // VLLM_CONFIG_CONFIG_CODEC_H_
