// UniProcExecutor: core's Executor with the one worker in the engine's own process and
// thread (vLLM's vllm/v1/executor/uniproc_executor.py) — tensor-parallel size 1, no IPC.
//
// Thread-safety: none; EngineCore calls it from its thread.
#ifndef VLLM_EXECUTOR_UNIPROC_EXECUTOR_H_
#define VLLM_EXECUTOR_UNIPROC_EXECUTOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/engine_core.h"
#include "kernels/communicator.h"
#include "worker/worker.h"

namespace vllm::executor {

class UniProcExecutor final : public core::Executor {
 public:
  // Creates the worker of the engine's resolved `config` (loads the model); its errors are
  // returned as they are. `cluster_key_file` (may be empty): CURVE keys for the KV connector's
  // sockets.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UniProcExecutor>> Create(
      const config::VllmConfig& config, const std::string& cluster_key_file = "");

  absl::StatusOr<core::KVCacheSpec> GetKVCacheSpec() override { return worker_->GetKVCacheSpec(); }
  absl::StatusOr<int64_t> DetermineAvailableMemory() override {
    return worker_->DetermineAvailableMemory();
  }
  absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) override {
    return worker_->InitializeKVCache(num_blocks, block_size);
  }
  absl::StatusOr<core::ModelRunnerOutput> ExecuteModel(
      const core::SchedulerOutput& scheduler_output) override;
  absl::Status ExecuteDummyBatch() override { return worker_->ExecuteDummyBatch(); }
  absl::Status Sleep(int32_t level) override { return worker_->Sleep(level); }
  absl::Status WakeUp(bool weights, bool kv_cache) override {
    return worker_->WakeUp(weights, kv_cache);
  }
  void Shutdown() override { shut_down_ = true; }

  worker::Worker& worker() { return *worker_; }

 private:
  UniProcExecutor() = default;
  kernels::SingleRankCommunicator comm_;
  std::unique_ptr<worker::Worker> worker_;
  bool shut_down_ = false;
};

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_UNIPROC_EXECUTOR_H_
