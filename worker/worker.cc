#include "worker/worker.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu/thread_pool.h"
#include "worker/weights.h"
#if VLLM_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#include "worker/cuda/cuda_model_backend.h"
#endif

namespace vllm::worker {

int VisibleCudaDevices() {
#if VLLM_HAVE_CUDA
  return kernels::CudaDeviceCount();
#else
  return 0;
#endif
}

absl::StatusOr<Device> ResolveDevice(Device device) {
  if (device == Device::kCpu) return device;
#if VLLM_HAVE_CUDA
  const int gpus = VisibleCudaDevices();
  if (device == Device::kAuto) return gpus > 0 ? Device::kCuda : Device::kCpu;
  if (gpus == 0) {
    return absl::InvalidArgumentError(
        "--device cuda: no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES, "
        "or choose --device cpu)");
  }
  return Device::kCuda;
#else
  if (device == Device::kAuto) return Device::kCpu;
  return absl::InvalidArgumentError(
      "--device cuda: this build has no CUDA backend (configure with -DVLLM_CUDA=ON, or choose "
      "--device cpu)");
#endif
}

absl::Status CheckResolvedDevice(Device device) {
  if (device != Device::kAuto) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "--device auto reached a worker unresolved (the engine factory resolves it once, "
      "executor::ResolveVllmConfig)");
}

namespace {

// The model's config.json, its RoPE tables (sized by max_position_embeddings) stretched to
// --max-model-len when that is longer (VLLM_ALLOW_LONG_MAX_MODEL_LEN let it past at start-up,
// executor/engine_factory.h): every position the engine may schedule has its rotation.
absl::StatusOr<HfConfig> LoadModelConfig(const config::VllmConfig& config) {
  VLLM_ASSIGN_OR_RETURN(HfConfig model_config, LoadHfConfig(config.model.model));
  model_config.max_position_embeddings =
      std::max<int64_t>(model_config.max_position_embeddings, config.model.max_model_len);
  return model_config;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(
    const config::VllmConfig& config, kernels::Communicator* comm,
    [[maybe_unused]] kernels::cuda::DeviceCommunicator* device_comm, int32_t pp_rank) {
  VLLM_RETURN_IF_ERROR(CheckResolvedDevice(config.device.device));
  const int32_t pp_size = config.parallel.pipeline_parallel_size;
  const std::filesystem::path& model = config.model.model;
  const LoadFormat load_format = config.load.load_format;
  const uint64_t seed = config.model.seed;
  if (config.device.device == Device::kCuda) {
    if (pp_size > 1) {
      return absl::InvalidArgumentError(
          "--pipeline-parallel-size above 1 runs on the CPU backend only so far (choose --device "
          "cpu, or use --tensor-parallel-size)");
    }
#if VLLM_HAVE_CUDA
    const int32_t gpu = config.parallel.local_device_index(comm->rank());
    if (const int visible = VisibleCudaDevices(); gpu >= visible) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--device cuda: rank %d needs GPU %d but %d %s visible (check the driver and "
          "CUDA_VISIBLE_DEVICES, or choose --device cpu)",
          comm->rank(), gpu, visible, visible == 1 ? "is" : "are"));
    }
    VLLM_ASSIGN_OR_RETURN(HfConfig model_config, LoadModelConfig(config));
    std::unique_ptr<WeightSource> weights;
    if (load_format != LoadFormat::kDummy) {
      VLLM_ASSIGN_OR_RETURN(weights, OpenSafetensors(model));
    }
    if (device_comm == nullptr && comm->world_size() > 1) {
      return absl::InvalidArgumentError(
          "--device cuda with tensor parallelism needs the NCCL device communicator");
    }
    CudaBackendOptions o;
    o.dtype = config.model.dtype;
    o.dummy_weights = load_format == LoadFormat::kDummy;
    o.seed = seed;
    o.device_index = gpu;
    o.gpu_memory_utilization = config.cache.gpu_memory_utilization;
    o.enforce_eager = config.model.enforce_eager;
    o.max_model_len = config.model.max_model_len;
    o.max_num_batched_tokens = config.scheduler.max_num_batched_tokens;
    o.max_num_seqs = config.scheduler.max_num_seqs;
    if (config.speculative.DraftsInWorker()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--speculative-config method '%s' runs its draft on the CPU backend only so far "
          "(choose --device cpu, or method ngram or suffix)",
          config.speculative.method));
    }
    VLLM_ASSIGN_OR_RETURN(std::unique_ptr<ModelBackend> backend,
                          CreateCudaModelBackend(model_config, weights.get(), device_comm, o));
    auto runner = std::make_unique<ModelRunner>(std::move(backend), seed);
    return std::unique_ptr<Worker>(new Worker(config, std::move(runner), comm));
