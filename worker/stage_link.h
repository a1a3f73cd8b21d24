// QueueStageLink: a pipeline stage's StageLink (intermediate_tensors.h) over ipc::MessageQueue:
// each rank of a stage before the last writes a one-reader queue that the same TP rank of the
// next stage reads — through shared memory on one node (frames larger than a chunk over the
// queue's ZMQ socket), over TCP across nodes.
//
// Thread-safety: one thread (the worker's) sends and receives; Cancel() is thread-safe.
#ifndef VLLM_WORKER_STAGE_LINK_H_
#define VLLM_WORKER_STAGE_LINK_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ipc/message_queue.h"
#include "worker/intermediate_tensors.h"

namespace vllm::worker {

// The queue a stage's rank writes to the next stage: chunks sized for a full step's stream
// (max_num_tokens × hidden_size floats twice, at most 32 MiB; larger steps go over ZMQ).
// `options` gives the reader's place (local by default; remote_host etc. when the next stage
// is on another node); the geometry fields are set here.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ipc::MessageQueueWriter>> CreateStageQueue(
    int64_t max_num_tokens, int32_t hidden_size, ipc::MessageQueueOptions options = {});

class QueueStageLink final : public StageLink {
 public:
  // Either end may be null (the first stage receives nothing, the last sends nothing); both
  // must be ready (WaitUntilReady) and outlive the link.
  QueueStageLink(ipc::MessageQueueReader* previous, ipc::MessageQueueWriter* next,
                 const StageFrameLimits& limits)
      : previous_(previous), next_(next), limits_(limits) {}

  absl::Status Send(uint64_t step_id, const IntermediateTensors& t) override;
  absl::Status SendError(uint64_t step_id, const absl::Status& error) override;
  absl::Status Receive(uint64_t step_id, IntermediateTensors* out) override;

 private:
  ipc::MessageQueueReader* const previous_;
  ipc::MessageQueueWriter* const next_;
  const StageFrameLimits limits_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_STAGE_LINK_H_
