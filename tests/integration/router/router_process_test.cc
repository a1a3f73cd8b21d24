// `vllm-launch router` in front of three real `vllm-launch` servers (the bundled model, on the
// CPU): every policy serves completions, chat and streams; a body over --max-payload-size is
// 413; 30 sequential requests open at most 2 connections per worker (keep-alive pool);
// cache_aware keeps a repeated long prompt on one worker; kv_aware follows the prefixes the
// workers' KV-cache events report; workers are added and removed at run time without dropping
// a stream in flight; a client leaving (mid-stream, or before a non-streamed answer) ends the
// request on the worker; SIGTERM drains a stream in flight, then the router exits 0; kill -9 of
// a worker mid-stream ends that stream with an SSE error event (bytes had reached the client,
// so no retry), the next requests succeed on the others (retried elsewhere), and the worker is
// ejected within a health interval, restarted, re-admitted and served again.
//
// The three workers are started once for the suite (starting them is most of the test's
// time); each test starts its own router. Every wait polls a condition with a deadline; every
// process is a Subprocess (SIGKILLed and reaped by its destructor) and the suite checks that
// no descendant is left.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/process.h"

namespace vllm {
namespace {

using nlohmann::json;
using testing::Subprocess;

constexpr int kWorkers = 3;

// The port in a "...ready at http://HOST:PORT[/v1]" line; 0 when there is none.
int PortOf(const std::string& line) {
  if (!absl::StrContains(line, "ready at")) return 0;
  std::string rest = line.substr(line.rfind(':') + 1);
  if (absl::EndsWith(rest, "/v1")) rest.resize(rest.size() - 3);
  int port = 0;
  return absl::SimpleAtoi(rest, &port) ? port : 0;
}

// Spawns `argv` and reads its ready line; *port is the port it reports.
std::unique_ptr<Subprocess> StartAndWaitReady(const std::vector<std::string>& argv, int* port) {
  auto p = Subprocess::Spawn(argv);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return nullptr;
  auto proc = std::make_unique<Subprocess>(std::move(*p));
  auto line = proc->ReadLine(absl::Seconds(60));
  EXPECT_TRUE(line.ok()) << line.status();
  if (!line.ok()) return nullptr;
  *port = PortOf(*line);
  EXPECT_GT(*port, 0) << *line;
  if (*port == 0) return nullptr;
  return proc;
}

// Where worker `i` publishes its KV-cache events (an ipc:// endpoint in the suite's own
// directory: no port to race for).
std::string* events_dir = nullptr;
std::string EventsEndpoint(int i) { return absl::StrCat("ipc://", *events_dir, "/kv-", i); }

std::vector<std::string> WorkerArgv(int i, int port) {
  return {
      testing::BinDir() + "/vllm-launch",
      "--port",
      absl::StrCat(port),
      "--kv-cache-memory",
      "64MiB",
      "--kv-events-config",
      json{{"enable_kv_cache_events", true}, {"publisher", "zmq"}, {"endpoint", EventsEndpoint(i)}}
          .dump()};
}

std::string Url(int port) { return absl::StrCat("http://127.0.0.1:", port); }

// The router's per-worker value of a metric.
double WorkerSeries(const testing::MetricSamples& m, const std::string& name, int port) {
  auto it = m.find(absl::StrCat(name, "{worker=\"", Url(port), "\"}"));
  return it == m.end() ? -1 : it->second;
}

// The worker's count of aborted requests (vllm:request_success_total, finished_reason abort).
double Aborted(int worker_port) {
  double sum = 0;
  for (const auto& [series, value] : testing::ScrapeMetrics(worker_port)) {
    if (absl::StartsWith(series, "vllm:request_success_total{") &&
        absl::StrContains(series, "finished_reason=\"abort\"")) {
      sum += value;
    }
  }
  return sum;
}

// The worker's prefix-cache hits (tokens), from its /metrics.
double PrefixCacheHits(int worker_port) {
  const testing::MetricSamples m = testing::ScrapeMetrics(worker_port);
  auto it = m.find("vllm:prefix_cache_hits_total{model_name=\"kjv-llama-tiny\",engine=\"0\"}");
  return it == m.end() ? -1 : it->second;
}

// Reads `stream` to its end: the number of events, and whether it ended with [DONE] (no
// error event on the way, checked).
struct StreamEnd {
  int events = 0;
  bool done = false;
  std::string last;  // the last event before [DONE]
};
StreamEnd ReadToEnd(testing::SseStream& stream, absl::Time deadline) {
  StreamEnd end;
  while (true) {
    auto next = stream.Next(deadline);
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) break;
    if (**next == "[DONE]") {
      end.done = true;
      break;
    }
    EXPECT_FALSE(absl::StrContains(**next, "\"error\"")) << **next;
    ++end.events;
    end.last = **next;
  }
  return end;
}

// GET /workers as url -> healthy.
std::map<std::string, bool> WorkerHealth(int router_port) {
  std::map<std::string, bool> out;
  auto r = testing::Http(router_port, "GET", "/workers", "", "", absl::Seconds(10));
  if (!r.ok() || r->status != 200) return out;
  const json j = r->Json();
  if (!j.is_object() || !j.contains("workers")) return out;
  for (const json& w : j["workers"]) out[w.value("url", "")] = w.value("healthy", false);
  return out;
}

class RouterProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphans come to us: we can reap them
    workers_ = new std::vector<std::unique_ptr<Subprocess>>();
    char dir[] = "/tmp/router-kv-events-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    events_dir = new std::string(dir);
    // Spawn all three first, so they load side by side.
    std::vector<Subprocess> started;
    for (int i = 0; i < kWorkers; ++i) {
      auto p = Subprocess::Spawn(WorkerArgv(i, 0));
      ASSERT_TRUE(p.ok()) << p.status();
      started.push_back(std::move(*p));
    }
    for (int i = 0; i < kWorkers; ++i) {
      auto line = started[i].ReadLine(absl::Seconds(60));
      ASSERT_TRUE(line.ok()) << line.status();
      ports_[i] = PortOf(*line);
      ASSERT_GT(ports_[i], 0) << *line;
      workers_->push_back(std::make_unique<Subprocess>(std::move(started[i])));
    }
  }

  static void TearDownTestSuite() {
    delete workers_;  // SIGKILLs and reaps each worker
    workers_ = nullptr;
    // Their engine cores follow (PR_SET_PDEATHSIG) and, orphaned, come to us to be reaped.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!testing::ServeTest::Descendants().empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
    }
    EXPECT_TRUE(testing::ServeTest::Descendants().empty()) << "processes left behind";
    for (pid_t pid : testing::ServeTest::Descendants()) kill(pid, SIGKILL);
    if (events_dir != nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(*events_dir, ec);  // sockets of killed workers stay behind
      delete events_dir;
      events_dir = nullptr;
    }
  }

  void SetUp() override {
    ASSERT_NE(workers_, nullptr);
    ASSERT_EQ(workers_->size(), static_cast<size_t>(kWorkers)) << "the workers did not start";
  }

  void TearDown() override { StopRouter(); }

  // Starts the router in front of `worker_indexes` (default: all) with `flags`.
  void StartRouter(const std::vector<std::string>& flags,
                   std::vector<int> worker_indexes = {0, 1, 2}) {
    std::vector<std::string> argv = {testing::BinDir() + "/vllm-launch", "router", "--port", "0"};
    argv.push_back("--worker-urls");
    for (int i : worker_indexes) argv.push_back(Url(ports_[i]));
    argv.insert(argv.end(), flags.begin(), flags.end());
    router_ = StartAndWaitReady(argv, &router_port_);
    ASSERT_NE(router_, nullptr);
  }

  void StopRouter() {
    if (router_ == nullptr) return;
    router_->Kill(SIGTERM);
    auto status = router_->Wait(absl::Seconds(10));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << testing::DescribeWaitStatus(*status);
    router_.reset();
  }

  // A greedy completion through the router; the response.
  absl::StatusOr<testing::HttpResponse> Complete(const std::string& prompt, int max_tokens = 8) {
    const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    return testing::Http(router_port_, "POST", "/v1/completions", body.dump());
  }

  void ExpectCompletionWorks(const std::string& policy) {
    SCOPED_TRACE(policy);
    auto r = Complete("In the beginning");
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_FALSE(r->Json()["choices"][0].value("text", "").empty()) << r->body;

    const json chat = {{"messages", {{{"role", "user"}, {"content", "And God said"}}}},
                       {"max_tokens", 6},
                       {"user", "alice"}};
    auto c = testing::Http(router_port_, "POST", "/v1/chat/completions", chat.dump());
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->status, 200) << c->body;
    EXPECT_EQ(c->Json()["object"], "chat.completion") << c->body;

    const json stream = {{"prompt", "Let there be light"}, {"max_tokens", 10}, {"stream", true}};
    testing::StreamResult s = testing::RunStream(router_port_, "/v1/completions", stream,
                                                 absl::Now() + absl::Seconds(30));
    EXPECT_EQ(s.status, 200) << s.error;
    EXPECT_TRUE(s.done) << s.error;
    EXPECT_GE(s.events.size(), 2u);
  }

  static std::vector<std::unique_ptr<Subprocess>>* workers_;
  static int ports_[kWorkers];
  std::unique_ptr<Subprocess> router_;
  int router_port_ = 0;
};

