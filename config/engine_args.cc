#include "config/engine_args.h"

#include "base/status_macros.h"

namespace vllm::config {

absl::StatusOr<VllmConfig> EngineArgs::CreateEngineConfig() const {
  VllmConfig c;
  c.model.model = model;
  c.model.max_model_len = max_model_len;
  c.model.dtype = dtype;
  c.model.seed = seed;
  c.model.enforce_eager = enforce_eager;
  c.load.load_format = load_format;
  c.cache.block_size = block_size;
  c.cache.enable_prefix_caching = enable_prefix_caching;
  c.cache.kv_cache_memory_bytes = kv_cache_memory_bytes;
  c.cache.gpu_memory_utilization = gpu_memory_utilization;
  c.cache.num_gpu_blocks_override = num_gpu_blocks_override;
  c.parallel.tensor_parallel_size = tensor_parallel_size;
  c.parallel.pipeline_parallel_size = pipeline_parallel_size;
  c.parallel.data_parallel_size = data_parallel_size;
  c.parallel.data_parallel_size_local = data_parallel_size_local;
  c.parallel.data_parallel_start_rank = data_parallel_start_rank;
  c.parallel.data_parallel_rank = data_parallel_start_rank;
  c.parallel.data_parallel_address = data_parallel_address;
  c.parallel.data_parallel_rpc_port = data_parallel_rpc_port;
  c.parallel.distributed_executor_backend = distributed_executor_backend;
  c.parallel.comm_backend = comm_backend;
  c.scheduler.max_num_seqs = max_num_seqs;
  c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  c.scheduler.enable_chunked_prefill = enable_chunked_prefill;
  c.scheduler.long_prefill_token_threshold = long_prefill_token_threshold;
  c.scheduler.policy = scheduling_policy;
  c.device.device = device;
  c.kv_events = kv_events;
  VLLM_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace vllm::config
