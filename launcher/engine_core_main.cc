#include "launcher/engine_core_main.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/engine_core_proc.h"
#include "frontend/llm_engine.h"
#include "ipc/signal_watcher.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {
namespace {

struct Flags {
  core::EngineCoreProcOptions proc;
  frontend::EngineArgs engine;
  int64_t parent_pid = 0;
};

absl::Status ParseInt(const std::string& flag, const std::string& v, int64_t lo, int64_t hi,
                      int64_t* out) {
  if (!absl::SimpleAtoi(v, out) || *out < lo || *out > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected an integer in [", lo, ", ", hi, "], got '", v, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Flags> Parse(const std::vector<std::string>& args) {
  Flags f;
  bool have_model = false, have_address = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--no-enable-prefix-caching") {
      f.engine.enable_prefix_caching = false;
      continue;
    }
    if (flag == "--enforce-eager") {
      f.engine.enforce_eager = true;
      continue;
    }
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(flag + ": missing value");
    const std::string& v = args[++i];
    int64_t n = 0;
    if (flag == "--handshake-address") {
      f.proc.handshake_address = v;
      have_address = true;
    } else if (flag == "--parent-pid") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, int64_t{1} << 40, &f.parent_pid));
    } else if (flag == "--model") {
      f.engine.model = v;
      have_model = true;
    } else if (flag == "--engine-index") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 0, 1 << 16, &n));
      f.proc.engine_index = f.engine.engine_index = static_cast<int32_t>(n);
    } else if (flag == "--tensor-parallel-size") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, 64, &n));
      f.engine.tensor_parallel_size = static_cast<int32_t>(n);
    } else if (flag == "--load-format") {
      VLLM_ASSIGN_OR_RETURN(f.engine.load_format, worker::ParseLoadFormat(v));
    } else if (flag == "--max-model-len") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, 1 << 24, &n));
      f.engine.max_model_len = static_cast<int32_t>(n);
    } else if (flag == "--max-num-seqs") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, 1 << 20, &n));
      f.engine.max_num_seqs = static_cast<int32_t>(n);
    } else if (flag == "--max-num-batched-tokens") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, 1 << 24, &n));
      f.engine.max_num_batched_tokens = static_cast<int32_t>(n);
    } else if (flag == "--block-size") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, 1024, &n));
      f.engine.block_size = static_cast<int32_t>(n);
    } else if (flag == "--kv-cache-memory") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, int64_t{1} << 50, &f.engine.kv_cache_memory_bytes));
    } else if (flag == "--seed") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 0, std::numeric_limits<int64_t>::max(), &n));
      f.engine.seed = static_cast<uint64_t>(n);
    } else if (flag == "--device") {
      VLLM_ASSIGN_OR_RETURN(f.engine.device, worker::ParseDevice(v));
    } else if (flag == "--dtype") {
      VLLM_ASSIGN_OR_RETURN(f.engine.dtype, worker::ParseModelDType(v));
    } else if (flag == "--gpu-memory-utilization") {
      if (!absl::SimpleAtod(v, &f.engine.gpu_memory_utilization) ||
          !(f.engine.gpu_memory_utilization > 0.0 && f.engine.gpu_memory_utilization <= 1.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": expected a fraction in (0, 1], got '", v, "'"));
      }
    } else if (flag == "--comm-backend") {
      f.engine.comm_backend = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
  }
  if (!have_model || !have_address || f.parent_pid == 0) {
    return absl::InvalidArgumentError(
        "engine-core needs --model, --handshake-address and --parent-pid");
  }
  return f;
}

}  // namespace

int RunEngineCore(const std::vector<std::string>& args) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("engine-core"));
  absl::StatusOr<Flags> flags = Parse(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "vllm-launch engine-core: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != flags->parent_pid) return 1;  // the parent died before we could watch it
  signal(SIGINT, SIG_IGN);  // Ctrl-C reaches the whole group; the parent stops us

  frontend::EngineArgs engine_args = flags->engine;
  core::EngineCoreProcOptions options = flags->proc;
  options.make_engine = [engine_args]() -> absl::StatusOr<std::unique_ptr<core::EngineCore>> {
    VLLM_ASSIGN_OR_RETURN(frontend::BuiltEngine built, frontend::BuildEngineCore(engine_args));
    return std::move(built.core);
  };
  core::EngineCoreProc proc(std::move(options));
  auto watcher = ipc::SignalWatcher::Start({SIGTERM}, [&proc](int) { proc.Stop(); });
  if (!watcher.ok()) {
    spdlog::error("engine core: {}", watcher.status().ToString());
    return 1;
  }
  const absl::Status status = proc.Run();
  if (!status.ok()) {
    spdlog::error("engine core stopped: {}", status.ToString());
    return 1;
  }
  return 0;
}

}  // namespace vllm::launcher