std::vector<std::unique_ptr<Subprocess>>* RouterProcessTest::workers_ = nullptr;
int RouterProcessTest::ports_[kWorkers] = {};

TEST_F(RouterProcessTest, EveryPolicyServesCompletionsChatAndStreams) {
  for (const char* policy :
       {"round_robin", "random", "power_of_two", "cache_aware", "consistent_hash"}) {
    ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", policy}));
    ExpectCompletionWorks(policy);
    if (std::string(policy) == "round_robin") {
      // The endpoints the router answers itself.
      auto health = testing::Http(router_port_, "GET", "/health", "", "");
      ASSERT_TRUE(health.ok());
      EXPECT_EQ(health->status, 200);
      auto models = testing::Http(router_port_, "GET", "/v1/models", "", "");
      ASSERT_TRUE(models.ok());
      EXPECT_EQ(models->status, 200);
      EXPECT_EQ(models->Json()["data"][0].value("id", ""), "kjv-llama-tiny") << models->body;
      // The workers' token-id endpoints, passed through.
      auto tok = testing::Http(router_port_, "POST", "/tokenize",
                               json{{"prompt", "In the beginning"}}.dump());
      ASSERT_TRUE(tok.ok());
      EXPECT_EQ(tok->status, 200) << tok->body;
      const json ids = tok->Json()["tokens"];
      EXPECT_GE(ids.size(), 3u) << tok->body;
      auto detok = testing::Http(router_port_, "POST", "/detokenize", json{{"tokens", ids}}.dump());
      ASSERT_TRUE(detok.ok());
      EXPECT_EQ(detok->status, 200) << detok->body;
      EXPECT_TRUE(absl::EndsWith(detok->Json().value("prompt", ""), "In the beginning"))
          << detok->body;
      auto bad = testing::Http(router_port_, "POST", "/v1/completions", "not json");
      ASSERT_TRUE(bad.ok());
      EXPECT_EQ(bad->status, 400);
      EXPECT_TRUE(bad->Json()["error"].contains("message")) << bad->body;
      auto missing = testing::Http(router_port_, "GET", "/nowhere", "", "");
      ASSERT_TRUE(missing.ok());
      EXPECT_EQ(missing->status, 404);
      // Round robin: the three requests above went one to each worker.
      const testing::MetricSamples m = testing::ScrapeMetrics(router_port_);
      for (int i = 0; i < kWorkers; ++i) {
        EXPECT_GE(WorkerSeries(m, "vllm_router_requests_total", ports_[i]), 1) << i;
        EXPECT_EQ(WorkerSeries(m, "vllm_router_worker_healthy", ports_[i]), 1) << i;
        EXPECT_EQ(WorkerSeries(m, "vllm_router_outstanding_requests", ports_[i]), 0) << i;
      }
    }
    ASSERT_NO_FATAL_FAILURE(StopRouter());
  }
}

