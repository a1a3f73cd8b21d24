// KV offloading (--kv-offloading-size, the OffloadingConnector) through the server on the
// bundled model: a device cache of 64 blocks of 16 tokens and a working set three times that
// (12 prompts sharing nothing, each a 256-token prefix asked 3 times round-robin with a short
// suffix). Without offloading every prefix is evicted before it is asked again; with a host
// tier of 0.05 GiB the 2nd and 3rd asks load their prefix from it. The answers (greedy, with
// logprobs) are the same either way, and the prefix hit rate is higher with the tier.
//
// Hit rate: (vllm:prefix_cache_hits + vllm:external_prefix_cache_hits) /
// vllm:prefix_cache_queries. The device cache counts every prompt token of every lookup as a
// query; the connector's hits are tokens the device cache missed (its queries are the tokens
// beyond the device hit), so the ratio is the fraction of prompt tokens not computed.
#include <signal.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

constexpr int kNumPrefixes = 12;
constexpr int kRounds = 3;
constexpr int kPrefixTokens = 256;
constexpr int kSuffixTokens = 4;

// Prefix `p`: 256 pseudo-random token ids of the bundled model's 4096 (above the specials).
std::vector<int32_t> Prefix(int p) {
  uint64_t x = static_cast<uint64_t>(p) * 7919 + 17;
  std::vector<int32_t> ids;
  for (int i = 0; i < kPrefixTokens; ++i) {
    x = (x * 1103515245 + 12345) % (uint64_t{1} << 31);
    ids.push_back(50 + static_cast<int32_t>(x % 4000));
  }
  return ids;
}

struct RunResult {
  std::vector<json> choices;  // in request order
  double queries = 0;
  double hits = 0;
  double external_hits = 0;
  double hit_rate() const { return queries > 0 ? (hits + external_hits) / queries : 0; }
};

class ServeOffloadTest : public testing::ServeTest {
 protected:
  // Starts a server with `extra` flags, asks every prefix kRounds times round-robin, one
  // request at a time, reads the metrics and stops the server.
  void Serve(const std::vector<std::string>& extra, RunResult* run) {
    std::vector<std::string> args = {"--kv-cache-memory", "6MiB", "--max-model-len", "512"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_NO_FATAL_FAILURE(StartServer(args));
    for (int round = 0; round < kRounds; ++round) {
      for (int p = 0; p < kNumPrefixes; ++p) {
        std::vector<int32_t> prompt = Prefix(p);
        for (int i = 0; i < kSuffixTokens; ++i) prompt.push_back(100 + 10 * round + i);
        const json body = {
            {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 1}};
        auto reply = testing::Http(port_, "POST", "/v1/completions", body.dump());
        ASSERT_TRUE(reply.ok()) << reply.status();
        ASSERT_EQ(reply->status, 200) << reply->body;
        run->choices.push_back(reply->Json()["choices"][0]);
      }
    }
    // The engine's figures reach /metrics with its outputs; wait until every lookup counted.
    const double want_queries = kRounds * kNumPrefixes * (kPrefixTokens + kSuffixTokens);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    testing::MetricSamples m;
    do {
      m = testing::ScrapeMetrics(port_);
      run->queries = testing::SumOf(m, "vllm:prefix_cache_queries_total");
    } while (run->queries < want_queries && absl::Now() < deadline);
    EXPECT_EQ(run->queries, want_queries);  // no preemption: each request looked up once
    run->hits = testing::SumOf(m, "vllm:prefix_cache_hits_total");
    run->external_hits = testing::SumOf(m, "vllm:external_prefix_cache_hits_total");
    server_->Kill(SIGTERM);
    auto status = server_->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(*status, 0) << testing::DescribeWaitStatus(*status);
    ASSERT_TRUE(WaitNoChildren(getpid(), absl::Now() + absl::Seconds(10)));
    server_.reset();
  }
};

TEST_F(ServeOffloadTest, TheHostTierKeepsPrefixHitsAWorkingSetBeyondTheDeviceCache) {
  RunResult without, with;
  ASSERT_NO_FATAL_FAILURE(Serve({}, &without));
  ASSERT_NO_FATAL_FAILURE(Serve({"--kv-offloading-size", "0.05"}, &with));
  std::printf("prefix hit rate without offloading: %.3f (%g + %g of %g tokens)\n",
              without.hit_rate(), without.hits, without.external_hits, without.queries);
  std::printf("prefix hit rate with --kv-offloading-size 0.05: %.3f (%g + %g of %g tokens)\n",
              with.hit_rate(), with.hits, with.external_hits, with.queries);
  EXPECT_EQ(without.external_hits, 0);
  EXPECT_GT(with.hit_rate(), without.hit_rate());
  // The 2nd and 3rd asks of every prefix load its 16 blocks: 24 × 256 of 36 × 260 tokens.
  EXPECT_GE(with.hit_rate(), 0.6);

  ASSERT_EQ(with.choices.size(), without.choices.size());
  for (size_t i = 0; i < with.choices.size(); ++i) {
    SCOPED_TRACE(i);
    const json& a = without.choices[i];
    const json& b = with.choices[i];
    EXPECT_EQ(a["text"], b["text"]);
    const json& la = a["logprobs"]["token_logprobs"];
    const json& lb = b["logprobs"]["token_logprobs"];
    ASSERT_TRUE(la.is_array() && lb.is_array() && la.size() == lb.size()) << a << b;
    for (size_t t = 0; t < la.size(); ++t) {
      EXPECT_NEAR(la[t].get<double>(), lb[t].get<double>(), 1e-3) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace vllm
