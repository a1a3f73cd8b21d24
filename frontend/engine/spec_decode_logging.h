// The speculative-decoding line of the periodic stats log (vLLM's SpecDecodingLogging,
// vllm/v1/spec_decode/metrics.py): every interval in which an engine verified drafts, its
// mean acceptance length, accepted and drafted throughput, totals, per-position acceptance
// rates and draft acceptance rate, in vLLM's words.
//
// Thread-safety: FormatSpecDecodingLine is pure; a SpecDecodingLogging is not thread-safe
// (AsyncLLM's output thread owns them).
#ifndef VLLM_FRONTEND_ENGINE_SPEC_DECODE_LOGGING_H_
#define VLLM_FRONTEND_ENGINE_SPEC_DECODE_LOGGING_H_

#include <string>

#include "absl/time/time.h"
#include "spec_decode/stats.h"

namespace vllm::frontend {

// How often AsyncLLM logs the interval's figures (vLLM's VLLM_LOG_STATS_INTERVAL default).
inline constexpr absl::Duration kStatsLogInterval = absl::Seconds(10);

// vLLM's line for `interval`, one engine's counters over `elapsed_seconds` (throughputs are 0
// when it is not positive):
//   SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 1.50 tokens/s,
//   Drafted throughput: 3.00 tokens/s, Accepted: 15 tokens, Drafted: 30 tokens,
//   Per-position acceptance rate: 0.800, 0.500, 0.200, Avg Draft acceptance rate: 50.0%
// (one line). Mean acceptance length counts the bonus token (1 + accepted / drafts); each
// position's rate is its accepted count over the drafts. "" when no draft was verified.
std::string FormatSpecDecodingLine(const spec_decode::SpecDecodingStats& interval,
                                   double elapsed_seconds);

// One engine's counters between two lines.
class SpecDecodingLogging {
 public:
  explicit SpecDecodingLogging(absl::Time start) : last_log_(start) {}

  void Observe(const spec_decode::SpecDecodingStats& stats) { interval_ += stats; }
  // The line for what was observed since the previous Take (or construction), "" when that
  // had no draft; starts a new interval at `now` either way.
  std::string Take(absl::Time now);

 private:
  spec_decode::SpecDecodingStats interval_;
  absl::Time last_log_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_SPEC_DECODE_LOGGING_H_
