// Disaggregated prefill/decode across two "nodes" (network namespaces joined by a veth link), as
// docs/PD.md runs it:
//
//   node A: vllm-launch M --kv-transfer-config
//   '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
//           vllm-launch router --pd-disaggregation --prefill http://127.0.0.1:P --decode http://B:D
//   node B: vllm-launch M --kv-transfer-config
//   '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
//
// Greedy answers through the router equal one colocated engine's for prompts of 1 to 100
// tokens across block boundaries (prefix-cache hits on either side, chunked prefill on the
// prefill side), TP 1 and TP 2 on each side, the KV moved over TCP with CURVE; the decode side
// counts every transferred prompt token as an external prefix-cache hit and the prefill side
// none; blocks held for a decode instance are freed once read, or when the lease runs out.
// Faults: kill -9 of the prefill instance after it answered and before the decode read its
// blocks (kv_load_failure_policy recompute: the answer is still right; fail: a clear error);
// kill -9 of one decode instance mid-stream fails only its streams. Skips when not root.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/multinode/multinode_fixture.h"

namespace vllm {
namespace {

using nlohmann::json;
using testing_multinode::MultinodeTest;

// Prompt lengths (tokens) around the 16-token blocks.
const std::vector<int> kLengths = {1, 15, 16, 17, 31, 32, 33, 64, 100};
constexpr char kText[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
    "of the waters. And God said, Let there be light: and there was light. And God saw the "
    "light, that it was good: and God divided the light from the darkness. And God called the "
    "light Day, and the darkness he called Night. And the evening and the morning were the "
    "first day.";

std::string ConnectorConfig(const std::string& role, const std::string& extra = "{}") {
  return absl::StrCat(R"({"kv_connector":"NixlConnector","kv_role":")", role,
                      R"(","kv_connector_extra_config":)", extra, "}");
}

class MultinodePdTest : public MultinodeTest {
 protected:
  void TearDown() override {
    for (auto* p : {&router_, &decode_b_, &decode_c_}) {
      if (p->has_value() && (*p)->running()) {
        (*p)->Kill(SIGKILL);
        (void)(*p)->Wait(absl::Seconds(5));
      }
      p->reset();
    }
    MultinodeTest::TearDown();
  }

