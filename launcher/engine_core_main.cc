#include "launcher/engine_core_main.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "core/engine_core_proc.h"
#include "core/engine_handshake.h"
#include "executor/engine_factory.h"
#include "ipc/curve.h"
#include "ipc/signal_watcher.h"
#include "launcher/serve_args.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {
namespace {

struct Flags {
  core::EngineCoreProcOptions proc;
  config::VllmConfig config;
  executor::EngineRuntimeOptions runtime;
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
  bool have_address = false;
  int64_t config_fd = -1;
  int32_t engine_index = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(flag + ": missing value");
    const std::string& v = args[++i];
    if (flag == "--handshake-address") {
      // Repeated with --api-server-count N: the first is API server 0's.
      if (!have_address) {
        f.proc.handshake_address = v;
      } else if (f.proc.extra_handshake_addresses.size() + 1 < core::kMaxFrontends) {
        f.proc.extra_handshake_addresses.push_back(v);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--handshake-address: more than ", core::kMaxFrontends));
      }
      have_address = true;
    } else if (flag == "--engine-index") {
      // Its index at its API servers when that is not its rank (hybrid / external load
      // balancing: an API server knows only its node's engines, as 0 ..).
      int64_t index = 0;
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 0, 1023, &index));
      engine_index = static_cast<int32_t>(index);
    } else if (flag == "--parent-pid") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 1, int64_t{1} << 40, &f.parent_pid));
    } else if (flag == "--config-fd") {
      VLLM_RETURN_IF_ERROR(ParseInt(flag, v, 0, 1 << 20, &config_fd));
    } else if (flag == "--cluster-key-file") {
      VLLM_ASSIGN_OR_RETURN(f.proc.curve, ipc::LoadCurveKeyFile(v));
      f.runtime.cluster_key_file = v;  // the executor's sockets to other nodes (--nnodes)
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
  }
  if (!have_address || f.parent_pid == 0 || config_fd < 0) {
    return absl::InvalidArgumentError(
        "engine-core needs --handshake-address, --parent-pid and --config-fd");
  }
  VLLM_ASSIGN_OR_RETURN(f.config, config::ReadVllmConfigFd(static_cast<int>(config_fd)));
  f.proc.engine_index = engine_index >= 0 ? engine_index : f.config.parallel.data_parallel_rank;
  f.proc.data_parallel_size = f.config.parallel.data_parallel_size;
  VLLM_ASSIGN_OR_RETURN(f.proc.handshake_timeout, EngineReadyTimeout());
  VLLM_ASSIGN_OR_RETURN(f.runtime.node_heartbeat_timeout, EngineHeartbeatTimeout());
  // The key secures the sockets that cross nodes: the head's (over TCP) and the executor's
  // (--nnodes); a head on this node talks ipc:// without CURVE.
  if (!absl::StartsWith(f.proc.handshake_address, "tcp://")) f.proc.curve.reset();
  if (absl::StartsWith(f.proc.handshake_address, "tcp://")) {
    // Another node's head: its silence (heartbeats every second) means it is gone.
    VLLM_ASSIGN_OR_RETURN(f.proc.frontend_timeout, EngineHeartbeatTimeout());
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
  if (flags->config.parallel.data_parallel_size > 1) {
    // Which replica a line comes from (vLLM names its processes EngineCore_DP<rank>).
    spdlog::set_default_logger(spdlog::stderr_color_mt(
        absl::StrCat("engine-core-dp", flags->config.parallel.data_parallel_rank)));
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != flags->parent_pid) return 1;  // the parent died before we could watch it
  signal(SIGINT, SIG_IGN);  // Ctrl-C reaches the whole group; the parent stops us

  const config::VllmConfig config = flags->config;
  core::EngineCoreProcOptions options = flags->proc;
  if (config.kv_events.enable && !config.cache.enable_prefix_caching) {
    // vLLM's warning; the block pool then registers no blocks, so only resets are published.
    spdlog::warn(
        "KV cache events are on, but prefix caching is not enabled. Use --enable-prefix-caching "
        "to enable.");
  }
  const executor::EngineRuntimeOptions runtime = flags->runtime;
  options.make_engine = [config, runtime]() -> absl::StatusOr<std::unique_ptr<core::EngineCore>> {
    VLLM_ASSIGN_OR_RETURN(executor::BuiltEngine built, executor::BuildEngineCore(config, runtime));
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
    switch (core::HeadLossOf(status)) {
      case core::HeadLoss::kSilent:
        return kEngineExitHeadSilent;
      case core::HeadLoss::kUnanswered:
        return kEngineExitHeadUnanswered;
      case core::HeadLoss::kNone:
        return 1;
    }
  }
  return 0;
}

}  // namespace vllm::launcher