// Sequential requests reuse the router's keep-alive connections to the workers: 30 requests
// round-robin over the workers open about one connection per worker, not one per request.
TEST_F(RouterProcessTest, SequentialRequestsReuseWorkerConnections) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", "round_robin"}));
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 1}};
  for (int i = 0; i < 30; ++i) {
    auto r = testing::Http(router_port_, "POST", "/v1/completions", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
  }
  const testing::MetricSamples m = testing::ScrapeMetrics(router_port_);
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_EQ(WorkerSeries(m, "vllm_router_requests_total", ports_[i]), 10) << i;
    EXPECT_LE(WorkerSeries(m, "vllm_router_upstream_connections_total", ports_[i]), 2) << i;
  }
  ASSERT_NO_FATAL_FAILURE(StopRouter());
}

TEST_F(RouterProcessTest, OversizedBodyIs413) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--max-payload-size", "1000"}));
  const json body = {{"prompt", std::string(5000, 'a')}, {"max_tokens", 1}};
  auto r = testing::Http(router_port_, "POST", "/v1/completions", body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 413) << r->body;
}

TEST_F(RouterProcessTest, CacheAwareSendsARepeatedLongPromptToOneWorker) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", "cache_aware"}));
  const std::string prompt =
      "And God said, Let there be light: and there was light. And God saw the light, that it "
      "was good: and God divided the light from the darkness.";
  constexpr int kRepeats = 6;
  double hits_before[kWorkers];
  for (int i = 0; i < kWorkers; ++i) hits_before[i] = PrefixCacheHits(ports_[i]);
  for (int i = 0; i < kRepeats; ++i) {
    auto r = Complete(prompt, 4);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
  }
  const testing::MetricSamples m = testing::ScrapeMetrics(router_port_);
  std::multiset<double> counts;
  for (int i = 0; i < kWorkers; ++i) {
    counts.insert(WorkerSeries(m, "vllm_router_requests_total", ports_[i]));
  }
  EXPECT_EQ(counts, (std::multiset<double>{0, 0, kRepeats}));
  // The workers' own prefix caches agree: the repeats hit on the worker that got them (the
  // prompt's full block, at least 5 times), and nowhere else.
  for (int i = 0; i < kWorkers; ++i) {
    const double gained = PrefixCacheHits(ports_[i]) - hits_before[i];
    if (WorkerSeries(m, "vllm_router_requests_total", ports_[i]) == kRepeats) {
      EXPECT_GE(gained, (kRepeats - 1) * 16) << "worker " << i;
    } else {
      EXPECT_EQ(gained, 0) << "worker " << i;
    }
  }
  // Unrelated prompts spread out again (idle workers, smallest tree first).
  for (const char* other : {"Blessed are the meek", "The LORD is my shepherd"}) {
    auto r = Complete(other, 2);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
  }
  const testing::MetricSamples after = testing::ScrapeMetrics(router_port_);
  int used = 0;
  for (int i = 0; i < kWorkers; ++i) {
    used += WorkerSeries(after, "vllm_router_requests_total", ports_[i]) > 0 ? 1 : 0;
  }
  EXPECT_EQ(used, 3);
}

