#include "executor/uniproc_executor.h"

#include "base/status_macros.h"

namespace vllm::executor {

absl::StatusOr<std::unique_ptr<UniProcExecutor>> UniProcExecutor::Create(
    const config::VllmConfig& config, const std::string& cluster_key_file) {
  std::unique_ptr<UniProcExecutor> executor(new UniProcExecutor());
  VLLM_ASSIGN_OR_RETURN(executor->worker_, worker::Worker::Create(config, &executor->comm_));
  executor->worker_->set_cluster_key_file(cluster_key_file);
  return executor;
}

absl::StatusOr<core::ModelRunnerOutput> UniProcExecutor::ExecuteModel(
    const core::SchedulerOutput& scheduler_output) {
  if (shut_down_) return absl::FailedPreconditionError("executor is shut down");
  return worker_->ExecuteModel(scheduler_output);
}

}  // namespace vllm::executor
