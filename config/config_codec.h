// The one wire form of a VllmConfig, and how a parent hands it to a child process.
//
// Encoding: a msgpack array
//   ["VllmConfig", version,
//    model:     [model, max_model_len, dtype, seed, enforce_eager],
//    cache:     [block_size, enable_prefix_caching, kv_cache_memory_bytes,
//                gpu_memory_utilization, num_gpu_blocks_override | nil],
//    parallel:  [tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
//                data_parallel_size_local, data_parallel_start_rank, data_parallel_rank,
//                data_parallel_address, data_parallel_rpc_port,
//                distributed_executor_backend, comm_backend],
//    scheduler: [max_num_seqs, max_num_batched_tokens, enable_chunked_prefill,
//                long_prefill_token_threshold, scheduling_policy],
//    device:    [device],
//    load:      [load_format],
//    kv_events: [enable_kv_cache_events, publisher, endpoint, replay_endpoint | nil,
//                buffer_steps, hwm, max_queue_size, topic]]   (version 2)
// (each part's array is its VisitFields list in config_fields.h: a field added there is on the
// wire, in the decoder and in DescribeVllmConfig with nothing else to write; bump the version)
// with every enum as its flag spelling ("bfloat16", "priority", ...) and gpu_memory_utilization
// always a float64. Decoding is bounded (kMaxEncodedConfigBytes, strings ≤ kMaxPathBytes, depth
// 2, arrays ≤ 16), names the field at fault, and validates the result (VllmConfig::Validate):
// a frame that decodes is a config that can run.
//
// Hand-off: the parent puts the encoding in a pipe (MakeConfigPipe) whose read end the child
// inherits as descriptor kConfigFd and reads once at start-up (ReadVllmConfigFd); the child's
// command line says only `--config-fd 3`.
#ifndef VLLM_CONFIG_CONFIG_CODEC_H_
#define VLLM_CONFIG_CONFIG_CODEC_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"

namespace vllm::config {

inline constexpr uint8_t kVllmConfigVersion = 2;
inline constexpr size_t kMaxEncodedConfigBytes = 16 * 1024;
// The descriptor number a child process finds its config on.
inline constexpr int kConfigFd = 3;

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
