// `vllm-launch router [flags]`: flag parsing and the entry point. Flag names follow
// sglang-router (kv_aware's: vllm-router; P/D's: both, --vllm-pd-disaggregation being
// vllm-router's name for --pd-disaggregation); `vllm-launch router --help` lists them with
// their defaults. Each flag sets the RouterOptions field of the same name (router.h), except
// the circuit breaker's *-secs flags (CircuitBreakerOptions durations),
// --disable-circuit-breaker, and --prefill URL [BOOTSTRAP_PORT] (prefill_urls).
#ifndef VLLM_ROUTER_ROUTER_MAIN_H_
#define VLLM_ROUTER_ROUTER_MAIN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "router/router.h"

namespace vllm::router {

constexpr char kRouterSubcommand[] = "router";

// What the command line asks for: options to run with, or a text to print (--help).
struct ParsedRouterArgs {
  RouterOptions options;
  std::string text;  // non-empty: print it and exit 0
};

// Parses the flags after `vllm-launch router`. InvalidArgument with CLI11's message on a bad
// flag or value, or CheckPdOptions's on P/D flags that do not fit together.
absl::StatusOr<ParsedRouterArgs> ParseRouterArgs(const std::vector<std::string>& argv);

// Runs the router until SIGINT/SIGTERM. Prints "vllm-launch router: ready at http://HOST:PORT"
// on stdout once it serves. Returns the process exit code (0, 1 on failure, 2 on bad flags).
int RunRouter(const std::vector<std::string>& argv);

}  // namespace vllm::router

#endif  // VLLM_ROUTER_ROUTER_MAIN_H_
