// Worker: one rank's device, model and KV cache (vLLM's vllm/v1/worker/cpu_worker.py): loads
// the model config and this rank's weights, reports the KV-cache geometry and the memory
// budget for it, allocates the cache, and runs steps through its ModelRunner.
//
// Two devices (config.device): the CPU backend (LlamaModel, float32) and, in builds with
// CUDA, the CUDA backend (worker/cuda/: CudaLlamaModel on the rank's GPU, weights and
// activations in config.model.dtype). On the CPU the KV-cache budget is explicit
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
#include "worker/hf_config.h"
#include "worker/kv_connector.h"
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
// without CUDA) is InvalidArgument naming --device; kCpu stays. The engine factory
// (executor::ResolveVllmConfig) calls it once per engine; every part downstream reads the
// resolved config.device and never sees kAuto.
[[nodiscard]] absl::StatusOr<Device> ResolveDevice(Device device);
// OK for kCpu and kCuda; InvalidArgument naming --device for kAuto, which only the engine
// factory resolves (a config that reaches a worker or an executor unresolved is a bug).
[[nodiscard]] absl::Status CheckResolvedDevice(Device device);

class Worker {
 public:
  // Loads the model's config.json and this rank's weights as the engine's `config` says
  // (config.model, config.load, config.device; on CUDA also config.cache's memory fraction and
  // config.scheduler's limits; on the CPU config.cache.kv_cache_memory_bytes). `config` is the
  // engine's resolved config (a device of kAuto is InvalidArgument: CheckResolvedDevice); what
  // differs per rank comes from `comm` (not owned, the tensor-parallel group, must outlive the
  // worker): the rank, and with it the GPU (config.parallel.local_device_index(rank)).
  // Errors name the flag, file or tensor at fault. On CUDA, `device_comm` (not owned, outlives
  // the worker) is the device-side group (NCCL); null is allowed only for a group of one (a
  // SingleRankDeviceCommunicator is used). With pipeline parallelism
  // (config.parallel.pipeline_parallel_size > 1, the CPU backend) the worker runs stage
  // `pp_rank`'s layers (worker/pp_layout.h) and `comm` is that stage's tensor-parallel group;
  // the executor links the stages afterwards (ModelRunner::SetStageLinks).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Worker>> Create(
      const config::VllmConfig& config, kernels::Communicator* comm,
      kernels::cuda::DeviceCommunicator* device_comm = nullptr, int32_t pp_rank = 0);

  core::KVCacheSpec GetKVCacheSpec() const;
  // The CPU: --kv-cache-memory. CUDA: the profiled budget (errors when none is left).
  [[nodiscard]] absl::StatusOr<int64_t> DetermineAvailableMemory() {
    return runner_->backend().DetermineAvailableMemory();
  }
  // Allocates the cache, then starts the KV connector config.kv_transfer names, if any (its
  // sockets, with the keys of set_cluster_key_file).
  [[nodiscard]] absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size);
  // One step; with a KV connector, its loads start before the forward pass and the transfers
  // every rank finished come back in ModelRunnerOutput::kv_connector_output.
  [[nodiscard]] absl::StatusOr<core::ModelRunnerOutput> ExecuteModel(
      const core::SchedulerOutput& scheduler_output);
  // CURVE keys for the KV connector's sockets (--cluster-key-file); before InitializeKVCache.
  void set_cluster_key_file(std::string path) { cluster_key_file_ = std::move(path); }

  // vLLM's execute_dummy_batch: one forward pass of a one-token DummyStep (nothing cached,
  // read from the cache or kept), so that the model's collectives run as on a real step. A
  // pipeline stage after the first starts from zeros, as vLLM's dummy run does; the stages
  // exchange nothing. A
  // lockstep data-parallel engine runs it while it has no work and another engine has.
  // Fails before InitializeKVCache, or with the backend's error.
  [[nodiscard]] absl::Status ExecuteDummyBatch();

  // Sleep mode (vLLM's Worker.sleep / wake_up), while the engine runs no step: level 1 frees
  // the KV cache, level 2 the KV cache and the weights (ModelBackend::ReleaseMemory). WakeUp
  // re-creates the weights (read again from the model directory, or the dummy source) and/or
  // the KV cache, as `weights` / `kv_cache` say; what is awake already stays as it is.
  // FailedPrecondition with a KV connector (its view of the cache would go stale) or before
  // InitializeKVCache; InvalidArgument for another level; the backend's or loader's errors.
  // A draft in the worker keeps its weights and cache.
  [[nodiscard]] absl::Status Sleep(int32_t level);
  [[nodiscard]] absl::Status WakeUp(bool weights, bool kv_cache);

  const HfConfig& model_config() const { return runner_->backend().config(); }
  ModelRunner& runner() { return *runner_; }
  const config::VllmConfig& config() const { return config_; }

 private:
  Worker(const config::VllmConfig& config, std::unique_ptr<ModelRunner> runner,
         kernels::Communicator* comm)
      : config_(config), runner_(std::move(runner)), comm_(comm) {}
  const config::VllmConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  kernels::Communicator* const comm_;
  std::string cluster_key_file_;
  std::unique_ptr<KVConnectorWorker> kv_connector_;
  bool kv_cache_asleep_ = false;  // Sleep freed them; WakeUp has not re-created them
  bool weights_asleep_ = false;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_WORKER_H_