#else
    return absl::InvalidArgumentError(
        "--device cuda: this build has no CUDA backend (configure with -DVLLM_CUDA=ON, or choose "
        "--device cpu)");
#endif
  }
  const int64_t kv_cache_memory_bytes = config.cache.kv_cache_memory_bytes;
  if (kv_cache_memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-cache-memory must be positive, got ", kv_cache_memory_bytes, " bytes"));
  }
  // The ranks of a CPU group share the cores (vLLM's CPU worker splits them likewise); an
  // explicit OPENBLAS_NUM_THREADS / OMP_NUM_THREADS from the user wins.
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int cores = kernels::cpu::UsableCores();  // what `taskset` left this process
    // Every rank of every pipeline stage runs at once.
    kernels::cpu::SetBlasNumThreads(std::max(1, cores / std::max(1, comm->world_size() * pp_size)));
  }
  VLLM_ASSIGN_OR_RETURN(HfConfig model_config, LoadModelConfig(config));
  std::unique_ptr<WeightSource> weights;
  if (load_format == LoadFormat::kDummy) {
    weights = MakeDummyWeights(seed);
  } else {
    VLLM_ASSIGN_OR_RETURN(weights, OpenSafetensors(model));
  }
  std::optional<PpStage> stage;
  if (pp_size > 1) {
    VLLM_ASSIGN_OR_RETURN(stage, MakePpStage(model_config.num_hidden_layers, pp_rank, pp_size));
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model_weights,
                        LlamaModel::Load(model_config, *weights, comm, stage ? &*stage : nullptr));
  std::unique_ptr<Drafter> drafter;
  if (config.speculative.DraftsInWorker()) {
    VLLM_ASSIGN_OR_RETURN(drafter, MakeDrafter(config.speculative, *model_weights, comm,
                                               load_format == LoadFormat::kDummy, seed + 1));
  }
  auto runner = std::make_unique<ModelRunner>(
      std::make_unique<CpuModelBackend>(std::move(model_weights), kv_cache_memory_bytes), seed);
  if (drafter != nullptr) {
    runner->SetDrafter(std::move(drafter), config.speculative.num_speculative_tokens);
  }
  return std::unique_ptr<Worker>(new Worker(config, std::move(runner), comm));
}

absl::Status Worker::InitializeKVCache(int32_t num_blocks, int32_t block_size) {
  VLLM_RETURN_IF_ERROR(runner_->InitializeKVCache(num_blocks, block_size));
  if (config_.kv_transfer.kv_connector.empty()) return absl::OkStatus();
  const int32_t tp_size = comm_ != nullptr ? comm_->world_size() : 1;
  const int32_t tp_rank = comm_ != nullptr ? comm_->rank() : 0;
  std::optional<kv_transfer::KvCacheView> view =
      runner_->backend().HostKvCacheView(tp_size, tp_rank);
  if (!view.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-transfer-config: ", config_.kv_transfer.kv_connector,
        " needs the KV cache in host memory; the CUDA backend's device cache is not built for "
        "KV transfer yet (use --device cpu)"));
  }
  VLLM_ASSIGN_OR_RETURN(kv_connector_,
                        MakeKVConnectorWorker(config_, *view, comm_, cluster_key_file_));
  return absl::OkStatus();
}

absl::StatusOr<core::ModelRunnerOutput> Worker::ExecuteModel(const core::SchedulerOutput& so) {
  if (kv_connector_ == nullptr) return runner_->ExecuteModel(so);
  VLLM_RETURN_IF_ERROR(kv_connector_->BeginStep(so.kv_connector_metadata));
  VLLM_ASSIGN_OR_RETURN(core::ModelRunnerOutput out, runner_->ExecuteModel(so));
  VLLM_ASSIGN_OR_RETURN(kv_transfer::KVConnectorOutput kv, kv_connector_->EndStep());
  if (!kv.empty()) out.kv_connector_output = std::move(kv);
  return out;
}

