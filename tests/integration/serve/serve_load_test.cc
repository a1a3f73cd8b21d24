// The real server under concurrent streaming load, and clients that leave mid-request.
//
// 64 threads, each on its own connection, stream /v1/completions and /v1/chat/completions
// (mixed, stream_options.include_usage, logprobs on so every token is visible in the stream):
// every request ends with one finish_reason and [DONE], the streamed token count equals the
// usage's completion_tokens, and the /metrics counters move by exactly the sums over the 64
// requests (vllm:prompt_tokens_total, generation_tokens_total, request_success_total, the e2e
// latency and TTFT histogram counts); the running gauge returns to 0. The same again through a
// KV cache of 74 blocks (--kv-cache-memory 7MiB), which forces preemptions.
//
// Clients that disconnect mid-request (a stream and a plain request, n=4 each, 1000 tokens) get
// their requests aborted in the engine: the running count and the KV-cache usage drop to 0
// within 3 s, long before the requests could have finished, and
// vllm:request_success_total{finished_reason="abort"} counts the 8 sequences.
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;
using testing::MetricSamples;
using testing::ScrapeMetrics;
using testing::SumOf;

constexpr char kModelLabel[] = "{model_name=\"kjv-llama-tiny\",engine=\"0\"}";

std::string Series(const std::string& name) { return name + kModelLabel; }

struct ClientResult {
  testing::StreamResult stream;
  int32_t max_tokens = 0;
  int32_t streamed_tokens = 0;
  int num_finish_reasons = 0;
  json usage;
};

// Tokens carried by one chunk: its logprobs entries (one per sampled token).
int32_t TokensIn(const json& event) {
  if (!event.contains("choices") || event["choices"].empty()) return 0;
  const json& lp = event["choices"][0]["logprobs"];
  if (lp.is_null()) return 0;
  if (lp.contains("content")) return static_cast<int32_t>(lp["content"].size());  // chat
  return static_cast<int32_t>(lp["tokens"].size());                               // completion
}

// Client `i` asks for min_tokens + i % 13 tokens.
ClientResult RunClient(int port, int i, int32_t min_tokens, absl::Time deadline) {
  static const char* const kPrompts[] = {"In the beginning", "And God said",
                                         "The LORD is my shepherd", "Blessed are the meek",
                                         "Jesus wept."};
  ClientResult r;
  r.max_tokens = min_tokens + i % 13;
  json body = {{"model", "kjv-llama-tiny"},
               {"max_tokens", r.max_tokens},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (i % 3 == 0) {
    body["temperature"] = 0;
  } else {
    body["temperature"] = 0.8;
    body["seed"] = i;
  }
  const bool chat = i % 2 == 1;
  if (chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", kPrompts[i % 5]}}});
    body["logprobs"] = true;
  } else {
    body["prompt"] = kPrompts[i % 5];
    body["logprobs"] = 0;
  }
  r.stream =
      testing::RunStream(port, chat ? "/v1/chat/completions" : "/v1/completions", body, deadline);
  for (const json& e : r.stream.events) {
    r.streamed_tokens += TokensIn(e);
    if (e.contains("usage") && !e["usage"].is_null()) r.usage = e["usage"];
    if (e.contains("choices") && !e["choices"].empty() &&
        !e["choices"][0]["finish_reason"].is_null()) {
      ++r.num_finish_reasons;
    }
  }
  return r;
}

class ServeLoadTest : public testing::ServeTest {
 protected:
  // Runs the 64 clients (each asking for min_tokens + up to 12 tokens) against a server
  // started with `args` and checks the accounting; with `expect_preemptions`, also that the
  // engine preempted requests.
  void SixtyFourStreams(const std::vector<std::string>& args, int32_t min_tokens,
                        bool expect_preemptions);
};

void ServeLoadTest::SixtyFourStreams(const std::vector<std::string>& args, int32_t min_tokens,
                                     bool expect_preemptions) {
  ASSERT_NO_FATAL_FAILURE(StartServer(args));
  const MetricSamples before = ScrapeMetrics(port_);
  ASSERT_FALSE(before.empty());

  constexpr int kClients = 64;
  std::vector<ClientResult> results(kClients);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(60);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kClients; ++i) {
      threads.emplace_back([&, i] { results[i] = RunClient(port_, i, min_tokens, deadline); });
    }
    for (std::thread& t : threads) t.join();
  }
  const absl::Duration elapsed = absl::Now() - start;
  std::printf("64 streams finished in %s\n", absl::FormatDuration(elapsed).c_str());

  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (int i = 0; i < kClients; ++i) {
    const ClientResult& r = results[i];
    SCOPED_TRACE(absl::StrCat("client ", i));
    ASSERT_EQ(r.stream.status, 200) << r.stream.error;
    EXPECT_TRUE(r.stream.done) << r.stream.error;
    EXPECT_EQ(r.num_finish_reasons, 1);
    ASSERT_TRUE(r.usage.is_object()) << "no usage chunk";
    const int64_t completion = r.usage["completion_tokens"].get<int64_t>();
    EXPECT_EQ(r.streamed_tokens, completion);
    EXPECT_GE(completion, 1);
    EXPECT_LE(completion, r.max_tokens);
    EXPECT_EQ(r.usage["total_tokens"].get<int64_t>(),
              r.usage["prompt_tokens"].get<int64_t>() + completion);
    prompt_tokens += r.usage["prompt_tokens"].get<int64_t>();
    completion_tokens += completion;
  }

  // Request-level metrics are recorded before the response's last bytes are written; the
  // engine's gauges arrive with its last step's outputs. Both settle by this deadline.
  const std::string running = Series("vllm:num_requests_running");
  const std::string e2e_count = Series("vllm:e2e_request_latency_seconds_count");
  MetricSamples after;
  const absl::Time settle = absl::Now() + absl::Seconds(10);
  do {
    after = ScrapeMetrics(port_);
  } while ((after[running] != 0 || after[e2e_count] - before.at(e2e_count) < kClients) &&
           absl::Now() < settle);
  auto delta = [&](const std::string& name) { return SumOf(after, name) - SumOf(before, name); };
  EXPECT_EQ(after[running], 0);
  EXPECT_EQ(after[Series("vllm:num_requests_waiting")], 0);
  EXPECT_EQ(delta("vllm:prompt_tokens_total"), prompt_tokens);
  EXPECT_EQ(delta("vllm:generation_tokens_total"), completion_tokens);
  EXPECT_EQ(delta("vllm:request_success_total"), kClients);
  EXPECT_EQ(delta("vllm:e2e_request_latency_seconds_count"), kClients);
  EXPECT_EQ(delta("vllm:time_to_first_token_seconds_count"), kClients);
  // Stop and length are the only ways these requests end.
  const double stop =
      after[absl::StrCat("vllm:request_success_total{model_name=\"kjv-llama-tiny\",engine=\"0\","
                         "finished_reason=\"stop\"}")];
  const double length =
      after[absl::StrCat("vllm:request_success_total{model_name=\"kjv-llama-tiny\",engine=\"0\","
                         "finished_reason=\"length\"}")];
  EXPECT_EQ(stop + length, SumOf(after, "vllm:request_success_total"));
  EXPECT_LT(elapsed, absl::Seconds(60));
  const double preemptions = delta("vllm:num_preemptions_total");
  std::printf("%.0f preemptions\n", preemptions);
  if (expect_preemptions) {
    EXPECT_GT(preemptions, 0);
  }
}