// kv_aware: the router learns from the workers' KV-cache events which worker holds which
// prefix, and sends a request sharing a long prefix there.
TEST_F(RouterProcessTest, KvAwareFollowsTheWorkersCachedBlocks) {
  std::vector<std::string> flags = {
      "--policy", "kv_aware", "--model-path",
      (std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny").string()};
  for (int i = 0; i < kWorkers; ++i) {
    flags.push_back("--kv-event-source");
    flags.push_back(absl::StrCat(Url(ports_[i]), "=", EventsEndpoint(i)));
  }
  ASSERT_NO_FATAL_FAILURE(StartRouter(flags));
  const std::string prompt =
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
      "the face of the waters. And God said, Let there be light: and there was light.";
  auto first = Complete(prompt, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->status, 200) << first->body;
  int holder = -1;
  const testing::MetricSamples m = testing::ScrapeMetrics(router_port_);
  for (int i = 0; i < kWorkers; ++i) {
    if (WorkerSeries(m, "vllm_router_requests_total", ports_[i]) == 1) holder = i;
  }
  ASSERT_GE(holder, 0);
  // The holder's engine reports the prompt's blocks (the index counts them; before this only
  // the router's own prediction knew).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (WorkerSeries(testing::ScrapeMetrics(router_port_), "vllm_router_kv_blocks",
                      ports_[holder]) < 3 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
  }
  ASSERT_GE(
      WorkerSeries(testing::ScrapeMetrics(router_port_), "vllm_router_kv_blocks", ports_[holder]),
      3);
  const double hits_before = PrefixCacheHits(ports_[holder]);
  // Prompts extending it go to the holder, and hit its prefix cache.
  for (int i = 0; i < 4; ++i) {
    auto r = Complete(absl::StrCat(prompt, " And God saw the light ", i), 2);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
  }
  const testing::MetricSamples after = testing::ScrapeMetrics(router_port_);
  EXPECT_EQ(WorkerSeries(after, "vllm_router_requests_total", ports_[holder]), 5);
  EXPECT_GT(PrefixCacheHits(ports_[holder]), hits_before + 4 * 16);
  // Chat requests are tokenized through the chat template, and routed too.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "And God said"}}}},
                     {"max_tokens", 2}};
  auto c = testing::Http(router_port_, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(after.at("vllm_router_untokenized_requests_total"), 0);
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_GT(WorkerSeries(after, "vllm_router_kv_event_batches_total", ports_[i]), -1);
    EXPECT_EQ(WorkerSeries(after, "vllm_router_kv_event_errors_total", ports_[i]), 0);
  }
}

