// Pipeline parallelism: what one stage hands the next (vLLM's IntermediateTensors) and the
// frame that carries it between stage processes.
//
// The residual stream at a layer boundary b (the input of layer b) is two [num_tokens,
// hidden] float arrays: `residual` and `hidden`, the last sub-layer's output not yet added to
// it (layer b's fused add-RMSNorm adds them). At b = 0 the stream is the embedding alone:
// `residual` holds it and `hidden` is empty (layer 0 norms it). The stage owning layer b picks
// up exactly where the previous one stopped, so the arithmetic is the single-process model's.
//
// Frame (little-endian, the byte order of every node — all are x86-64 or aarch64 Linux):
//   bytes 0..3    magic "VPP1"
//   byte  4       kind: 'T' tensors, 'E' the previous stage failed this step
//   bytes 8..15   step_id (core::SchedulerOutput::step_id)
//   'T':  bytes 16..19 next_layer (i32), 20..23 hidden_size (i32), 24..31 num_tokens (i64),
//         byte 32 has_hidden (0/1); from byte 40: residual floats, then hidden floats.
//   'E':  bytes 16..19 an absl::StatusCode (i32), then the message (at most
//         kMaxStageErrorBytes bytes).
// DecodeStageFrame checks every size against the receiver's limits and the frame's length
// exactly; it never trusts a count before checking it.
#ifndef VLLM_WORKER_INTERMEDIATE_TENSORS_H_
#define VLLM_WORKER_INTERMEDIATE_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace vllm::worker {

struct IntermediateTensors {
  int32_t next_layer = 0;  // the layer that consumes them
  int64_t num_tokens = 0;
  int32_t hidden_size = 0;
  std::vector<float> residual;  // [num_tokens, hidden_size]
  std::vector<float> hidden;    // [num_tokens, hidden_size]; empty at next_layer 0
};

inline constexpr size_t kStageFrameHeaderBytes = 40;
inline constexpr size_t kMaxStageErrorBytes = 4096;

// Bytes of the frame carrying `t`.
size_t StageFrameBytes(const IntermediateTensors& t);
// The 'T' frame's header; the floats follow as two more parts (residual, hidden).
std::string EncodeStageTensorsHeader(uint64_t step_id, const IntermediateTensors& t);
// An 'E' frame: the stage could not run step `step_id` (the message is cut to
// kMaxStageErrorBytes).
std::string EncodeStageError(uint64_t step_id, const absl::Status& status);

struct StageFrameLimits {
  int32_t hidden_size = 0;  // must match exactly
  int64_t max_num_tokens = 0;
  int32_t num_layers = 0;  // next_layer must be within [0, num_layers]
};

// Decodes a frame into `out` (its vectors reused). Returns the step id; an 'E' frame's status
// is returned as `*stage_error` (OK for a 'T' frame). DataLoss for a frame that is malformed
// or breaks `limits`.
[[nodiscard]] absl::StatusOr<uint64_t> DecodeStageFrame(absl::Span<const uint8_t> bytes,
                                                        const StageFrameLimits& limits,
                                                        IntermediateTensors* out,
                                                        absl::Status* stage_error);

// A pipeline stage's connection to a neighbouring stage (the ModelRunner's view of it; the
// worker process implements it over an ipc::MessageQueue, worker/stage_link.h).
class StageLink {
 public:
  virtual ~StageLink() = default;
  // To the next stage: step `step_id`'s stream after this stage's layers.
  [[nodiscard]] virtual absl::Status Send(uint64_t step_id, const IntermediateTensors& t) = 0;
  // To the next stage: this stage could not run step `step_id` (it fails there too).
  [[nodiscard]] virtual absl::Status SendError(uint64_t step_id, const absl::Status& error) = 0;
  // From the previous stage: step `step_id`'s stream into `out`. The previous stage's error
  // as it sent it; Internal when the frame belongs to another step.
  [[nodiscard]] virtual absl::Status Receive(uint64_t step_id, IntermediateTensors* out) = 0;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_INTERMEDIATE_TENSORS_H_
