// vLLM 0.33's other endpoints and its /metrics families against one real server on the bundled
// model (VLLM_SERVER_DEV_MODE=1): /ping (GET and POST), /load, /version, /invocations
// (dispatched by body shape), /reset_prefix_cache, the sleep family (--enable-sleep-mode:
// level 0 pauses; levels 1 and 2 free the KV cache / and the weights, the engine's RSS falls by
// at least half the KV cache, and a greedy request after wake_up gives the same tokens; partial
// wake-up by tags), /v1/messages (Anthropic, plain and streamed), and a diff of our /metrics
// families (name and type) against vLLM 0.33's default list (tests/fixtures/vllm_0_33), with the
// per-request histograms and iteration tokens filled from real requests.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

class ServeEndpointsTest : public testing::ServeTest {
 protected:
  testing::HttpResponse Call(const std::string& method, const std::string& path,
                             const std::string& body = "") {
    auto r = testing::Http(port_, method, path, body);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::HttpResponse{};
  }
};

// VmRSS of `pid` in bytes (/proc/<pid>/status); -1 when unreadable.
int64_t RssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "VmRSS:")) {
      std::istringstream fields(line.substr(6));
      int64_t kib = -1;
      fields >> kib;
      return kib * 1024;
    }
  }
  return -1;
}

// The value of label `label` in /metrics' vllm:cache_config_info line; "" when absent.
std::string CacheConfigLabel(const std::string& metrics, const std::string& label) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, "vllm:cache_config_info{")) continue;
    const std::string key = label + "=\"";
    const size_t at = line.find(key);
    if (at == absl::string_view::npos) return "";
    const size_t begin = at + key.size();
    return std::string(line.substr(begin, line.find('"', begin) - begin));
  }
  return "";
}

// name -> type of every "# TYPE vllm:..." line.
std::map<std::string, std::string> Families(const std::string& text) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "# TYPE vllm:")) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() == 4) out[f[2]] = f[3];
  }
  return out;
}

