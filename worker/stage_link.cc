#include "worker/stage_link.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vllm::worker {
namespace {

ipc::ByteSpan FloatBytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<ipc::MessageQueueWriter>> CreateStageQueue(
    int64_t max_num_tokens, int32_t hidden_size, ipc::MessageQueueOptions o) {
  constexpr uint64_t kMaxChunkBytes = uint64_t{32} << 20;
  const uint64_t want = kStageFrameHeaderBytes + uint64_t{2} * sizeof(float) *
                                                     static_cast<uint64_t>(max_num_tokens) *
                                                     static_cast<uint64_t>(hidden_size);
  o.n_readers = 1;
  o.max_chunks = 4;
  o.max_chunk_bytes = (std::min(want, kMaxChunkBytes) + 63) / 64 * 64;
  return ipc::MessageQueueWriter::Create(o);
}

absl::Status QueueStageLink::Send(uint64_t step_id, const IntermediateTensors& t) {
  if (next_ == nullptr) return absl::FailedPreconditionError("the last stage sends nothing");
  const std::string header = EncodeStageTensorsHeader(step_id, t);
  // The hidden part is empty at layer 0 (no empty span is handed on: its data may be null).
  const ipc::ByteSpan parts[3] = {{reinterpret_cast<const uint8_t*>(header.data()), header.size()},
                                  FloatBytes(t.residual),
                                  FloatBytes(t.hidden)};
  absl::Status s = next_->EnqueueParts(absl::MakeConstSpan(parts, t.hidden.empty() ? 2 : 3));
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("sending to the next pipeline stage: ", s.message()));
  }
  return s;
}

absl::Status QueueStageLink::SendError(uint64_t step_id, const absl::Status& error) {
  if (next_ == nullptr) return absl::FailedPreconditionError("the last stage sends nothing");
  const std::string frame = EncodeStageError(step_id, error);
  return next_->Enqueue({reinterpret_cast<const uint8_t*>(frame.data()), frame.size()});
}

absl::Status QueueStageLink::Receive(uint64_t step_id, IntermediateTensors* out) {
  if (previous_ == nullptr)
    return absl::FailedPreconditionError("the first stage receives nothing");
  uint64_t got = 0;
  absl::Status stage_error;
  absl::Status s = previous_->Dequeue([&](ipc::ByteSpan bytes) -> absl::Status {
    VLLM_ASSIGN_OR_RETURN(got, DecodeStageFrame(bytes, limits_, out, &stage_error));
    return absl::OkStatus();
  });
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("receiving from the previous pipeline stage: ", s.message()));
  }
  if (got != step_id) {
    return absl::InternalError(absl::StrFormat(
        "the previous pipeline stage sent step %d while step %d was expected", got, step_id));
  }
  return stage_error;
}

}  // namespace vllm::worker
