#include "launcher/serve_env.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace vllm::launcher {
namespace {

spdlog::level::level_enum SpdlogLevel(const std::string& python_level) {
  if (python_level == "CRITICAL" || python_level == "FATAL") return spdlog::level::critical;
  if (python_level == "ERROR") return spdlog::level::err;
  if (python_level == "WARNING" || python_level == "WARN") return spdlog::level::warn;
  if (python_level == "DEBUG") return spdlog::level::debug;
  if (python_level == "NOTSET") return spdlog::level::trace;
  return spdlog::level::info;
}

// vLLM reads VLLM_DP_* only when --data-parallel-size is 1 (ParallelConfig.__post_init__, "the
// offline SPMD case"): one process per rank joining a DP group at VLLM_DP_MASTER_IP:PORT.
absl::Status ApplyDataParallelEnv(const config::VllmEnv& env, const ServeArgs& args) {
  if (args.config.parallel.data_parallel_size > 1) return absl::OkStatus();
  const char* offline =
      ": vLLM's offline data parallelism (one process per rank joining VLLM_DP_MASTER_IP:"
      "VLLM_DP_MASTER_PORT) is not supported by vllm-launch; unset it and use "
      "--data-parallel-size (-dp) with --data-parallel-rank or --headless nodes";
  if (env.dp_size > 1) {
    return absl::InvalidArgumentError(absl::StrCat("VLLM_DP_SIZE=", env.dp_size, offline));
  }
  if (env.dp_rank != 0 || env.dp_rank_local != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VLLM_DP_RANK=", env.dp_rank, " / VLLM_DP_RANK_LOCAL=", env.dp_rank_local, offline));
  }
  return absl::OkStatus();
}

}  // namespace

void ConfigureLoggingFromEnv() {
  auto env = config::ReadVllmEnv();
  if (!env.ok() || !env->configure_logging) return;
  spdlog::set_level(SpdlogLevel(env->logging_level));
}

absl::Status ApplyVllmEnv(const config::VllmEnv& env, ServeArgs& args) {
  VLLM_RETURN_IF_ERROR(config::CheckVllmEnvRefusals(env));
  VLLM_RETURN_IF_ERROR(ApplyDataParallelEnv(env, args));
  // vLLM: `args.api_key or [envs.VLLM_API_KEY]`, an empty key being none.
  if (args.http.api_keys.empty() && env.api_key.has_value() && !env.api_key->empty()) {
    args.http.api_keys = {*env.api_key};
  }
  if (env.cpu_kvcache_space_gib.has_value()) {
    // vLLM's CPU platform sets kv_cache_memory_bytes from it after the flags (it wins).
    args.config.cache.kv_cache_memory_bytes = *env.cpu_kvcache_space_gib << 30;
    if (absl::Status s = args.config.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("VLLM_CPU_KVCACHE_SPACE=", *env.cpu_kvcache_space_gib, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyVllmEnvAtStartup(ServeArgs& args) {
  VLLM_ASSIGN_OR_RETURN(const config::VllmEnv env, config::ReadVllmEnv());
  VLLM_RETURN_IF_ERROR(ApplyVllmEnv(env, args));
  if (const std::optional<std::string> line = config::UnhonouredEnvWarning(environ)) {
    spdlog::warn("{}", *line);
  }
  return absl::OkStatus();
}

absl::Duration WorkerShutdownTimeout() {
  auto env = config::ReadVllmEnv();
  return absl::Seconds(env.ok() ? env->worker_shutdown_timeout_s : 5);
}

}  // namespace vllm::launcher