TEST_F(ServeEndpointsTest, EndpointsAndMetricsAsVllm) {
  setenv("VLLM_SERVER_DEV_MODE", "1", 1);
  // The CPU backend (even where a GPU is visible): the worker's RSS is measured below.
  ASSERT_NO_FATAL_FAILURE(StartServer({"--enable-sleep-mode", "--device", "cpu"}));
  unsetenv("VLLM_SERVER_DEV_MODE");

  EXPECT_EQ(Call("GET", "/ping").status, 200);
  EXPECT_EQ(Call("POST", "/ping").status, 200);
  EXPECT_EQ(Call("GET", "/load").Json(), json({{"server_load", 0}}));
  json version = Call("GET", "/version").Json();
  EXPECT_EQ(version["vllm_api_version"], "0.33.0");
  EXPECT_TRUE(version["version"].is_string());

  // /invocations: a prompt is a completion, messages a chat, anything else a 400.
  json completion =
      Call("POST", "/invocations", R"({"prompt": "And God said", "max_tokens": 4})").Json();
  EXPECT_EQ(completion["object"], "text_completion");
  json chat = Call("POST", "/invocations",
                   R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})")
                  .Json();
  EXPECT_EQ(chat["object"], "chat.completion");
  testing::HttpResponse neither = Call("POST", "/invocations", R"({"foo": 1})");
  EXPECT_EQ(neither.status, 400);
  EXPECT_TRUE(absl::StrContains(neither.body, "Cannot find suitable handler")) << neither.body;

  // Dev mode: the prefix cache resets while idle; unsupported options are named.
  EXPECT_EQ(Call("POST", "/reset_prefix_cache").Json(), json({{"success", true}}));
  testing::HttpResponse external = Call("POST", "/reset_prefix_cache?reset_external=true");
  EXPECT_EQ(external.status, 400);
  EXPECT_TRUE(absl::StrContains(external.body, "reset_external")) << external.body;

  // Sleep level 0 pauses, wake_up resumes; 3 is a 422.
  EXPECT_EQ(Call("POST", "/sleep?level=0").Json(), json({{"status", "sleeping"}, {"level", 0}}));
  EXPECT_EQ(Call("GET", "/is_sleeping").Json(), json({{"is_sleeping", true}}));
  const testing::MetricSamples asleep = testing::ScrapeMetrics(port_);
  const std::string awake_key =
      "vllm:engine_sleep_state{model_name=\"kjv-llama-tiny\",engine=\"0\",sleep_state=\"awake\"}";
  ASSERT_TRUE(asleep.contains(awake_key));
  EXPECT_EQ(asleep.at(awake_key), 0.0);
  EXPECT_EQ(Call("POST", "/wake_up").Json()["status"], "awake");
  EXPECT_EQ(Call("GET", "/is_sleeping").Json(), json({{"is_sleeping", false}}));
  EXPECT_EQ(Call("POST", "/sleep?level=3").status, 422);
  EXPECT_EQ(Call("POST", "/sleep?level=1&mode=later").status, 422);

  // Levels 1 and 2 free the KV cache (and the weights): the engine process's RSS (the worker
  // runs in it at TP 1) falls by at least half the KV cache; the same greedy request gives the
  // same tokens after wake_up. Level 2 wakes in two steps by tags.
  const std::vector<pid_t> engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(engines.size(), 1u);
  int64_t kv_bytes = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      CacheConfigLabel(Call("GET", "/metrics").body, "kv_cache_memory_bytes"), &kv_bytes));
  ASSERT_GT(kv_bytes, 0);
  const std::string greedy = R"({"prompt": "In the beginning", "max_tokens": 8, "temperature": 0})";
  const json expected = Call("POST", "/v1/completions", greedy).Json()["choices"][0]["text"];
  for (const int level : {1, 2}) {
    SCOPED_TRACE(level);
    const int64_t awake_rss = RssBytes(engines[0]);
    EXPECT_EQ(Call("POST", "/sleep?level=" + std::to_string(level)).Json(),
              json({{"status", "sleeping"}, {"level", level}}));
    EXPECT_EQ(Call("GET", "/is_sleeping").Json(), json({{"is_sleeping", true}}));
    const int64_t asleep_rss = RssBytes(engines[0]);
    EXPECT_GE(awake_rss - asleep_rss, kv_bytes / 2)
        << "RSS " << awake_rss << " -> " << asleep_rss << " bytes, KV cache " << kv_bytes;
    std::printf("sleep level %d: engine RSS %.1f MiB -> %.1f MiB (KV cache %.1f MiB)\n", level,
                awake_rss / 1048576.0, asleep_rss / 1048576.0, kv_bytes / 1048576.0);
    if (level == 2) {
      EXPECT_EQ(Call("POST", "/wake_up?tags=weights").Json(),
                json({{"status", "sleeping"}, {"tags", json::array({"weights"})}}));
      EXPECT_EQ(Call("GET", "/is_sleeping").Json(), json({{"is_sleeping", true}}));
      EXPECT_EQ(Call("POST", "/wake_up?tags=kv_cache").Json(),
                json({{"status", "awake"}, {"tags", json::array({"kv_cache"})}}));
    } else {
      EXPECT_EQ(Call("POST", "/wake_up").Json(), json({{"status", "awake"}, {"tags", nullptr}}));
    }
    EXPECT_EQ(Call("GET", "/is_sleeping").Json(), json({{"is_sleeping", false}}));
    EXPECT_EQ(Call("POST", "/v1/completions", greedy).Json()["choices"][0]["text"], expected);
  }

  // Anthropic Messages: plain, then streamed with Anthropic's event sequence.
  const json msg = {{"model", "kjv-llama-tiny"},
                    {"max_tokens", 5},
                    {"system", "Be brief."},
                    {"messages", {{{"role", "user"}, {"content", "Who made the heaven?"}}}}};
  json answer = Call("POST", "/v1/messages", msg.dump()).Json();
  EXPECT_EQ(answer["type"], "message");
  EXPECT_EQ(answer["role"], "assistant");
  EXPECT_EQ(answer["content"][0]["type"], "text");
  EXPECT_EQ(answer["stop_reason"], "max_tokens");
  EXPECT_EQ(answer["usage"]["output_tokens"], 5);
  json streamed_msg = msg;
  streamed_msg["stream"] = true;
  testing::HttpResponse stream = Call("POST", "/v1/messages", streamed_msg.dump());
  std::vector<std::string> events;
  std::string text;
  for (absl::string_view line : absl::StrSplit(stream.body, '\n')) {
    if (absl::StartsWith(line, "event: ")) events.emplace_back(line.substr(7));
    if (absl::StartsWith(line, "data: ")) {
      json data = json::parse(line.substr(6));
      if (data["type"] == "content_block_delta") text += data["delta"]["text"];
    }
  }
  ASSERT_GE(events.size(), 5u) << stream.body;
  EXPECT_EQ(events.front(), "message_start");
  EXPECT_EQ(events[1], "content_block_start");
  EXPECT_EQ(events[events.size() - 3], "content_block_stop");
  EXPECT_EQ(events[events.size() - 2], "message_delta");
  EXPECT_EQ(events.back(), "message_stop");
  EXPECT_FALSE(text.empty());
  json with_tools = msg;
  with_tools["tools"] = json::array({{{"name", "f"}, {"input_schema", json::object()}}});
  testing::HttpResponse tools = Call("POST", "/v1/messages", with_tools.dump());
  EXPECT_EQ(tools.status, 400);
  EXPECT_EQ(tools.Json()["type"], "error");
  EXPECT_EQ(tools.Json()["error"]["type"], "invalid_request_error");

  // /metrics: every vLLM 0.33 default family with vLLM's type; ours add only the
  // structured-output families.
  std::ifstream list(std::string(VLLM_SOURCE_DIR) +
                     "/tests/fixtures/vllm_0_33/default_metric_families.txt");
  ASSERT_TRUE(list.good());
  std::map<std::string, std::string> vllm;
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, type;
    fields >> name >> type;
    vllm[name] = type;
  }
  EXPECT_EQ(vllm.size(), 39u);
  testing::HttpResponse scrape = Call("GET", "/metrics");
  const std::map<std::string, std::string> ours = Families(scrape.body);
  for (const auto& [name, type] : vllm) {
    auto it = ours.find(name);
    EXPECT_TRUE(it != ours.end()) << "missing " << name;
    if (it != ours.end()) {
      EXPECT_EQ(it->second, type) << name;
    }
  }
  for (const auto& [name, type] : ours) {
    EXPECT_TRUE(vllm.contains(name) || absl::StartsWith(name, "vllm:structured_output_"))
        << "not vLLM's: " << name;
  }
  // Real figures from the requests above.
  const testing::MetricSamples m = testing::ParseMetrics(scrape.body);
  EXPECT_GE(testing::SumOf(m, "vllm:request_queue_time_seconds_count"), 4.0);
  EXPECT_GT(testing::SumOf(m, "vllm:request_prefill_time_seconds_sum"), 0.0);
  EXPECT_GT(testing::SumOf(m, "vllm:request_decode_time_seconds_sum"), 0.0);
  EXPECT_GT(testing::SumOf(m, "vllm:request_inference_time_seconds_sum"), 0.0);
  EXPECT_GT(testing::SumOf(m, "vllm:iteration_tokens_total_sum"), 20.0);
  EXPECT_GE(testing::SumOf(m, "vllm:request_generation_tokens_sum"), 18.0);
  EXPECT_GE(testing::SumOf(m, "vllm:request_params_max_tokens_count"), 4.0);
  EXPECT_GE(testing::SumOf(m, "vllm:request_params_n_count"), 4.0);
  // The two Anthropic requests share a prompt: the second hits the prefix cache.
  EXPECT_GT(testing::SumOf(m, "vllm:prompt_tokens_cached_total"), 0.0);
  EXPECT_EQ(testing::SumOf(m, "vllm:cache_config_info"), 1.0);
}

}  // namespace
}  // namespace vllm
