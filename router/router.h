// The router: an HTTP server that spreads OpenAI-API requests over several OpenAI-compatible
// servers ("workers": vllm-launch or vLLM servers) with a routing policy (policy.h), checks
// their health, retries a request on another worker when one fails before the client got any
// byte, and streams responses (SSE) through chunk by chunk as they arrive.
//
// Threading: one thread runs the io_context (Run) and owns every piece of state: the worker
// list, the policy, the counters; each client connection is a coroutine on it. Only Stop() may
// be called from another thread.
//
// Upstream connections: keep-alive, pooled per worker; closing one is how a client's
// disconnect reaches the worker, which aborts the request.
//
// Endpoints:
// - POST /v1/completions, POST /v1/chat/completions: proxied to the policy's worker. The body
//   must be a JSON object (else 400); the router reads only the routing text (ExtractRoutingKeys)
//   and the session key (the X-Session-Id header, else the `user` string); kv_aware also the
//   prompt's tokens (TokenizeRequestBody). Bodies over max_payload_size: 413. Responses are
//   relayed as they arrive (chunked to HTTP/1.1 clients; X-Router-Worker names the worker).
// - GET /v1/models, POST /tokenize, POST /detokenize: proxied to a healthy worker (one without
//   the endpoint answers its own 404).
// - GET /health: 200 while at least one worker is healthy and no drain runs, else 503.
// - GET /metrics: the router's Prometheus text (metrics.h).
// - GET / POST / DELETE /workers: the worker list, add, remove (admin.h).
// - The router's own errors use the OpenAI shape {"error": {"message", "type", "code"}}.
//
// P/D disaggregation (RouterOptions::pd_disaggregation; docs/PD.md): the workers are prefill
// and decode instances, each side with its own policy. A completion goes first to a prefill
// instance (pd_request.h's PrefillRequest: one token, not streamed, do_remote_decode), then,
// with the kv_transfer_params the prefill answered, to a decode instance, whose answer the
// client gets. Other proxied endpoints go to the decode side; /health needs a healthy worker
// on each side.
#ifndef VLLM_ROUTER_ROUTER_H_
#define VLLM_ROUTER_ROUTER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "frontend/jinja/chat_template.h"
#include "frontend/tokenizer/tokenizer.h"
#include "router/circuit_breaker.h"
#include "router/policy.h"

namespace vllm::router {

// A prefill instance of P/D disaggregation, as `--prefill URL [BOOTSTRAP_PORT]` gives it. The
// bootstrap port is sglang's (its decode side fetches the prefill's KV address from it); it is
// recorded and listed by /workers, and unused: vLLM's NixlConnector sends the address in the
// prefill's kv_transfer_params.
struct PrefillUrl {
  std::string url;
  std::optional<int> bootstrap_port;
};

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see Router::port())
  std::vector<std::string> worker_urls;
  std::string policy = "cache_aware";  // P/D: both sides' unless prefill_/decode_policy say
  // P/D disaggregation: prefill_urls and decode_urls instead of worker_urls (which must then
  // be empty); a URL is on one side only. An empty side policy means `policy`.
  bool pd_disaggregation = false;
  std::vector<PrefillUrl> prefill_urls;
  std::vector<std::string> decode_urls;
  std::string prefill_policy;
  std::string decode_policy;
  PolicyOptions policy_options;
  double health_check_interval_secs = 5;
  double health_check_timeout_secs = 5;
  int health_failure_threshold = 3;    // consecutive failed checks that eject a worker
  double request_timeout_secs = 1800;  // per upstream wait (connect, head, each body read)
  int max_retries = 2;                 // further workers tried after a failure before any byte
  size_t max_payload_size = size_t{32} << 20;  // request bodies above it: 413
  CircuitBreakerOptions circuit_breaker;       // per worker, on requests' outcomes
  // SIGINT/SIGTERM: requests in flight get this long to finish (a second signal: at once).
  double shutdown_grace_period_secs = 180;
  // kv_aware: the workers' engines' KV-event endpoints ("WORKER_URL=ENDPOINT[,ENDPOINT...]",
  // kv_event_subscriber.h), and the tokenizer the workers use: a directory with tokenizer.json
  // (and tokenizer_config.json for the chat template), tokenizer_path winning over model_path;
  // chat_template: a file overriding tokenizer_config.json's template.
  std::vector<std::string> kv_event_sources;
  std::string model_path;
  std::string tokenizer_path;
  std::string chat_template;
};

// P/D's rules on `options` (no-op unless pd_disaggregation): at least one prefill and one
// decode URL, no --worker-urls, no URL on both sides, policies that MakePolicy knows; and
// without pd_disaggregation no prefill or decode URL or side policy. InvalidArgument naming
// the flags otherwise. Router::Create checks it; ParseRouterArgs too.
absl::Status CheckPdOptions(const RouterOptions& options);

// A worker's address, from "http://host[:port][/]". InvalidArgument otherwise.
struct WorkerAddress {
  std::string url;  // normalised: "http://host:port"
  std::string host;
  std::string port;
};
absl::StatusOr<WorkerAddress> ParseWorkerUrl(absl::string_view url);

// The routing text of a request body (see README.md): the prompt of a completion (the first
// prompt of a batch; token ids as decimal text), the role and content of every chat message.
// `user` (a string) goes to *user; what is absent is empty. False when `body` is not a JSON
// object. One pass without a JSON document (request_keys.cc): memory speed on long prompts.
bool ExtractRoutingKeys(const std::string& body, std::string* text, std::string* user);

// The prompt token ids a worker using `tokenizer` computes for a request body: a completion's
// prompt (text, token ids, or the first of a batch) tokenized with special tokens; a chat
// request's messages rendered by `chat_template` (nullptr: none) as the API server does (its
// tools, chat_template_kwargs and prompt flags included: frontend/jinja/chat_template_input.h),
// then tokenized without special tokens (both unless the body's add_special_tokens says
// otherwise).
// nullopt when the body cannot be tokenized (not JSON, no prompt, no template, a render error): the
// router then routes it without tokens.
std::optional<std::vector<int32_t>> TokenizeRequestBody(const frontend::Tokenizer& tokenizer,
                                                        const frontend::ChatTemplate* chat_template,
                                                        const std::string& body, bool chat);

class Router {
 public:
  // Validates `options`, makes the policy and binds the listening socket (so port() is known).
  static absl::StatusOr<std::unique_ptr<Router>> Create(const RouterOptions& options);
  ~Router();

  int port() const;
  // Serves until Stop() or SIGINT/SIGTERM. Runs one round of health checks first, then calls
  // `on_ready` (on this thread). A first SIGINT/SIGTERM drains: no new connections, idle ones
  // closed, /health 503, the requests in flight finish (at most shutdown_grace_period_secs);
  // a second one stops at once. Returns OK after a stop.
  absl::Status Run(const std::function<void()>& on_ready);
  // Stops Run() at once (no drain). Thread-safe.
  void Stop();

  class Impl;

 private:
  explicit Router(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_ROUTER_H_
