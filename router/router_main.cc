#include "router/router_main.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vllm::router {
namespace {

// The policies MakePolicy knows (policy.h).
constexpr char kPolicyNames[][16] = {"round_robin", "random",          "power_of_two",
                                     "cache_aware", "consistent_hash", "kv_aware"};

std::vector<std::string> PolicyNames() {
  return std::vector<std::string>(std::begin(kPolicyNames), std::end(kPolicyNames));
}

// The circuit breaker's flags in seconds, converted to CircuitBreakerOptions after parsing.
struct CircuitBreakerFlags {
  double timeout = 60;
  double window = 120;
  double max_timeout = 600;
  bool disabled = false;
};

// The workers, the listening address and the policy.
void AddServerFlags(CLI::App& app, RouterOptions& o) {
  app.add_option("--worker-urls", o.worker_urls,
                 "The workers, as http://HOST:PORT (more may be added with POST /workers).");
  app.add_option("--host", o.host, "The address to listen on.")->capture_default_str();
  app.add_option("--port", o.port, "The port to listen on (0: any free port).")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--policy", o.policy,
                 "The routing policy (--pd-disaggregation: both sides' unless --prefill-policy or "
                 "--decode-policy say otherwise).")
      ->check(CLI::IsMember(PolicyNames()))
      ->capture_default_str();
}

// cache_aware's thresholds and tree bound.
void AddPolicyFlags(CLI::App& app, PolicyOptions& p) {
  app.add_option("--cache-threshold", p.cache_threshold,
                 "cache_aware: the least match length / prompt length that follows a match.")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--balance-abs-threshold", p.balance_abs_threshold,
                 "cache_aware: load is balanced while max - min outstanding <= this.")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--balance-rel-threshold", p.balance_rel_threshold,
                 "cache_aware: load is balanced while max <= min * this.")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-tree-size", p.max_tree_size,
                 "cache_aware: bytes of prompt text kept per worker (LRU eviction beyond).")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// Health checks, timeouts, retries and the payload bound.
void AddUpstreamFlags(CLI::App& app, RouterOptions& o) {
  app.add_option("--health-check-interval-secs", o.health_check_interval_secs,
                 "Seconds between GET /health checks of each worker.")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  app.add_option("--health-check-timeout-secs", o.health_check_timeout_secs,
                 "Seconds a health check may take.")
      ->check(CLI::Range(0.01, 86400.0))
      ->capture_default_str();
  app.add_option("--health-failure-threshold", o.health_failure_threshold,
                 "Consecutive failed checks (or connection failures) that eject a worker.")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--request-timeout-secs", o.request_timeout_secs,
                 "Seconds to wait for a worker (connect, response head, each body read).")
      ->check(CLI::Range(0.01, 604800.0))
      ->capture_default_str();
  app.add_option("--max-retries", o.max_retries,
                 "Other workers tried when one fails before any byte reached the client.")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--max-payload-size", o.max_payload_size,
                 "The largest request body in bytes (larger: 413).")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// The per-worker circuit breakers.
void AddCircuitBreakerFlags(CLI::App& app, CircuitBreakerOptions& cb, CircuitBreakerFlags* secs) {
  app.add_option("--cb-failure-threshold", cb.failure_threshold,
                 "Failed requests (connection errors, no answer, 5xx) within the window that "
                 "open a worker's circuit breaker (no requests to it for a while).")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--cb-success-threshold", cb.success_threshold,
                 "Successful requests in half-open state that close the circuit.")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--cb-timeout-duration-secs", secs->timeout,
                 "Seconds an opened circuit keeps requests away (doubled after each failure in "
                 "half-open state, up to --cb-max-timeout-duration-secs).")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--cb-window-duration-secs", secs->window,
                 "The window in seconds over which failures are counted.")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--cb-max-timeout-duration-secs", secs->max_timeout,
                 "The longest open period the backoff reaches.")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_flag("--disable-circuit-breaker", secs->disabled, "No circuit breakers.");
}

// P/D disaggregation's flags (vllm-router's and sglang-router's names), as parsed; turned
// into RouterOptions by ApplyPdFlags.
struct PdFlags {
  std::vector<std::vector<std::string>> prefill;  // each: URL [BOOTSTRAP_PORT]
};

void AddPdFlags(CLI::App& app, RouterOptions& o, PdFlags* pd) {
  app.add_flag("--pd-disaggregation,--vllm-pd-disaggregation", o.pd_disaggregation,
               "Prefill/decode disaggregation (docs/PD.md): each completion goes to a prefill "
               "worker (one token, kv_transfer_params do_remote_decode), then with the prefill's "
               "kv_transfer_params to a decode worker, whose answer the client gets. The workers "
               "are --prefill and --decode (not --worker-urls).");
  app.add_option("--prefill", pd->prefill,
                 "--pd-disaggregation: a prefill worker, as http://HOST:PORT [BOOTSTRAP_PORT]; "
                 "repeat per worker. BOOTSTRAP_PORT (a port or 'none') is sglang's: accepted, "
                 "shown by /workers, unused (NixlConnector passes the prefill's address in "
                 "kv_transfer_params).")
      ->expected(1, 2);
  app.add_option("--decode", o.decode_urls,
                 "--pd-disaggregation: a decode worker, as http://HOST:PORT; repeat per worker.");
  app.add_option("--prefill-policy", o.prefill_policy,
                 "--pd-disaggregation: the prefill side's policy (default: --policy).")
      ->check(CLI::IsMember(PolicyNames()));
  app.add_option("--decode-policy", o.decode_policy,
                 "--pd-disaggregation: the decode side's policy (default: --policy).")
      ->check(CLI::IsMember(PolicyNames()));
}