TEST_F(ServeLoadTest, SixtyFourConcurrentStreamsAddUpInMetrics) {
  SixtyFourStreams({}, /*min_tokens=*/4, /*expect_preemptions=*/false);
}

// The same with a KV cache of 74 blocks of 16 tokens (one max_model_len request and a little
// more) for 64 requests of 3 blocks or so each: running requests are preempted and
// recomputed. The token accounting must not count a recomputed token twice.
TEST_F(ServeLoadTest, SixtyFourStreamsThroughASmallCacheAddUpInMetrics) {
  SixtyFourStreams({"--kv-cache-memory", "7MiB"}, /*min_tokens=*/28,
                   /*expect_preemptions=*/true);
}

TEST_F(ServeLoadTest, ClientsThatLeaveMidRequestAreAborted) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const MetricSamples before = ScrapeMetrics(port_);
  // 2 x 4 sequences x 1000 tokens: well over 5 s of decoding on this CPU (~1000 tokens/s at
  // best) if the aborts never reached the engine.
  constexpr int kN = 4;
  const json completion = {{"model", "kjv-llama-tiny"},
                           {"prompt", "And God said"},
                           {"max_tokens", 1000},
                           {"ignore_eos", true},
                           {"n", kN},
                           {"stream", true}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "In the beginning"}}}},
                     {"max_tokens", 1000},
                     {"ignore_eos", true},
                     {"n", kN}};
  const absl::Time start = absl::Now();
  // A streamed completion, read for a while, and a plain chat completion (no reply yet).
  absl::StatusOr<testing::SseStream> stream =
      testing::SseStream::Open(port_, "/v1/completions", completion, start + absl::Seconds(30));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ(stream->status(), 200) << stream->error_body();
  for (int events = 0; events < 2 * kN; ++events) {
    auto data = stream->Next(start + absl::Seconds(30));
    ASSERT_TRUE(data.ok()) << data.status();
    ASSERT_TRUE(data->has_value()) << "stream ended early";
    ASSERT_NE(**data, "[DONE]");
  }
  absl::StatusOr<int> plain = testing::SendAndKeepOpen(port_, "/v1/chat/completions", chat.dump());
  ASSERT_TRUE(plain.ok()) << plain.status();
  // The engine reports all sequences running and holding KV blocks.
  const std::string running = Series("vllm:num_requests_running");
  const std::string kv_usage = Series("vllm:kv_cache_usage_perc");
  MetricSamples during;
  do {
    during = ScrapeMetrics(port_);
  } while (during[running] != 2 * kN && absl::Now() < start + absl::Seconds(10));
  const bool all_running = during[running] == 2 * kN;
  close(*plain);
  ASSERT_TRUE(all_running) << during[running];
  ASSERT_GT(during[kv_usage], 0);

  stream->Close();
  const absl::Time left = absl::Now();
  MetricSamples after;
  do {
    after = ScrapeMetrics(port_);
  } while ((after[running] != 0 || after[kv_usage] != 0) && absl::Now() < left + absl::Seconds(3));
  const absl::Duration took = absl::Now() - left;
  std::printf("aborted %d sequences in %s\n", 2 * kN, absl::FormatDuration(took).c_str());
  EXPECT_EQ(after[running], 0);
  EXPECT_EQ(after[kv_usage], 0);
  EXPECT_LT(took, absl::Seconds(3));
  const std::string abort_series =
      "vllm:request_success_total{model_name=\"kjv-llama-tiny\",engine=\"0\",finished_reason="
      "\"abort\"}";
  EXPECT_EQ(after[abort_series] - before.at(abort_series), 2 * kN);
  // Nothing ran to completion: only the aborts were counted.
  EXPECT_EQ(
      SumOf(after, "vllm:request_success_total") - SumOf(before, "vllm:request_success_total"),
      2 * kN);

  // The server still serves.
  auto ok = testing::Http(port_, "POST", "/v1/completions",
                          json{{"prompt", "In the beginning"}, {"max_tokens", 4}}.dump());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace vllm