TEST_F(RouterProcessTest, WorkersAddedAndRemovedAtRunTimeWithoutDroppingAStream) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", "round_robin"}, {0}));
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 60}, {"stream", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto stream = testing::SseStream::Open(router_port_, "/v1/completions", body, deadline);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ(stream->status(), 200) << stream->error_body();
  auto first = stream->Next(deadline);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();

  // Add worker 1, remove worker 0 (the one serving the stream).
  auto add = testing::Http(router_port_, "POST", "/workers", json{{"url", Url(ports_[1])}}.dump());
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(add->status, 200) << add->body;
  EXPECT_TRUE(add->Json().value("healthy", false)) << add->body;
  auto dup = testing::Http(router_port_, "POST", "/workers", json{{"url", Url(ports_[1])}}.dump());
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->status, 409);
  auto del = testing::Http(router_port_, "DELETE", "/workers?url=" + Url(ports_[0]), "", "");
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(WorkerHealth(router_port_), (std::map<std::string, bool>{{Url(ports_[1]), true}}));

  // The stream in flight on the removed worker still ends normally.
  EXPECT_TRUE(ReadToEnd(*stream, deadline).done);
  // New requests go to the added worker.
  auto r = Complete("And God said");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200) << r->body;
  const testing::MetricSamples m = testing::ScrapeMetrics(router_port_);
  EXPECT_EQ(WorkerSeries(m, "vllm_router_requests_total", ports_[1]), 1);
}

TEST_F(RouterProcessTest, ClientLeavingEndsTheRequestOnTheWorker) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", "round_robin"}, {2}));
  const int worker = ports_[2];
  const double aborted_before = Aborted(worker);
  json body = {
      {"prompt", "In the beginning"}, {"max_tokens", 1000}, {"stream", true}, {"ignore_eos", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  {
    auto stream = testing::SseStream::Open(router_port_, "/v1/completions", body, deadline);
    ASSERT_TRUE(stream.ok()) << stream.status();
    ASSERT_EQ(stream->status(), 200);
    auto first = stream->Next(deadline);
    ASSERT_TRUE(first.ok() && first->has_value());
  }  // closed here, mid-stream
  // The router notices, closes the upstream connection, and the worker aborts the request.
  while (Aborted(worker) < aborted_before + 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
  }
  EXPECT_EQ(Aborted(worker), aborted_before + 1);

  // The same for a non-streamed request: the client leaves while the worker computes.
  body["stream"] = false;
  auto fd = testing::SendAndKeepOpen(router_port_, "/v1/completions", body.dump());
  ASSERT_TRUE(fd.ok()) << fd.status();
  while (WorkerSeries(testing::ScrapeMetrics(router_port_), "vllm_router_outstanding_requests",
                      worker) < 1 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  close(*fd);
  // The router closes its upstream connection at once (the attempt ends: nothing outstanding).
  // Whether the worker aborts a non-streamed request then is the worker's business.
  while (WorkerSeries(testing::ScrapeMetrics(router_port_), "vllm_router_outstanding_requests",
                      worker) != 0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  const testing::MetricSamples router = testing::ScrapeMetrics(router_port_);
  EXPECT_EQ(router.at("vllm_router_client_disconnects_total"), 2);
  EXPECT_EQ(WorkerSeries(router, "vllm_router_outstanding_requests", worker), 0);
}

// Connects to 127.0.0.1:port and sends nothing; -1 on failure.
int ConnectIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer closed `fd` (a read returns 0 or an error) before `deadline`.
bool ClosedByPeer(int fd, absl::Time deadline) {
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (poll(&p, 1, std::max(ms, 1)) <= 0) continue;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return true;
  }
  return false;
}

TEST_F(RouterProcessTest, SigtermDrainsTheStreamInFlightThenExits) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", "round_robin"}, {1}));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const int idle = ConnectIdle(router_port_);
  ASSERT_GE(idle, 0);
  const json body = {{"prompt", "In the beginning"},
                     {"max_tokens", 200},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"ignore_eos", true}};
  auto stream = testing::SseStream::Open(router_port_, "/v1/completions", body, deadline);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ(stream->status(), 200) << stream->error_body();
  auto first = stream->Next(deadline);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();

  router_->Kill(SIGTERM);
  // The idle connection is closed, and no new connection is accepted.
  EXPECT_TRUE(ClosedByPeer(idle, deadline));
  close(idle);
  bool refused = false;
  while (!refused && absl::Now() < deadline) {
    const int fd = ConnectIdle(router_port_);
    refused = fd < 0;
    if (fd >= 0) close(fd);
    if (!refused) absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
  }
  EXPECT_TRUE(refused);

  // The stream in flight still ends normally, with every token (an event may carry several:
  // the usage chunk counts them).
  const StreamEnd end = ReadToEnd(*stream, deadline);
  EXPECT_TRUE(end.done);
  const json usage = json::parse(end.last, nullptr, false);
  ASSERT_TRUE(usage.is_object()) << end.last;
  EXPECT_EQ(usage["usage"].value("completion_tokens", 0), 200) << end.last;
  // Then the router exits by itself, with status 0.
  auto status = router_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
  router_.reset();
}