// --prefill's URL [BOOTSTRAP_PORT] groups into RouterOptions::prefill_urls.
absl::Status ApplyPdFlags(const PdFlags& pd, RouterOptions& o) {
  for (const std::vector<std::string>& group : pd.prefill) {
    if (group.empty() || group.size() > 2) {
      return absl::InvalidArgumentError("--prefill takes URL [BOOTSTRAP_PORT]");
    }
    PrefillUrl p{group[0], std::nullopt};
    if (group.size() == 2 && !absl::EqualsIgnoreCase(group[1], "none")) {
      int port = 0;
      if (!absl::SimpleAtoi(group[1], &port) || port < 1 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat("--prefill ", group[0], " ", group[1],
                                                       ": the bootstrap port is a port or 'none'"));
      }
      p.bootstrap_port = port;
    }
    o.prefill_urls.push_back(std::move(p));
  }
  return CheckPdOptions(o);
}

// kv_aware's event sources and tokenizer.
void AddKvAwareFlags(CLI::App& app, RouterOptions& o) {
  app.add_option("--kv-event-source", o.kv_event_sources,
                 "kv_aware: WORKER_URL=ENDPOINT[,ENDPOINT...], the ZMQ endpoints where the "
                 "worker's engines (in data-parallel rank order) publish KV-cache events "
                 "(their --kv-events-config); repeat per worker.")
      ->take_all();
  app.add_option("--kv-event-block-size", o.policy_options.kv.default_block_size,
                 "kv_aware: the workers' KV block size until their events tell it.")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--model-path", o.model_path,
                 "kv_aware: the workers' model directory (its tokenizer.json and "
                 "tokenizer_config.json tokenize prompts as the workers do).");
  app.add_option("--tokenizer-path", o.tokenizer_path,
                 "kv_aware: a directory with tokenizer.json (wins over --model-path).");
  app.add_option("--chat-template", o.chat_template,
                 "kv_aware: a chat template file, if the workers use one other than "
                 "tokenizer_config.json's.");
}

}  // namespace

absl::StatusOr<ParsedRouterArgs> ParseRouterArgs(const std::vector<std::string>& argv) {
  ParsedRouterArgs parsed;
  RouterOptions& o = parsed.options;
  CLI::App app("Route OpenAI-API requests over several OpenAI-compatible servers.",
               "vllm-launch router");
  AddServerFlags(app, o);
  AddPolicyFlags(app, o.policy_options);
  AddUpstreamFlags(app, o);
  CircuitBreakerFlags cb_secs;
  AddCircuitBreakerFlags(app, o.circuit_breaker, &cb_secs);
  AddKvAwareFlags(app, o);
  PdFlags pd;
  AddPdFlags(app, o, &pd);
  app.add_option("--shutdown-grace-period-secs", o.shutdown_grace_period_secs,
                 "On SIGINT/SIGTERM, seconds the requests in flight get to finish.")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  std::vector<std::string> args = argv;
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    parsed.text = app.help();
    return parsed;
  } catch (const CLI::ParseError& err) {
    return absl::InvalidArgumentError(err.what());
  }
  auto millis = [](double secs) {
    return std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  };
  CircuitBreakerOptions& cb = o.circuit_breaker;
  cb.enabled = !cb_secs.disabled;
  cb.timeout = millis(cb_secs.timeout);
  cb.window = millis(cb_secs.window);
  cb.max_timeout = millis(cb_secs.max_timeout);
  if (absl::Status s = ApplyPdFlags(pd, o); !s.ok()) return s;
  return parsed;
}

int RunRouter(const std::vector<std::string>& argv) {
  auto parsed = ParseRouterArgs(argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "vllm-launch router: %s\n",
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!parsed->text.empty()) {
    std::fputs(parsed->text.c_str(), stdout);
    return 0;
  }
  auto router = Router::Create(parsed->options);
  if (!router.ok()) {
    std::fprintf(stderr, "vllm-launch router: %s\n", router.status().ToString().c_str());
    return 1;
  }
  Router& r = **router;
  const std::string host = parsed->options.host;
  absl::Status status = r.Run([&r, &host] {
    std::printf("vllm-launch router: ready at http://%s:%d\n", host.c_str(), r.port());
    std::fflush(stdout);
  });
  if (!status.ok()) {
    std::fprintf(stderr, "vllm-launch router: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace vllm::router
