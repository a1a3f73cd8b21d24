// The load generator of `vllm-launch bench serve`: sends the benchmark's requests to an
// OpenAI-compatible HTTP/1.1 server on one Boost.Asio io_context (callbacks, no thread per
// request, keep-alive connections reused), at vLLM's arrival process (Poisson or gamma
// intervals) under an optional concurrency limit, and records what each request produced.
#ifndef VLLM_BENCH_SERVE_CLIENT_H_
#define VLLM_BENCH_SERVE_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/dataset.h"
#include "bench/serve/metrics.h"
#include "bench/serve/protocol.h"

namespace vllm::bench_serve {

// vLLM's --ramp-up-strategy: the rate of request i goes from start_rps to end_rps over the
// run, linearly or exponentially. Empty strategy: the fixed --request-rate.
struct RampUp {
  std::string strategy;
  int start_rps = 0;
  int end_rps = 0;
};

// Where and how to send the requests.
struct LoadOptions {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  // HTTP target of every request, e.g. "/v1/completions".
  std::string path = "/v1/completions";
  BenchBackend backend = BenchBackend::kOpenAICompletions;
  RequestSettings settings;
  // Requests per second; +inf sends them all at once.
  double request_rate = std::numeric_limits<double>::infinity();
  // Gamma shape of the intervals (1 = Poisson process).
  double burstiness = 1.0;
  // At most this many requests in flight; none = unlimited.
  std::optional<int> max_concurrency;
  RampUp ramp_up;
  uint64_t seed = 0;
  // Draw a progress bar on stderr.
  bool show_progress = true;
  // Limit on each network operation (connect, write, every read); vLLM allows 6 hours.
  std::chrono::milliseconds request_timeout = std::chrono::hours(6);
  // vLLM's --header KEY=VALUE pairs: set on every request after the standard fields (so they
  // override them), before x-request-id.
  std::vector<std::pair<std::string, std::string>> headers;
  // vLLM's --request-id-prefix: request i is sent with `x-request-id: {prefix}{i}`; none: no
  // such header (vLLM's prefix_repetition requests and its test request carry no id).
  std::optional<std::string> request_id_prefix;
};

// What a run produced: one output per request, in dataset order, and the wall time from the
// first request to the last completion.
struct LoadResult {
  std::vector<RequestOutput> outputs;
  double duration_s = 0.0;
};

// Start offsets (seconds from the start of the run) of `n` requests, as vLLM's get_request():
// request i waits an interval drawn from Gamma(shape = burstiness, scale = 1 / (rate_i *
// burstiness)) after request i-1 (the first after the start; a constant 1/rate_i at infinite
// burstiness; 0 at an infinite rate), where rate_i is `request_rate` or the ramp-up's rate;
// without a ramp-up the offsets are then scaled so that the last is n / request_rate.
// Deterministic in `seed`.
std::vector<double> ArrivalOffsets(size_t n, double request_rate, double burstiness, uint64_t seed,
                                   const RampUp& ramp_up = {});

// Sends every request and waits for all of them. Never fails as a whole: a request that
// cannot connect, gets a non-200 status, times out or streams malformed data is recorded as a
// failed RequestOutput with its error. Blocks the calling thread; uses no other thread.
LoadResult RunLoad(const LoadOptions& options, const std::vector<SampleRequest>& requests);

// GET /v1/models and returns data[0].id, as vLLM does when --model is not given. Fails with
// Unavailable when the server cannot be reached or answers non-200, InvalidArgument when the
// answer lists no model, DeadlineExceeded after `timeout`.
[[nodiscard]] absl::StatusOr<std::string> FetchFirstModelId(const std::string& host,
                                                            const std::string& port,
                                                            std::chrono::milliseconds timeout);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_CLIENT_H_
