// What `vllm bench serve` sends before the measured run: the initial test request
// (--ready-check-timeout-sec) and the warm-up requests (--num-warmups), both copies of the
// dataset's first request. Blocking; uses RunLoad's single io_context thread.
#ifndef VLLM_BENCH_SERVE_PREFLIGHT_H_
#define VLLM_BENCH_SERVE_PREFLIGHT_H_

#include "bench/serve/client.h"
#include "bench/serve/dataset.h"
#include "bench/serve/metrics.h"

namespace vllm::bench_serve {

// vLLM's wait_for_endpoint: sends `request` (without x-request-id) until one succeeds,
// waiting min(5 s, time left) after each failure, for at most `timeout_s` seconds. Returns the
// last output (success false when the endpoint never answered in time).
RequestOutput WaitForEndpoint(const LoadOptions& load, const SampleRequest& request,
                              double timeout_s);

// vLLM's warm-up: `count` copies of `request` sent at once (under --max-concurrency, without
// x-request-id); their results are discarded. Returns how many succeeded.
int RunWarmups(const LoadOptions& load, const SampleRequest& request, int count);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_PREFLIGHT_H_
