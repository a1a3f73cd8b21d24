#include "worker/model_backend.h"

#include <utility>

#include "base/status_macros.h"

namespace vllm::worker {

absl::Status CpuModelBackend::InitializeKVCache(int32_t num_blocks, int32_t block_size) {
  kv_cache_ = model_->AllocateKVCache(num_blocks, block_size);
  return absl::OkStatus();
}

absl::Status CpuModelBackend::Execute(const StepInputs& in, StepResult* result) {
  for (const RowSampling& s : in.sampling) {
    if (!s.on_host) return absl::InternalError("the CPU backend samples every row on the host");
  }
  ForwardBatch batch;
  batch.token_ids = in.token_ids;
  batch.positions = in.positions;
  batch.slot_mapping = in.slot_mapping;
  batch.logits_indices = in.logits_indices;
  batch.attention.num_seqs = static_cast<int32_t>(in.seq_lens.size());
  batch.attention.query_start_loc = in.query_start_loc.data();
  batch.attention.seq_lens = in.seq_lens.data();
  batch.attention.block_tables = in.block_tables.data();
  batch.attention.max_blocks_per_seq = in.max_blocks_per_seq;
  batch.attention.block_size = kv_cache_.block_size;
  VLLM_RETURN_IF_ERROR(model_->Forward(batch, kv_cache_, &result->host_logits));
  result->tokens.assign(in.logits_indices.size(), -1);
  return absl::OkStatus();
}

}  // namespace vllm::worker
