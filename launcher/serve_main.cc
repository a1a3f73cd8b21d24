#include "launcher/serve_main.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/config_codec.h"
#include "launcher/api_server_control.h"
#include "launcher/api_server_manager.h"
#include "launcher/headless.h"
#include "launcher/serve.h"
#include "launcher/serve_args.h"
#include "launcher/serve_env.h"
#include "launcher/spec/api_server_spec.h"
#include "launcher/spec/frames.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {
namespace {

// vLLM's set_ulimit: raise the soft open-file limit towards 65535 (within the hard limit), so
// the default --max-connections is not the distribution's 1024.
void RaiseOpenFileLimit() {
  constexpr rlim_t kTarget = 65535;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= kTarget) return;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? kTarget : std::min(kTarget, limit.rlim_max);
  if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    spdlog::warn("could not raise the open-file limit from {} to {}: {}", limit.rlim_cur,
                 raised.rlim_cur, strerror(errno));
  }
}

}  // namespace

int RunServe(const std::vector<std::string>& argv) {
  // stdout carries only the ready line (scripts wait for it); logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vllm-launch"));
  ConfigureLoggingFromEnv();
  auto parsed = ParseServeArgs(argv, VLLM_DEFAULT_MODEL);
  if (!parsed.ok()) {
    std::fprintf(stderr, "vllm-launch: error: %s\n(see vllm-launch --help)\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!parsed->args.has_value()) {
    std::fputs(parsed->text.c_str(), stdout);
    return parsed->exit_code;
  }
  // vLLM's environment variables: refused ones stop here, honoured ones apply to the flags, and
  // one warning names the ignored and unknown ones.
  if (absl::Status s = ApplyVllmEnvAtStartup(*parsed->args); !s.ok()) {
    std::fprintf(stderr, "vllm-launch: error: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  RaiseOpenFileLimit();
  const ServeArgs& args = *parsed->args;
  absl::Status s = args.headless               ? ServeHeadless(args)
                   : args.api_server_count > 1 ? ServeApiServers(args)
                                               : Serve(args);
  if (!s.ok()) {
    std::fprintf(stderr, "vllm-launch: error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

int RunApiServer(const std::vector<std::string>& argv) {
  // argv: --api-server-index I --parent-pid P; the rest is the spec on descriptor 3.
  int32_t index = -1;
  int64_t parent = 0;
  for (size_t i = 0; i + 1 < argv.size(); i += 2) {
    if (argv[i] == "--api-server-index") (void)absl::SimpleAtoi(argv[i + 1], &index);
    if (argv[i] == "--parent-pid") (void)absl::SimpleAtoi(argv[i + 1], &parent);
  }
  if (index < 0 || parent <= 0 || argv.size() != 4) {
    std::fprintf(stderr, "vllm-launch %s: internal: started by vllm-launch --api-server-count N\n",
                 kApiServerSubcommand);
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt(absl::StrCat("api-server-", index)));
  ConfigureLoggingFromEnv();
  // Ends with the launcher (and not at all if it is already gone).
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 1;
  const absl::StatusOr<std::string> frame = ReadOneFrame(config::kConfigFd, absl::Seconds(30));
  absl::StatusOr<ApiServerSpec> spec =
      frame.ok() ? DecodeApiServerSpec(*frame) : absl::StatusOr<ApiServerSpec>(frame.status());
  if (spec.ok() && spec->index != index) {
    spec = absl::InvalidArgumentError("the spec is not this API server's");
  }
  if (!spec.ok()) {
    std::fprintf(stderr, "vllm-launch api-server %d: error: descriptor 3: %s\n", index,
                 spec.status().ToString().c_str());
    return 2;
  }
  RaiseOpenFileLimit();
  ApiServerRole role;
  role.index = index;
  role.count = spec->count;
  role.control_fd = config::kConfigFd;
  role.coordinator = spec->coordinator;
  if (absl::Status s = Serve(ServeArgsFromSpec(*spec), role); !s.ok()) {
    std::fprintf(stderr, "vllm-launch api-server %d: error: %s\n", index, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace vllm::launcher
