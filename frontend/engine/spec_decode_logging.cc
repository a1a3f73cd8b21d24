#include "frontend/engine/spec_decode_logging.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace vllm::frontend {

std::string FormatSpecDecodingLine(const spec_decode::SpecDecodingStats& interval,
                                   double elapsed_seconds) {
  if (interval.num_drafts <= 0) return "";
  const auto drafts = static_cast<double>(interval.num_drafts);
  const auto accepted = static_cast<double>(interval.num_accepted_tokens);
  const auto drafted = static_cast<double>(interval.num_draft_tokens);
  const double accepted_throughput = elapsed_seconds > 0 ? accepted / elapsed_seconds : 0.0;
  const double drafted_throughput = elapsed_seconds > 0 ? drafted / elapsed_seconds : 0.0;
  // As vLLM: NaN when drafts verified no token (only a peer's odd counters get there).
  const double acceptance_rate = drafted > 0 ? accepted / drafted * 100 : std::nan("");
  std::vector<std::string> rates;
  rates.reserve(interval.num_accepted_tokens_per_pos.size());
  for (int64_t n : interval.num_accepted_tokens_per_pos) {
    rates.push_back(absl::StrFormat("%.3f", static_cast<double>(n) / drafts));
  }
  return absl::StrFormat(
      "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
      "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
      "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%",
      1 + accepted / drafts, accepted_throughput, drafted_throughput, interval.num_accepted_tokens,
      interval.num_draft_tokens, absl::StrJoin(rates, ", "), acceptance_rate);
}

std::string SpecDecodingLogging::Take(absl::Time now) {
  std::string line = FormatSpecDecodingLine(interval_, absl::ToDoubleSeconds(now - last_log_));
  interval_ = {};
  last_log_ = now;
  return line;
}

}  // namespace vllm::frontend
