// Worker: one rank's device, model and KV cache (vLLM's vllm/v1/worker/cpu_worker.py): loads
// the model config and this rank's weights, reports the KV-cache geometry and the memory
// budget for it, allocates the cache, and runs steps through its ModelRunner.
//
// Two devices (WorkerConfig.device): the CPU backend (LlamaModel, float32) and, in builds with
// CUDA, the CUDA backend (worker/cuda/: CudaLlamaModel on the GPU of index rank, weights and
// activations in WorkerConfig.dtype). On the CPU the KV-cache budget is explicit
// (--kv-cache-memory, vLLM's VLLM_CPU_KVCACHE_SPACE); on CUDA it is profiled (vLLM's method:
// a dummy run at max_num_batched_tokens, then total × gpu_memory_utilization minus everything
// in use — see worker/cuda/cuda_model_backend.h).
//
// Thread-safety: none; UniProcExecutor calls it from the engine thread, WorkerProc
// from the worker process's main thread.
#ifndef VLLM_WORKER_WORKER_H_
#define VLLM_WORKER_WORKER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "core/engine_core.h"
#include "core/scheduler_output.h"
#include "kernels/communicator.h"
#include "worker/model_config.h"
#include "worker/model_runner.h"

namespace vllm::kernels::cuda {
class DeviceCommunicator;  // kernels/cuda/device_communicator.h (CUDA builds only)
}  // namespace vllm::kernels::cuda

namespace vllm::worker {

// --load-format, --device and --dtype are defined with the rest of the configuration.
using config::Device;
using config::DeviceName;
using config::LoadFormat;
using config::ModelDType;
using config::ModelDTypeName;
using config::ParseDevice;
using config::ParseLoadFormat;
using config::ParseModelDType;

// Number of visible CUDA devices (0 in a build without CUDA, or with no GPU or driver).
int VisibleCudaDevices();
// kAuto -> kCuda when VisibleCudaDevices() > 0, else kCpu. kCuda with no GPU (or a build
// without CUDA) is InvalidArgument naming --device; kCpu stays.
[[nodiscard]] absl::StatusOr<Device> ResolveDevice(Device device);

struct WorkerConfig {
  // A Hugging Face model directory (config.json, *.safetensors).
  std::filesystem::path model;
  LoadFormat load_format = LoadFormat::kAuto;
  // Seeds dummy weights and requests that have no seed.
  uint64_t seed = 0;
  // Bytes for this rank's KV cache (CPU only).
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  // kAuto is resolved by Worker::Create (the engine resolves it earlier, for every rank).
  Device device = Device::kCpu;
  ModelDType dtype = ModelDType::kAuto;
  // CUDA: fraction of the GPU's memory for weights, activations and KV cache.
  double gpu_memory_utilization = 0.9;
  // CUDA: no CUDA graphs.
  bool enforce_eager = false;
  // The scheduler's limits, which size the CUDA scratch buffers, the profile run and the
  // graphs; 0: the model's max_position_embeddings / 2048 / 256.
  int32_t max_model_len = 0;
  int32_t max_num_batched_tokens = 0;
  int32_t max_num_seqs = 0;
  // CUDA: the GPU of rank 0 among the visible ones; rank r uses first_device + r (the node's
  // data-parallel engines take consecutive blocks, config::ParallelConfig::local_device_index).
  int32_t first_device = 0;
};
// A rank's view of the engine's (resolved) config: what WorkerProc builds from the config it
// receives, and UniProcExecutor from its own.
WorkerConfig WorkerConfigFrom(const config::VllmConfig& config);

class Worker {
 public:
  // Loads the config and this rank's weights (`comm`, not owned, is the tensor-parallel
  // group and must outlive the worker). Errors name the file or tensor at fault.
  // On CUDA, `device_comm` (not owned, outlives the worker) is the device-side group
  // (NCCL); null is allowed only for a group of one (a SingleRankDeviceCommunicator is used).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Worker>> Create(
      const WorkerConfig& config, kernels::Communicator* comm,
      kernels::cuda::DeviceCommunicator* device_comm = nullptr);

  core::KVCacheSpec GetKVCacheSpec() const;
  // The CPU: --kv-cache-memory. CUDA: the profiled budget (errors when none is left).
  [[nodiscard]] absl::StatusOr<int64_t> DetermineAvailableMemory() {
    return runner_->backend().DetermineAvailableMemory();
  }
  [[nodiscard]] absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) {
    return runner_->InitializeKVCache(num_blocks, block_size);
  }
  [[nodiscard]] absl::StatusOr<core::ModelRunnerOutput> ExecuteModel(
      const core::SchedulerOutput& scheduler_output) {
    return runner_->ExecuteModel(scheduler_output);
  }

  // vLLM's execute_dummy_batch: one forward pass of a one-token DummyStep (nothing cached,
  // read from the cache or kept), so that the model's collectives run as on a real step. A
  // lockstep data-parallel engine runs it while it has no work and another engine has.
  // Fails before InitializeKVCache, or with the backend's error.
  [[nodiscard]] absl::Status ExecuteDummyBatch();

  const ModelConfig& model_config() const { return runner_->backend().config(); }
  ModelRunner& runner() { return *runner_; }

 private:
  Worker(const WorkerConfig& config, std::unique_ptr<ModelRunner> runner)
      : config_(config), runner_(std::move(runner)) {}
  const WorkerConfig config_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_WORKER_H_
