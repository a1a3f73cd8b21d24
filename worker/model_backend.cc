#include "worker/model_backend.h"

#include <malloc.h>

#include <algorithm>
#include <utility>

#include "base/status_macros.h"

namespace vllm::worker {

DummyStep::DummyStep(int32_t num_tokens, int32_t num_seqs, int32_t max_seq_len)
    : token_ids_(num_tokens, 0),
      positions_(num_tokens, 0),
      query_start_loc_(num_seqs + 1, 0),
      seq_lens_(num_seqs, 0),
      block_tables_(num_seqs, 0),
      logits_indices_(num_seqs),
      slot_mapping_(num_tokens, -1),
      sampling_(num_seqs) {
  int32_t max_query_len = 0;
  for (int32_t r = 0; r < num_seqs; ++r) {
    const int32_t q = num_tokens / num_seqs + (r < num_tokens % num_seqs ? 1 : 0);
    query_start_loc_[r + 1] = query_start_loc_[r] + q;
    for (int32_t j = 0; j < q; ++j) positions_[query_start_loc_[r] + j] = j;
    logits_indices_[r] = query_start_loc_[r + 1] - 1;
    max_query_len = std::max(max_query_len, q);
  }
  inputs_.token_ids = token_ids_;
  inputs_.positions = positions_;
  inputs_.slot_mapping = slot_mapping_;
  inputs_.query_start_loc = query_start_loc_;
  inputs_.seq_lens = seq_lens_;
  inputs_.block_tables = block_tables_;
  inputs_.max_blocks_per_seq = 1;
  inputs_.max_query_len = max_query_len;
  inputs_.max_seq_len = max_seq_len;
  inputs_.logits_indices = logits_indices_;
  inputs_.sampling = sampling_;
}

absl::Status CpuModelBackend::InitializeKVCache(int32_t num_blocks, int32_t block_size) {
  VLLM_ASSIGN_OR_RETURN(kv_cache_, model_->AllocateKVCache(num_blocks, block_size));
  return absl::OkStatus();
}

absl::Status CpuModelBackend::ReleaseMemory(bool kv_cache, bool weights) {
  if (kv_cache && kv_cache_.num_blocks > 0) {
    released_blocks_ = kv_cache_.num_blocks;
    released_block_size_ = kv_cache_.block_size;
    kv_cache_ = KVCache{};  // munmap of every layer's pages
  }
  if (weights) {
    model_->ReleaseWeights();
    malloc_trim(0);  // the freed weights' heap pages back to the system, not kept by malloc
  }
  return absl::OkStatus();
}

absl::Status CpuModelBackend::RestoreMemory(bool kv_cache, bool restore_weights,
                                            WeightSource* weights) {
  if (restore_weights) {
    if (weights == nullptr) return absl::InternalError("RestoreMemory: no weight source");
    VLLM_RETURN_IF_ERROR(model_->ReloadWeights(*weights));
  }
  if (kv_cache && released_blocks_ > 0) {
    VLLM_RETURN_IF_ERROR(InitializeKVCache(released_blocks_, released_block_size_));
    released_blocks_ = 0;
  }
  return absl::OkStatus();
}

std::optional<kv_transfer::KvCacheView> CpuModelBackend::HostKvCacheView(int32_t tp_size,
                                                                         int32_t tp_rank) {
  if (kv_cache_.num_blocks <= 0) return std::nullopt;
  kv_transfer::KvCacheView view;
  view.layout.num_layers = static_cast<int32_t>(kv_cache_.k.size());
  view.layout.num_kv_heads = model_->num_kv_heads();
  view.layout.head_dim = model_->head_dim();
  view.layout.block_size = kv_cache_.block_size;
  view.layout.dtype_bytes = static_cast<int32_t>(sizeof(float));
  view.layout.tp_size = tp_size;
  view.layout.tp_rank = tp_rank;
  view.num_blocks = kv_cache_.num_blocks;
  for (size_t l = 0; l < kv_cache_.k.size(); ++l) {
    view.k.push_back(reinterpret_cast<uint8_t*>(kv_cache_.k[l].get()));
    view.v.push_back(reinterpret_cast<uint8_t*>(kv_cache_.v[l].get()));
  }
  return view;
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
  batch.intermediate_in = in.intermediate_in;
  const bool last = model_->stage().is_last();
  if (!last) batch.intermediate_out = &result->intermediate;
  VLLM_RETURN_IF_ERROR(model_->Forward(batch, kv_cache_, &result->host_logits,
                                       in.want_hidden ? &result->hidden : nullptr));
  result->tokens.assign(last ? in.logits_indices.size() : 0, -1);
  if (!last) result->host_logits.clear();
  return absl::OkStatus();
}

}  // namespace vllm::worker