// Last: it kills worker 0 and restarts it on the same port.
TEST_F(RouterProcessTest, KilledWorkerIsRetriedAroundEjectedAndReadmitted) {
  ASSERT_NO_FATAL_FAILURE(StartRouter({"--policy", "round_robin", "--health-check-interval-secs",
                                       "1", "--health-check-timeout-secs", "1",
                                       "--health-failure-threshold", "1", "--max-retries", "2"}));
  // Round robin starts at worker 0: a long stream goes there, then worker 0 dies mid-stream.
  // Bytes already reached the client, so no retry: the stream ends with an SSE error event.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const json long_stream = {
      {"prompt", "In the beginning"}, {"max_tokens", 900}, {"stream", true}, {"ignore_eos", true}};
  auto stream = testing::SseStream::Open(router_port_, "/v1/completions", long_stream, deadline);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ(stream->status(), 200);
  auto first = stream->Next(deadline);
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();

  (*workers_)[0]->Kill(SIGKILL);
  ASSERT_TRUE((*workers_)[0]->Wait(absl::Seconds(10)).ok());
  const absl::Time killed = absl::Now();

  bool saw_error = false;
  bool saw_done = false;
  while (true) {
    auto next = stream->Next(deadline);
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    saw_done |= **next == "[DONE]";
    saw_error |= absl::StrContains(**next, "\"error\"");
  }
  EXPECT_TRUE(saw_error);
  EXPECT_FALSE(saw_done);

  // Round robin now sends one in three to the dead worker (next: workers 1, 2, then 0), which
  // fails to connect: retried on another worker, and the worker is ejected at once
  // (--health-failure-threshold 1). Every request succeeds.
  for (int i = 0; i < 6; ++i) {
    auto r = Complete("And the earth was", 4);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
  }
  const testing::MetricSamples m = testing::ScrapeMetrics(router_port_);
  // A retry for each failed attempt on the dead worker (none only if a health check ejected
  // it before the third request, which the 1 s interval makes unlikely).
  EXPECT_EQ(m.at("vllm_router_retries_total"),
            WorkerSeries(m, "vllm_router_worker_failures_total", ports_[0]));
  // Ejected within a health interval (plus the check's timeout and some slack).
  const absl::Time eject_deadline = killed + absl::Seconds(1 + 1 + 3);
  while (WorkerHealth(router_port_)[Url(ports_[0])] && absl::Now() < eject_deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // polling a condition with a deadline
  }
  EXPECT_FALSE(WorkerHealth(router_port_)[Url(ports_[0])]);
  auto health = testing::Http(router_port_, "GET", "/health", "", "");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);  // two workers still serve

  // Restart it on its port: re-admitted after a successful check.
  int port = 0;
  (*workers_)[0].reset();
  (*workers_)[0] = StartAndWaitReady(WorkerArgv(0, ports_[0]), &port);
  ASSERT_NE((*workers_)[0], nullptr);
  ASSERT_EQ(port, ports_[0]);
  const absl::Time admit_deadline = absl::Now() + absl::Seconds(10);
  while (!WorkerHealth(router_port_)[Url(ports_[0])] && absl::Now() < admit_deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // polling a condition with a deadline
  }
  EXPECT_TRUE(WorkerHealth(router_port_)[Url(ports_[0])]);
  const double before =
      WorkerSeries(testing::ScrapeMetrics(router_port_), "vllm_router_requests_total", ports_[0]);
  for (int i = 0; i < 3; ++i) {
    auto r = Complete("And the earth was", 2);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
  }
  const double after =
      WorkerSeries(testing::ScrapeMetrics(router_port_), "vllm_router_requests_total", ports_[0]);
  EXPECT_GE(after, before + 1);
}

}  // namespace
}  // namespace vllm
