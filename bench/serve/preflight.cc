#include "bench/serve/preflight.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

namespace vllm::bench_serve {
namespace {

// The test and warm-up requests: all at once, no ramp-up, no progress bar, no request id.
LoadOptions PreflightOptions(const LoadOptions& load) {
  LoadOptions options = load;
  options.request_rate = std::numeric_limits<double>::infinity();
  options.ramp_up = RampUp{};
  options.show_progress = false;
  options.request_id_prefix.reset();
  return options;
}

}  // namespace

RequestOutput WaitForEndpoint(const LoadOptions& load, const SampleRequest& request,
                              double timeout_s) {
  using Clock = std::chrono::steady_clock;
  constexpr double kRetryIntervalS = 5.0;
  const LoadOptions options = PreflightOptions(load);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(timeout_s, 0.0)));
  RequestOutput output;
  output.error = "the endpoint was not tried";
  while (true) {
    const double remaining = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (remaining <= 0) break;
    LoadResult result = RunLoad(options, {request});
    output = std::move(result.outputs.front());
    if (output.success) break;
    // A wait between attempts (vLLM's retry_interval), not a synchronisation.
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    const double pause = std::min(kRetryIntervalS, left);
    if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
  return output;
}

int RunWarmups(const LoadOptions& load, const SampleRequest& request, int count) {
  if (count <= 0) return 0;
  const std::vector<SampleRequest> copies(static_cast<size_t>(count), request);
  const LoadResult result = RunLoad(PreflightOptions(load), copies);
  return static_cast<int>(
      std::count_if(result.outputs.begin(), result.outputs.end(),
                    [](const RequestOutput& output) { return output.success; }));
}

}  // namespace vllm::bench_serve