  void InNodeB(const std::function<void()>& fn) {
    std::thread t([&] {
      const int fd = open(absl::StrCat("/var/run/netns/", nodes_->name_b()).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(setns(fd, CLONE_NEWNET), 0);
      close(fd);
      fn();
    });
    t.join();
  }

  // Spawns `argv` and reads its stdout until the line containing `ready` (returning the port
  // after the last ':' of that line).
  static int SpawnUntilReady(std::optional<testing::Subprocess>* out,
                             const std::vector<std::string>& argv) {
    auto p = testing::Subprocess::Spawn(argv);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return 0;
    out->emplace(std::move(*p));
    for (int i = 0; i < 50; ++i) {
      auto line = (*out)->ReadLine(absl::Seconds(60));
      EXPECT_TRUE(line.ok()) << line.status();
      if (!line.ok()) return 0;
      if (!absl::StrContains(*line, "ready at")) continue;
      std::string tail = line->substr(line->rfind(':') + 1);
      tail = tail.substr(0, tail.find('/'));
      int port = 0;
      EXPECT_TRUE(absl::SimpleAtoi(tail, &port)) << *line;
      return port;
    }
    ADD_FAILURE() << "no ready line";
    return 0;
  }

  // The prefill instance on node A (ServeTest's server_, port_), serving KV on A's address.
  void StartPrefill(const std::vector<std::string>& extra, const std::string& connector_extra) {
    std::vector<std::string> prefix = Env(nodes_->InA({}));
    prefix.push_back(absl::StrCat("VLLM_NIXL_SIDE_CHANNEL_HOST=", nodes_->address_a()));
    std::vector<std::string> args = {
        "--kv-transfer-config",     ConnectorConfig("kv_producer", connector_extra),
        "--cluster-key-file",       key_file_,
        "--max-num-batched-tokens", "32",
        "--max-num-seqs",           "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_NO_FATAL_FAILURE(StartServer(args, prefix));
  }

  // A decode instance on node B listening on every address (port `http_port`), its KV side
  // channel at `side_port`.
  void StartDecode(std::optional<testing::Subprocess>* out, int http_port, int side_port,
                   const std::string& policy, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = Env(nodes_->InB({}));
    argv.push_back(absl::StrCat("VLLM_NIXL_SIDE_CHANNEL_HOST=", nodes_->address_b()));
    argv.push_back(absl::StrCat("VLLM_NIXL_SIDE_CHANNEL_PORT=", side_port));
    argv.push_back(testing::BinDir() + "/vllm-launch");
    const std::string config =
        absl::StrCat(R"({"kv_connector":"NixlConnector",)",
                     R"("kv_role":"kv_consumer","kv_load_failure_policy":")", policy, R"("})");
    std::vector<std::string> args = {"--host",
                                     "0.0.0.0",
                                     "--port",
                                     absl::StrCat(http_port),
                                     "--kv-cache-memory",
                                     "64MiB",
                                     "--kv-transfer-config",
                                     config,
                                     "--cluster-key-file",
                                     key_file_};
    args.insert(args.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_EQ(SpawnUntilReady(out, argv), http_port);
  }

  void StartRouter(const std::vector<int>& decode_ports) {
    std::vector<std::string> argv = nodes_->InA({});
    argv.insert(argv.end(), {testing::BinDir() + "/vllm-launch", "router", "--pd-disaggregation",
                             "--port", "0", "--decode-policy", "round_robin", "--prefill",
                             absl::StrCat("http://127.0.0.1:", port_)});
    for (int port : decode_ports) {
      argv.insert(argv.end(),
                  {"--decode", absl::StrCat("http://", nodes_->address_b(), ":", port)});
    }
    router_port_ = SpawnUntilReady(&router_, argv);
    ASSERT_GT(router_port_, 0);
  }

  // kText's tokens, from the server on `port` in this namespace.
  static std::vector<int> Tokens(int port) {
    auto r = testing::Http(port, "POST", "/tokenize", json{{"prompt", kText}}.dump());
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().ToString());
    if (!r.ok()) return {};
    return r->Json()["tokens"].get<std::vector<int>>();
  }

  static json Body(const std::vector<int>& tokens, int length, int max_tokens = 8) {
    return {{"prompt", std::vector<int>(tokens.begin(), tokens.begin() + length)},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  }

  static std::string Text(int port, const json& body) {
    auto r = testing::Http(port, "POST", "/v1/completions", body.dump());
    if (!r.ok() || r->status != 200) {
      return absl::StrCat("<failed: ", r.ok() ? r->body : r.status().ToString(), ">");
    }
    return r->Json()["choices"][0].value("text", "");
  }

  // One colocated engine's answers for every length (a plain server on the host).
  std::vector<std::string> Reference(std::vector<int>* tokens) {
    ServeTest::StartServer({});
    *tokens = Tokens(port_);
    EXPECT_GE(tokens->size(), 100u);
    std::vector<std::string> texts;
    for (int len : kLengths) texts.push_back(Text(port_, Body(*tokens, len)));
    StopHead();
    return texts;
  }

  // The answers through the router, two rounds (the second hits both prefix caches).
  void ExpectRouterAnswers(const std::vector<int>& tokens, const std::vector<std::string>& ref) {
    for (int round = 0; round < 2; ++round) {
      InNodeA([&] {
        std::vector<std::string> texts(kLengths.size());
        std::vector<std::thread> clients;
        for (size_t i = 0; i < kLengths.size(); ++i) {
          clients.emplace_back(
              [&, i] { texts[i] = Text(router_port_, Body(tokens, kLengths[i])); });
        }
        for (std::thread& t : clients) t.join();
        for (size_t i = 0; i < kLengths.size(); ++i) {
          EXPECT_EQ(texts[i], ref[i]) << "round " << round << ", " << kLengths[i] << " tokens";
        }
      });
    }
  }

  testing::MetricSamples DecodeMetrics(int port) {
    testing::MetricSamples m;
    InNodeB([&] { m = testing::ScrapeMetrics(port); });
    return m;
  }

  // Waits (15 s at most) until the prefill instance holds no block.
  bool PrefillCacheEmpties() {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (absl::Now() < deadline) {
      if (testing::SumOf(Metrics(), "vllm:kv_cache_usage_perc") == 0) return true;
      absl::SleepFor(absl::Milliseconds(50));  // polling a condition with a deadline
    }
    return false;
  }

  void RunGreedyEquality(const std::vector<std::string>& parallel) {
    std::vector<int> tokens;
    const std::vector<std::string> reference = Reference(&tokens);
    ASSERT_NO_FATAL_FAILURE(StartPrefill(parallel, "{}"));
    ASSERT_NO_FATAL_FAILURE(StartDecode(&decode_b_, 8200, 5700, "fail", parallel));
    ASSERT_NO_FATAL_FAILURE(StartRouter({8200}));
    ExpectRouterAnswers(tokens, reference);
    // Every prompt token the decode side did not have was loaded, none computed; the prefill
    // side loads nothing.
    const testing::MetricSamples d = DecodeMetrics(8200);
    const double hits = testing::SumOf(d, "vllm:external_prefix_cache_hits_total");
    EXPECT_GT(hits, 0);
    EXPECT_EQ(hits, testing::SumOf(d, "vllm:external_prefix_cache_queries_total"));
    const testing::MetricSamples p = Metrics();
    EXPECT_EQ(testing::SumOf(p, "vllm:external_prefix_cache_hits_total"), 0);
    EXPECT_GT(testing::SumOf(p, "vllm:external_prefix_cache_queries_total"), 0);
    EXPECT_TRUE(PrefillCacheEmpties()) << "the prefill side kept blocks the decode side read";
  }

  std::optional<testing::Subprocess> router_, decode_b_, decode_c_;
  int router_port_ = 0;
};

TEST_F(MultinodePdTest, GreedyThroughTheRouterEqualsOneColocatedEngineTp1) {
  RunGreedyEquality({});
}

TEST_F(MultinodePdTest, GreedyThroughTheRouterEqualsOneColocatedEngineTp2) {
  RunGreedyEquality({"-tp", "2"});
}

TEST_F(MultinodePdTest, FaultsOnEitherSideFailOnlyWhatTheyMust) {
  std::vector<int> tokens;
  const std::vector<std::string> reference = Reference(&tokens);
  ASSERT_NO_FATAL_FAILURE(StartPrefill({}, R"({"kv_lease_duration":2})"));
  ASSERT_NO_FATAL_FAILURE(StartDecode(&decode_b_, 8200, 5700, "recompute", {}));
  ASSERT_NO_FATAL_FAILURE(StartDecode(&decode_c_, 8201, 5710, "fail", {}));
  ASSERT_NO_FATAL_FAILURE(StartRouter({8200, 8201}));

  // 1. A prefill nobody reads: its blocks are freed when the lease runs out.
  json prefill = Body(tokens, 64, 1);
  prefill["kv_transfer_params"] = {{"do_remote_decode", true}};
  InNodeA([&] { EXPECT_EQ(Text(port_, prefill).rfind("<failed", 0), std::string::npos); });
  EXPECT_GT(testing::SumOf(Metrics(), "vllm:kv_cache_usage_perc"), 0);
  EXPECT_TRUE(PrefillCacheEmpties()) << "held blocks outlived kv_lease_duration";

  // 2. Two prefills answered, their blocks not read yet.
  json params[2];
  for (int i = 0; i < 2; ++i) {
    json body = Body(tokens, i == 0 ? 33 : 64, 1);
    body["kv_transfer_params"] = {{"do_remote_decode", true}};
    InNodeA([&] {
      auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
      ASSERT_TRUE(r.ok() && r->status == 200);
      params[i] = r->Json()["kv_transfer_params"];
    });
    ASSERT_TRUE(params[i].is_object());
  }

  // 3. Four long streams through the router, two on each decode instance; kill -9 one decode
  // instance: only its two streams fail.
  const json stream_body = {
      {"prompt", "In the beginning"}, {"max_tokens", 600}, {"ignore_eos", true}, {"stream", true}};
  std::vector<testing::StreamResult> streams(4);
  std::thread load([&] {
    InNodeA([&] {
      std::vector<std::thread> clients;
      for (size_t i = 0; i < streams.size(); ++i) {
        clients.emplace_back([&, i] {
          streams[i] = testing::RunStream(router_port_, "/v1/completions", stream_body,
                                          absl::Now() + absl::Seconds(120));
        });
      }
      for (std::thread& t : clients) t.join();
    });
  });
  auto running = [&](int port) {
    return testing::SumOf(DecodeMetrics(port), "vllm:num_requests_running") == 2;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool both = false;
  while (!both && absl::Now() < deadline) both = running(8200) && running(8201);
  EXPECT_TRUE(both) << "not two streams on each decode instance";
  decode_c_->Kill(SIGKILL);
  load.join();
  int done = 0, failed = 0;
  for (const testing::StreamResult& s : streams) {
    if (s.done && !s.events.empty() && !s.events.back().contains("error")) {
      ++done;
    } else {
      ++failed;
    }
  }
  EXPECT_EQ(done, 2);
  EXPECT_EQ(failed, 2);
  (void)decode_c_->Wait(absl::Seconds(5));
  decode_c_.reset();

  // 4. kill -9 of the prefill instance after it answered: under recompute the decode side
  // still answers right; under fail (a fresh fail-policy instance) the request fails clearly.
  server_->Kill(SIGKILL);
  (void)server_->Wait(absl::Seconds(5));
  server_.reset();
  json decode = Body(tokens, 33);
  decode["kv_transfer_params"] = params[0];
  const double hits_before =
      testing::SumOf(DecodeMetrics(8200), "vllm:external_prefix_cache_hits_total");
  InNodeB([&] { EXPECT_EQ(Text(8200, decode), reference[6]); });  // kLengths[6] == 33
  // Counted when the load started; the failed load was then computed locally.
  EXPECT_EQ(testing::SumOf(DecodeMetrics(8200), "vllm:external_prefix_cache_hits_total"),
            hits_before + 33);
  ASSERT_NO_FATAL_FAILURE(StartDecode(&decode_c_, 8201, 5710, "fail", {}));
  json failing = Body(tokens, 64);
  failing["kv_transfer_params"] = params[1];
  InNodeB([&] {
    auto r = testing::Http(8201, "POST", "/v1/completions", failing.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    const bool error_status = r->status >= 500;
    const bool error_finish =
        r->status == 200 && r->Json()["choices"][0].value("finish_reason", "") == "error";
    EXPECT_TRUE(error_status || error_finish) << r->status << " " << r->body;
  });
}

}  // namespace
}  // namespace vllm
