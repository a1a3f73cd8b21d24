// StructuredOutputStats: the grammar counters of one engine over an interval, which the
// StructuredOutputManager keeps, the engine core sends with its scheduler stats and the API
// server exports on /metrics (vllm:structured_output_*; vLLM 0.33 has no such metrics).
//
// Thread-safety: a plain value.
#ifndef VLLM_STRUCTURED_OUTPUT_STATS_H_
#define VLLM_STRUCTURED_OUTPUT_STATS_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace vllm::structured_output {

// Upper bounds (seconds) of the compile-time histogram's buckets, ascending; +Inf is implied.
// From a cached-schema-sized compile (milliseconds) to --max-structured-output-compile-seconds'
// default (30 s) and beyond.
inline constexpr std::array<double, 15> kCompileSecondsBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};

struct StructuredOutputStats {
  // Requests whose grammar was in the compile cache (compiled, or compiling for an earlier
  // request) / that started a compile. Their sum is the number of cache queries.
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  // Requests failed because their grammar did not compile / took longer than
  // --max-structured-output-compile-seconds.
  int64_t compile_failures = 0;
  int64_t compile_timeouts = 0;
  // The wall time of each compile that finished: how many fell in each bucket of
  // kCompileSecondsBuckets (value <= bound; the last entry: above every bound), and their sum.
  std::array<int64_t, kCompileSecondsBuckets.size() + 1> compile_seconds_counts{};
  double compile_seconds_sum = 0.0;

  void ObserveCompileSeconds(double seconds) {
    const size_t bucket = static_cast<size_t>(
        std::lower_bound(kCompileSecondsBuckets.begin(), kCompileSecondsBuckets.end(), seconds) -
        kCompileSecondsBuckets.begin());
    ++compile_seconds_counts[bucket];
    compile_seconds_sum += seconds;
  }
  // Compiles observed.
  int64_t num_compiles() const {
    int64_t n = 0;
    for (int64_t c : compile_seconds_counts) n += c;
    return n;
  }
  StructuredOutputStats& operator+=(const StructuredOutputStats& o) {
    cache_hits += o.cache_hits;
    cache_misses += o.cache_misses;
    compile_failures += o.compile_failures;
    compile_timeouts += o.compile_timeouts;
    for (size_t i = 0; i < compile_seconds_counts.size(); ++i) {
      compile_seconds_counts[i] += o.compile_seconds_counts[i];
    }
    compile_seconds_sum += o.compile_seconds_sum;
    return *this;
  }
  friend bool operator==(const StructuredOutputStats&, const StructuredOutputStats&) = default;
};

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_STATS_H_