absl::Status Worker::ExecuteDummyBatch() {
  if (!runner_->kv_cache_initialized()) {
    return absl::FailedPreconditionError("ExecuteDummyBatch before InitializeKVCache");
  }
  const DummyStep dummy(/*num_tokens=*/1, /*num_seqs=*/1, /*max_seq_len=*/1);
  // A backend that samples on the host (the CPU's) returns the logits row instead. The CPU
  // attention needs each query row among its sequence's keys: the token attends to slot 0 of
  // block 0 (whatever it holds; the output is dropped) and, slot -1, writes nothing.
  RowSampling sampling;
  sampling.on_host = !runner_->backend().samples_on_device();
  const int32_t seq_len = 1;
  StepInputs inputs = dummy.inputs();
  inputs.sampling = std::span<const RowSampling>(&sampling, 1);
  inputs.seq_lens = std::span<const int32_t>(&seq_len, 1);
  const PpStage stage = runner_->backend().stage();
  IntermediateTensors zeros;
  if (!stage.is_first()) {
    const int32_t h = runner_->backend().config().hidden_size;
    zeros.next_layer = stage.first_layer;
    zeros.num_tokens = 1;
    zeros.hidden_size = h;
    zeros.residual.assign(h, 0.0f);
    if (stage.first_layer > 0) zeros.hidden.assign(h, 0.0f);
    inputs.intermediate_in = &zeros;
  }
  StepResult result;
  return runner_->backend().Execute(inputs, &result);
}

absl::Status Worker::Sleep(int32_t level) {
  if (level != 1 && level != 2) {
    return absl::InvalidArgumentError(absl::StrCat("sleep level ", level, " (1 or 2 here)"));
  }
  if (kv_connector_ != nullptr) {
    return absl::FailedPreconditionError(
        "sleep mode with --kv-transfer-config is not supported (the connector holds the KV "
        "cache's addresses)");
  }
  if (!runner_->kv_cache_initialized()) {
    return absl::FailedPreconditionError("sleep before InitializeKVCache");
  }
  const bool weights = level == 2;
  VLLM_RETURN_IF_ERROR(runner_->backend().ReleaseMemory(/*kv_cache=*/true, weights));
  kv_cache_asleep_ = true;
  weights_asleep_ = weights_asleep_ || weights;
  return absl::OkStatus();
}

absl::Status Worker::WakeUp(bool weights, bool kv_cache) {
  const bool restore_weights = weights && weights_asleep_;
  const bool restore_cache = kv_cache && kv_cache_asleep_;
  std::unique_ptr<WeightSource> source;
  const bool dummy = config_.load.load_format == LoadFormat::kDummy;
  if (restore_weights && !(dummy && config_.device.device == Device::kCuda)) {
    if (dummy) {
      source = MakeDummyWeights(config_.model.seed);
    } else {
      VLLM_ASSIGN_OR_RETURN(source, OpenSafetensors(config_.model.model));
    }
  }
  VLLM_RETURN_IF_ERROR(
      runner_->backend().RestoreMemory(restore_cache, restore_weights, source.get()));
  if (restore_weights) weights_asleep_ = false;
  if (restore_cache) kv_cache_asleep_ = false;
  return absl::OkStatus();
}

core::KVCacheSpec Worker::GetKVCacheSpec() const {
  const ModelBackend& backend = runner_->backend();
  core::KVCacheSpec spec;
  const PpStage stage = backend.stage();
  spec.num_layers = stage.end_layer - stage.first_layer;  // this stage's layers
  spec.num_kv_heads = backend.num_kv_heads();
  spec.head_dim = backend.config().head_dim;
  spec.dtype_bytes = backend.kv_dtype_bytes();
  if (runner_->drafter() != nullptr)
    spec.draft_bytes_per_token = runner_->drafter()->kv_bytes_per_token();
  return spec;
}

}  // namespace vllm::worker
