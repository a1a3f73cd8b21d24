// The wire protocol between an executor and its worker processes (vLLM's
// MultiprocExecutor ↔ WorkerProc rpc_broadcast_mq / worker_response_mq).
//
// Calls travel on the broadcast MessageQueue (every worker reads every call); replies on one
// response MessageQueue per worker. Each message is
//
//   bytes 0..3   header length H, little-endian uint32 (H <= kMaxHeaderBytes)
//   bytes 4..4+H msgpack header
//                 call:  [version: u8, call_id: u64, method: str, reply_rank: i32]
//                        reply_rank -1: every rank replies; r >= 0: only rank r replies
//                        (errors are always replied)
//                 reply: [version: u8, call_id: u64, rank: i32, code: i32, message: str]
//                        code is an absl::StatusCode; message empty when OK
//   bytes 4+H..  payload: raw bytes, the method's argument or result (see the methods below)
//
// so that a SchedulerOutput's bytes are gathered into the ring without a copy into a msgpack
// bin. Decoding is bounded (wire::UnpackBounded) and never throws.
//
// Methods (constant: payload → reply payload; every payload has one Encode/Decode below, or
// core/codec.h's for the step):
//   kExecuteModelMethod         core::Encode(SchedulerOutput) → core::Encode(ModelRunnerOutput)
//   kGetKVCacheSpecMethod       empty → EncodeKVCacheSpec: msgpack [num_layers, num_kv_heads,
//                               head_dim, dtype_bytes, draft_bytes_per_token]
//   kDetermineAvailableMemoryMethod  empty → EncodeAvailableMemory: msgpack int64 (bytes)
//   kInitializeKVCacheMethod    EncodeInitializeKVCacheArgs: msgpack [num_blocks, block_size]
//                               → empty
//   kExecuteDummyBatchMethod    empty → empty (Worker::ExecuteDummyBatch; rank 0 replies)
//   kEchoMethod                 any → the same bytes (tests, round-trip benchmarks)
//   kShutdownMethod             empty → empty; the worker exits after replying
//   kInitDeviceMethod           the ncclUniqueId's raw bytes (kernels::cuda::kNcclUniqueIdBytes,
//                               checked by NcclCommunicator::Create) → no reply on the response
//                               queue. Sent once, as the first call, when the device is cuda and
//                               TP > 1: each worker reads it during start-up (before loading the
//                               model), forms the NCCL group and reports the outcome in its
//                               ReadyMessage.
//   kInitPipelineMethod         EncodeStageHandles: msgpack [str ...], per rank the handle of
//                               its queue to the next pipeline stage (empty for the last
//                               stage's ranks) → empty. Sent once after every worker is ready
//                               when pipeline_parallel_size > 1: rank r of a stage after the
//                               first attaches to the queue of rank r − tensor_parallel_size,
//                               then both ends wait until connected.
//   kSleepMethod                EncodeSleepLevel: msgpack [level] (1 or 2) → empty. Sleep mode
//                               (Worker::Sleep): level 1 frees the KV cache, level 2 the
//                               weights too.
//   kWakeUpMethod               EncodeWakeUpArgs: msgpack [weights: bool, kv_cache: bool] →
//                               empty (Worker::WakeUp: re-creates what the flags name).
// "Empty" payloads are checked (CheckEmptyPayload): a non-empty one is InvalidArgument.
#ifndef VLLM_WORKER_WORKER_PROTOCOL_H_
#define VLLM_WORKER_WORKER_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/engine_core.h"

namespace vllm::worker {

// 2: KVCacheSpec.draft_bytes_per_token; 3: ReadyMessage.stage_handle, init_pipeline.
inline constexpr uint8_t kWorkerProtocolVersion = 3;
// The methods (CallHeader::method), described above.
inline constexpr char kExecuteModelMethod[] = "execute_model";
inline constexpr char kGetKVCacheSpecMethod[] = "get_kv_cache_spec";
inline constexpr char kDetermineAvailableMemoryMethod[] = "determine_available_memory";
inline constexpr char kInitializeKVCacheMethod[] = "initialize_kv_cache";
inline constexpr char kExecuteDummyBatchMethod[] = "execute_dummy_batch";
inline constexpr char kEchoMethod[] = "echo";
inline constexpr char kShutdownMethod[] = "shutdown";
inline constexpr char kInitDeviceMethod[] = "init_device";
inline constexpr char kInitPipelineMethod[] = "init_pipeline";
inline constexpr char kSleepMethod[] = "sleep";
inline constexpr char kWakeUpMethod[] = "wake_up";
inline constexpr uint32_t kMaxHeaderBytes = 4096;

struct CallHeader {
  uint64_t call_id = 0;
  std::string method;
  int32_t reply_rank = -1;
};

struct ReplyHeader {
  uint64_t call_id = 0;
  int32_t rank = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;

