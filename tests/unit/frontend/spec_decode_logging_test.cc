// The speculative-decoding log line: vLLM's SpecDecodingLogging text, figure for figure (the
// expected strings were printed by vLLM 0.33's format string in Python), and the interval
// bookkeeping between two lines.
#include "frontend/engine/spec_decode_logging.h"

#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "spec_decode/stats.h"

namespace vllm::frontend {
namespace {

// k = 3; four drafts of 3 tokens accepting 2, 1, 3 and 0: 6 of 12, per position 3, 2, 1.
spec_decode::SpecDecodingStats FourDrafts() {
  spec_decode::SpecDecodingStats s;
  s.num_spec_tokens = 3;
  s.Observe(3, 2);
  s.Observe(3, 1);
  s.Observe(3, 3);
  s.Observe(3, 0);
  return s;
}

constexpr char kFourDraftsOverTwoSeconds[] =
    "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 3.00 tokens/s, "
    "Drafted throughput: 6.00 tokens/s, Accepted: 6 tokens, Drafted: 12 tokens, Per-position "
    "acceptance rate: 0.750, 0.500, 0.250, Avg Draft acceptance rate: 50.0%";

TEST(FormatSpecDecodingLineTest, VllmText) {
  EXPECT_EQ(FormatSpecDecodingLine(FourDrafts(), 2.0), kFourDraftsOverTwoSeconds);
}

TEST(FormatSpecDecodingLineTest, NothingWithoutDrafts) {
  spec_decode::SpecDecodingStats none;
  none.num_spec_tokens = 3;
  none.num_accepted_tokens_per_pos = {0, 0, 0};
  EXPECT_EQ(FormatSpecDecodingLine(none, 10.0), "");
}

TEST(FormatSpecDecodingLineTest, NoElapsedTimeAndNoDraftTokens) {
  // An interval of no length: throughputs 0, as vLLM. Drafts without tokens (only a peer's
  // odd counters): the rate is NaN, as vLLM prints it.
  spec_decode::SpecDecodingStats s;
  s.num_drafts = 1;
  EXPECT_EQ(FormatSpecDecodingLine(s, 0.0),
            "SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 "
            "tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, "
            "Per-position acceptance rate: , Avg Draft acceptance rate: nan%");
}

TEST(SpecDecodingLoggingTest, OneLinePerIntervalWithDrafts) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  SpecDecodingLogging logging(t0);
  spec_decode::SpecDecodingStats first;
  first.num_spec_tokens = 3;
  first.Observe(3, 2);
  first.Observe(3, 1);
  spec_decode::SpecDecodingStats second;
  second.num_spec_tokens = 3;
  second.Observe(3, 3);
  second.Observe(3, 0);
  logging.Observe(first);
  logging.Observe(second);
  EXPECT_EQ(logging.Take(t0 + absl::Seconds(2)), kFourDraftsOverTwoSeconds);
  // The next interval starts empty.
  EXPECT_EQ(logging.Take(t0 + absl::Seconds(4)), "");
  // Its throughputs cover the time since the previous Take only (1 s here).
  spec_decode::SpecDecodingStats third;
  third.num_spec_tokens = 3;
  third.Observe(3, 3);
  logging.Observe(third);
  EXPECT_EQ(logging.Take(t0 + absl::Seconds(5)),
            "SpecDecoding metrics: Mean acceptance length: 4.00, Accepted throughput: 3.00 "
            "tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: 3 tokens, Drafted: 3 tokens, "
            "Per-position acceptance rate: 1.000, 1.000, 1.000, Avg Draft acceptance rate: "
            "100.0%");
}

}  // namespace
}  // namespace vllm::frontend
