#include "worker/worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "ipc/status_macros.h"
#include "worker/weights.h"

namespace vllm::worker {

absl::StatusOr<LoadFormat> ParseLoadFormat(std::string_view name) {
  if (name == "auto") return LoadFormat::kAuto;
  if (name == "safetensors") return LoadFormat::kSafetensors;
  if (name == "dummy") return LoadFormat::kDummy;
  return absl::InvalidArgumentError(absl::StrCat("--load-format: unknown format '",
                                                 absl::string_view(name.data(), name.size()),
                                                 "' (choose from auto, safetensors, dummy)"));
}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(const WorkerConfig& config,
                                                       kernels::Communicator* comm) {
  if (config.kv_cache_memory_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-cache-memory must be positive, got ",
                                                   config.kv_cache_memory_bytes, " bytes"));
  }
  VLLM_ASSIGN_OR_RETURN(ModelConfig model_config, LoadModelConfig(config.model));
  std::unique_ptr<WeightSource> weights;
  if (config.load_format == LoadFormat::kDummy) {
    weights = MakeDummyWeights(config.seed);
  } else {
    VLLM_ASSIGN_OR_RETURN(weights, OpenSafetensors(config.model));
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                        LlamaModel::Load(model_config, *weights, comm));
  auto runner = std::make_unique<ModelRunner>(std::move(model), config.seed);
  return std::unique_ptr<Worker>(new Worker(config, std::move(runner)));
}

core::KVCacheSpec Worker::GetKVCacheSpec() const {
  const LlamaModel& model = runner_->model();
  core::KVCacheSpec spec;
  spec.num_layers = model.num_layers();
  spec.num_kv_heads = model.num_kv_heads();
  spec.head_dim = model.head_dim();
  spec.dtype_bytes = sizeof(float);
  return spec;
}

}  // namespace vllm::worker