  absl::Status status() const { return absl::Status(code, message); }
};

// A decoded message: the header and a view of the payload inside the decoded buffer.
template <typename Header>
struct Framed {
  Header header;
  absl::Span<const uint8_t> payload;
};

// Sent once by each worker over ZMQ PUSH to the executor's ready address, when it is loaded
// (code OK, with its response queue's handle) or has failed to start (code and message):
// msgpack [version: u8, rank: i32, pid: i64, code: i32, message: str, response_handle: str,
// stage_handle: str].
struct ReadyMessage {
  int32_t rank = 0;
  int64_t pid = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;
  std::string response_handle;  // ipc::Handle::ToText()
  // Pipeline parallelism, a stage before the last: its queue to the next stage's rank (empty
  // otherwise).
  std::string stage_handle;

  absl::Status status() const { return absl::Status(code, message); }
};
std::string EncodeReady(const ReadyMessage& ready);
[[nodiscard]] absl::StatusOr<ReadyMessage> DecodeReady(absl::Span<const uint8_t> bytes);

// init_pipeline's payload: one handle text per rank (at most 4096 ranks, 64 KiB each).
std::string EncodeStageHandles(const std::vector<std::string>& handles);
[[nodiscard]] absl::StatusOr<std::vector<std::string>> DecodeStageHandles(
    absl::Span<const uint8_t> bytes);

// The prefix (length + header) of a message; the payload is sent after it as a second part.
std::string EncodeCallPrefix(const CallHeader& header);
std::string EncodeReplyPrefix(const ReplyHeader& header);
// The same into `*out`, whose capacity is reused (no allocation per call once grown).
void EncodeCallPrefixTo(const CallHeader& header, std::string* out);
void EncodeReplyPrefixTo(const ReplyHeader& header, std::string* out);

// DataLoss for a truncated or malformed message, InvalidArgument for a wrong version or
// field, ResourceExhausted for a header over kMaxHeaderBytes. A well-formed header is read
// in one pass (core/msgpack_cursor.h); anything else goes through the bounded unpacker.
[[nodiscard]] absl::StatusOr<Framed<CallHeader>> DecodeCall(absl::Span<const uint8_t> bytes);
[[nodiscard]] absl::StatusOr<Framed<ReplyHeader>> DecodeReply(absl::Span<const uint8_t> bytes);

// Payloads. Each Decode bounds what it reads, never throws, and answers InvalidArgument (wrong
// type, count or range), DataLoss (truncated or malformed msgpack, trailing bytes) or
// ResourceExhausted (a container or string larger than the payload or its limit).

// get_kv_cache_spec's reply. Every field must be in 1..2^20 (dtype_bytes in 1..8;
// draft_bytes_per_token in 0..2^40).
std::string EncodeKVCacheSpec(const core::KVCacheSpec& spec);
[[nodiscard]] absl::StatusOr<core::KVCacheSpec> DecodeKVCacheSpec(absl::Span<const uint8_t> bytes);

// determine_available_memory's reply: bytes the KV cache may use on this worker (may be negative
// when the model alone exceeds the budget; the executor reports that).
std::string EncodeAvailableMemory(int64_t bytes);
[[nodiscard]] absl::StatusOr<int64_t> DecodeAvailableMemory(absl::Span<const uint8_t> bytes);

// initialize_kv_cache's argument. Both fields must be positive.
struct InitializeKVCacheArgs {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
};
std::string EncodeInitializeKVCacheArgs(const InitializeKVCacheArgs& args);
[[nodiscard]] absl::StatusOr<InitializeKVCacheArgs> DecodeInitializeKVCacheArgs(
    absl::Span<const uint8_t> bytes);

// sleep's argument: the level, 1 or 2.
std::string EncodeSleepLevel(int32_t level);
[[nodiscard]] absl::StatusOr<int32_t> DecodeSleepLevel(absl::Span<const uint8_t> bytes);

// wake_up's argument: what to re-create (vLLM's wake_up tags "weights" and "kv_cache").
struct WakeUpArgs {
  bool weights = true;
  bool kv_cache = true;
};
std::string EncodeWakeUpArgs(const WakeUpArgs& args);
[[nodiscard]] absl::StatusOr<WakeUpArgs> DecodeWakeUpArgs(absl::Span<const uint8_t> bytes);

// OK for an empty payload, InvalidArgument naming `what` otherwise.
[[nodiscard]] absl::Status CheckEmptyPayload(absl::Span<const uint8_t> bytes,
                                             std::string_view what);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_WORKER_PROTOCOL_H_
