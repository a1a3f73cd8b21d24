// Every serve flag does what it says: for each flag `vllm-launch --help` lists, an effect seen
// in the running processes — the engine core's "Initializing a V1 LLM engine with config:" line
// (the config it received on its descriptor), the KV-cache block count the server reports, the
// processes under the server, HTTP behaviour, metrics — or, for a flag that cannot work yet, a
// refusal that says why. A flag in --help that no check here covers fails the test, so a new
// flag needs a row before it lands.
//
// Among the rows: --block-size 32 with --kv-cache-memory 32MiB gives a quarter of the default
// blocks, --num-gpu-blocks-override 64 gives 64; --distributed-executor-backend mp makes one
// worker, -tp 2 two; --served-model-name and --max-model-len show in /v1/models; 401 without the
// --api-key; prefix-cache hits on a repeated prompt; --chat-template gives a shorter prompt; an
// idle connection is evicted past --max-connections 4; --shutdown-timeout 7 shows in the drain
// message; -dp 2 starts two engine cores that both serve; a head and a --headless node on
// 127.0.0.1 with a key from make-cluster-key (the node's line names its ranks and the head's
// port, the head logs the join, no "admit anyone" warning); -dph (only ranks 2-3 in /metrics);
// -dpn 2 -dpe (one engine, labelled 2; -dpe alone exits 2); -asc 2 (both processes answer);
// pipeline parallelism exits 2 naming itself.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "tests/integration/serve/serve_http_flag_checks.h"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm::testing {
namespace {

using ::testing::HasSubstr;

const std::string kModel = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";

// Runs `vllm-launch ARGS` to its end (stdout and stderr together) within `timeout`.
struct CliResult {
  int exit_code = -1;
  std::string output;
};
CliResult RunCli(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(30)) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                   BinDir() + "/vllm-launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  CliResult r;
  auto p = Subprocess::Spawn(argv);
  if (!p.ok()) {
    r.output = p.status().ToString();
    return r;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    auto line = p->ReadLine(deadline - absl::Now());
    if (!line.ok()) break;  // end of output (or the deadline)
    absl::StrAppend(&r.output, *line, "\n");
  }
  auto status = p->Wait(absl::Seconds(5));
  if (status.ok() && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  return r;
}

// The flags --help lists (every spelling: "--enable-prefix-caching,--no-enable-prefix-caching"
// gives both).
std::set<std::string> HelpFlags() {
  const CliResult help = RunCli({"--help"});
  std::set<std::string> flags;
  const std::regex option_line(R"(^\s+((?:-[a-z]+,)?--[a-z0-9-]+(?:,--[a-z0-9-]+)*))");
  const std::regex flag(R"(--[a-z0-9-]+)");
  std::istringstream in(help.output);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, option_line)) continue;
    const std::string names = m[1];
    for (auto it = std::sregex_iterator(names.begin(), names.end(), flag);
         it != std::sregex_iterator(); ++it) {
      flags.insert(it->str());
    }
  }
  return flags;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The number in "(N KV-cache blocks" of the server's "serving ..." log line; -1 when absent.
int64_t ReportedBlocks(const std::string& log) {
  const std::regex re(R"(\((\d+) KV-cache blocks)");
  std::smatch m;
  int64_t n = -1;
  if (std::regex_search(log, m, re)) (void)absl::SimpleAtoi(m[1].str(), &n);
  return n;
}

// The engine core's config line.
std::string ConfigLine(const std::string& log) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "Initializing a V1 LLM engine with config:")) {
      return std::string(line);
    }
  }
  return "";
}

class ServeFlagsTest : public ServeTest {
 protected:
  void TearDown() override {
    ServeTest::TearDown();
    std::remove(log_path_.c_str());
  }

  // Starts the server with `args`, its stderr (and its engine core's and workers') in a file.
  void Start(std::vector<std::string> args) {
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    extra_args_.clear();
    log_path_ = absl::StrCat(::testing::TempDir(), "/serve_flags_", getpid(), ".log");
    std::remove(log_path_.c_str());
    StartServer(args, {"/bin/sh", "-c", absl::StrCat("exec \"$0\" \"$@\" 2>>", log_path_)});
    if (HasFatalFailure()) ADD_FAILURE() << "the server's log:\n" << ReadFile(log_path_);
  }
  // Waits (by a deadline) until the log holds the line with `marker`, and returns the log.
  std::string Log(const std::string& marker = "KV-cache blocks") {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::string log = ReadFile(log_path_);
    while (!absl::StrContains(log, marker) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
      log = ReadFile(log_path_);
    }
    return log;
  }
  // SIGTERM, wait for the exit, and the whole log.
  std::string Stop() {
    server_->Kill(SIGTERM);
    auto status = server_->Wait(absl::Seconds(30));
    EXPECT_TRUE(status.ok()) << status.status();
    return ReadFile(log_path_);
  }

  // Records that `flag` was seen to work (the check itself is an EXPECT at the call site).
  void Covered(const std::string& flag, bool ok, const std::string& detail = "") {
    EXPECT_TRUE(ok) << flag << ": no effect seen. " << detail;
    covered_.insert(flag);
  }
  // The config line holds `field=value`.
  void InConfig(const std::string& flag, const std::string& config, const std::string& expected) {
    Covered(flag, absl::StrContains(config, expected),
            absl::StrCat("expected '", expected, "' in: ", config));
  }

  // --generation-config, --override-generation-config, --chat-template-content-format on the
  // server Start gave them (below).
  void CheckRequestDefaults(const std::string& gen_dir);
  // --response-role, --enable-prompt-tokens-details, --enable-per-request-metrics,
  // --enable-log-outputs (with --enable-log-requests) and --enable-log-deltas on that server.
  void CheckResponseFlags();

  std::string log_path_;
  std::vector<std::string> extra_args_;  // for the next Start only
  std::set<std::string> covered_;
};

HttpResponse Request(int port, const std::string& method, const std::string& path,
                     const std::string& body, const std::string& api_key) {
  std::string raw = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\n",
                                 "Connection: close\r\nContent-Type: application/json\r\n",
                                 "Content-Length: ", body.size(), "\r\n");
  if (!api_key.empty()) absl::StrAppend(&raw, "Authorization: Bearer ", api_key, "\r\n");
  absl::StrAppend(&raw, "\r\n", body);
  absl::StatusOr<HttpResponse> r = HttpRaw(port, raw);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.value_or(HttpResponse{});
}

int PromptTokensOfChat(int port, const std::string& key) {
  const nlohmann::json chat = {{"messages", {{{"role", "user"}, {"content", "In the beginning"}}}},
                               {"max_tokens", 1}};
  HttpResponse r = Request(port, "POST", "/v1/chat/completions", chat.dump(), key);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.Json().value("usage", nlohmann::json::object()).value("prompt_tokens", -1);
}

// Sends the same prompt twice and returns the prefix-cache hits the server counted.
double PrefixHitsOfARepeat(int port, const std::string& key) {
  const nlohmann::json body = {{"prompt", std::vector<int>(100, 7)}, {"max_tokens", 1}};
  for (int i = 0; i < 2; ++i) {
    HttpResponse r = Request(port, "POST", "/v1/completions", body.dump(), key);
    EXPECT_EQ(r.status, 200) << r.body;
  }
  return SumOf(ParseMetrics(Request(port, "GET", "/metrics", "", key).body),
               "vllm:prefix_cache_hits_total");
}

// Processes under the server (engine core, workers), the server excluded.
size_t ProcessesUnder(pid_t server) {
  size_t n = 0;
  std::vector<pid_t> frontier = {server};
  while (!frontier.empty()) {
    const pid_t p = frontier.back();
    frontier.pop_back();
    for (pid_t c : ChildrenOf(p)) {
      ++n;
      frontier.push_back(c);
    }
  }
  return n;
}

// True when the server closes `fd` (reads end of file) by `deadline`.
bool ClosedByServer(int fd, absl::Duration timeout) {
  pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) return false;
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

bool HealthOk(int port) {
  absl::StatusOr<HttpResponse> r = Http(port, "GET", "/health");
  return r.ok() && r->status == 200;
}

int ConnectIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}
void ServeFlagsTest::CheckRequestDefaults(const std::string& gen_dir) {
  auto complete = [&](const nlohmann::json& extra) {
    nlohmann::json body = {{"prompt", "In the beginning"}};
    body.update(extra);
    return Request(port_, "POST", "/v1/completions", body.dump(), "").Json();
  };
  auto tokens = [](const nlohmann::json& r) {
    return r.contains("usage") ? r["usage"].value("completion_tokens", -1) : -1;
  };
  auto text = [](const nlohmann::json& r) {
    return r.contains("choices") ? r["choices"][0].value("text", "") : "";
  };
  // No max_tokens: the override's 3, not the folder's 50; max_tokens 10: cut to it (a folder's
  // max_new_tokens caps requests, as vLLM's override_max_tokens); greedy as the folder says.
  const nlohmann::json plain = complete(nlohmann::json::object());
  const nlohmann::json capped = complete({{"max_tokens", 10}});
  const nlohmann::json greedy = complete({{"temperature", 0}});
  Covered("--override-generation-config", tokens(plain) == 3 && tokens(capped) == 3,
          absl::StrCat(plain.dump(), capped.dump()));
  const std::string log = Log("Default vLLM sampling parameters have been overridden");
  Covered("--generation-config",
          text(plain) == text(greedy) && !text(plain).empty() &&
              absl::StrContains(log, absl::StrCat("overridden by ", gen_dir,
                                                  ": `{'temperature': 0.0, 'max_tokens': 3}`")),
          absl::StrCat(plain.dump(), greedy.dump(), log));
  // "openai": the template sees the content as a list of parts (its "list" branch).
  auto count = [&](const std::string& prompt) {
    const nlohmann::json body = {{"prompt", prompt}, {"add_special_tokens", false}};
    return Request(port_, "POST", "/tokenize", body.dump(), "").Json().value("count", -1);
  };
  auto chat = [&](const nlohmann::json& kwargs) {
    nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Choose"}}}},
                           {"max_tokens", 1}};
    if (!kwargs.is_null()) body["chat_template_kwargs"] = kwargs;
    const nlohmann::json r = Request(port_, "POST", "/v1/chat/completions", body.dump(), "").Json();
    return r.contains("usage") ? r["usage"].value("prompt_tokens", -1) : -1;
  };
  const int prompt_tokens = chat(nullptr);
  Covered(
      "--chat-template-content-format",
      prompt_tokens == count("hi list list list Choose") && prompt_tokens != count("hi S:Choose"),
      absl::StrCat(prompt_tokens));
  // The template's `greeting` from --default-chat-template-kwargs, a request's own winning.
  Covered("--default-chat-template-kwargs",
          chat({{"greeting", "hello there my friend"}}) ==
                  count("hello there my friend list list list Choose") &&
              prompt_tokens != chat({{"greeting", "hello there my friend"}}),
          absl::StrCat(prompt_tokens));
  const nlohmann::json logprobs = complete({{"logprobs", 1}, {"max_tokens", 1}});
  Covered("--return-tokens-as-token-ids",
          logprobs.contains("choices") &&
              absl::StartsWith(logprobs["choices"][0]["logprobs"]["tokens"][0].get<std::string>(),
                               "token_id:"),
          logprobs.dump());
  // A stream without stream_options carries usage in every chunk.
  const nlohmann::json stream_body = {{"prompt", "In the beginning"}, {"stream", true}};
  const std::string sse = Request(port_, "POST", "/v1/completions", stream_body.dump(), "").body;
  Covered("--enable-force-include-usage",
          absl::StrContains(sse, "\"completion_tokens\":1") &&
              absl::StrContains(sse, "\"completion_tokens\":3"),
          sse);
}

void ServeFlagsTest::CheckResponseFlags() {
  auto post = [&](const std::string& path, const nlohmann::json& body) {
    return Request(port_, "POST", path, body.dump(), "");
  };
  auto chat = [&](const nlohmann::json& extra) {
    nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Choose"}}}}};
    body.update(extra);
    return post("/v1/chat/completions", body);
  };
  // The role: --response-role with add_generation_prompt (also a stream's first delta), else
  // the last message's.
  const nlohmann::json narrated = chat(nlohmann::json::object()).Json();
  const nlohmann::json own = chat({{"add_generation_prompt", false}}).Json();
  const std::string chat_sse = chat({{"stream", true}}).body;
  auto role = [](const nlohmann::json& r) {
    return r.contains("choices") ? r["choices"][0]["message"].value("role", "") : "";
  };
  Covered("--response-role",
          role(narrated) == "narrator" && role(own) == "user" &&
              absl::StrContains(chat_sse, R"("role":"narrator")"),
          absl::StrCat(narrated.dump(), own.dump(), chat_sse));
  // A long prompt: no hits the first time, a block's worth and more the second (and in a
  // stream's usage chunk).
  const nlohmann::json long_prompt = {{"prompt", std::vector<int>(100, 9)}, {"max_tokens", 3}};
  auto cached = [](const nlohmann::json& usage) {
    return usage.is_object() && usage.contains("prompt_tokens_details")
               ? usage["prompt_tokens_details"].value("cached_tokens", -1)
               : -1;
  };
  const nlohmann::json fresh = post("/v1/completions", long_prompt).Json();
  const nlohmann::json again = post("/v1/completions", long_prompt).Json();
  nlohmann::json streamed = long_prompt;
  streamed["stream"] = true;
  const std::string sse = post("/v1/completions", streamed).body;
  // Chat also reports the prompt tokens its request wrote to the prefix cache (vLLM's
  // created_cache_tokens from PrefillStats.finalize): a fresh prompt's full blocks (of 16; the
  // last partial block not counted), and on a repeat what the hits left of them. Completions
  // do not report it.
  std::string fresh_text;
  for (int i = 0; i < 6; ++i) fresh_text += "Fresh words for the cache, never sent before. ";
  const nlohmann::json fresh_chat_body = {
      {"messages", {{{"role", "user"}, {"content", fresh_text}}}}};
  const nlohmann::json fresh_chat = chat(fresh_chat_body).Json();
  const nlohmann::json again_chat = chat(fresh_chat_body).Json();
  auto detail = [](const nlohmann::json& r, const char* key) -> int64_t {
    const nlohmann::json usage = r.value("usage", nlohmann::json());
    if (!usage.is_object() || !usage.contains("prompt_tokens_details")) return -1;
    return usage["prompt_tokens_details"].value(key, int64_t{-1});
  };
  auto full_blocks = [](const nlohmann::json& r) {
    return r.value("usage", nlohmann::json()).value("prompt_tokens", int64_t{0}) / 16 * 16;
  };
  const bool created_ok =
      full_blocks(fresh_chat) >= 16 && detail(fresh_chat, "cached_tokens") == 0 &&
      detail(fresh_chat, "created_cache_tokens") == full_blocks(fresh_chat) &&
      detail(again_chat, "cached_tokens") >= 16 &&
      detail(again_chat, "cached_tokens") + detail(again_chat, "created_cache_tokens") ==
          full_blocks(again_chat) &&
      detail(fresh, "created_cache_tokens") == -1 &&
      absl::StrContains(chat_sse, R"("created_cache_tokens":)") &&
      !absl::StrContains(sse, "created_cache_tokens");
  Covered("--enable-prompt-tokens-details",
          cached(fresh.value("usage", nlohmann::json())) == 0 &&
              cached(again.value("usage", nlohmann::json())) >= 16 &&
              cached(narrated.value("usage", nlohmann::json())) >= 0 &&
              absl::StrContains(sse, R"("prompt_tokens_details":{"cached_tokens":)") && created_ok,
          absl::StrCat(fresh.dump(), again.dump(), fresh_chat.dump(), again_chat.dump()));
  {
    // Anthropic Messages: the hits are cache_read_input_tokens and the blocks written
    // cache_creation_input_tokens, both out of input_tokens (vLLM's _build_anthropic_usage).
    std::string words;
    for (int i = 0; i < 4; ++i) words += "In the beginning God created the heaven and the earth. ";
    const nlohmann::json msg = {{"model", again.value("model", "")},
                                {"max_tokens", 2},
                                {"messages", {{{"role", "user"}, {"content", words}}}}};
    const nlohmann::json first = post("/v1/messages", msg).Json().value("usage", nlohmann::json());
    const nlohmann::json usage = post("/v1/messages", msg).Json().value("usage", nlohmann::json());
    auto total = [](const nlohmann::json& u) {
      return u.value("input_tokens", int64_t{0}) + u.value("cache_read_input_tokens", int64_t{0}) +
             u.value("cache_creation_input_tokens", int64_t{0});
    };
    EXPECT_TRUE(first.is_object() && first.value("cache_read_input_tokens", -1) == 0 &&
                first.value("cache_creation_input_tokens", int64_t{-1}) == total(first) / 16 * 16 &&
                total(first) >= 16)
        << first.dump();
    EXPECT_TRUE(usage.is_object() && usage.value("cache_read_input_tokens", 0) >= 16 &&
                usage.value("cache_read_input_tokens", int64_t{0}) +
                        usage.value("cache_creation_input_tokens", int64_t{-1}) ==
                    total(usage) / 16 * 16 &&
                usage.value("input_tokens", -1) >= 0)
        << usage.dump();
  }
  // vLLM's PerRequestMetrics of the single choice: times in ms, throughput per second; a
  // stream's ride on its usage chunk.
  const nlohmann::json m = again.value("metrics", nlohmann::json());
  auto at_least = [&](const char* field, double low) {
    return m.is_object() && m.contains(field) && m[field].is_number() &&
           m[field].get<double>() >= low;
  };
  Covered("--enable-per-request-metrics",
          at_least("time_to_first_token_ms", 0) && at_least("queue_time_ms", 0) &&
              at_least("generation_time_ms", 0) && at_least("tokens_per_second", 1e-9) &&
              (at_least("mean_itl_ms", 0) || again["usage"].value("completion_tokens", 0) < 2) &&
              m.contains("speculative_decoding") &&
              absl::StrContains(sse, R"("metrics":{"generation_time_ms":)"),
          again.dump());
  // vLLM's RequestLogger lines: the whole output at INFO, and each streamed delta.
  const std::string id = again.value("id", "?");
  const std::string log = Log(absl::StrCat("Generated response ", id, ": output: "));
  Covered("--enable-log-outputs",
          absl::StrContains(log, absl::StrCat("Generated response ", id, ": output: '")) &&
              absl::StrContains(log, "finish_reason: length") &&
              absl::StrContains(log, " (streaming complete): output: ") &&
              absl::StrContains(log, "finish_reason: streaming_complete"),
          log);
  Covered("--enable-log-deltas", absl::StrContains(log, " (streaming delta): output: '"), log);
}

TEST_F(ServeFlagsTest, EveryFlagHasAnObservableEffect) {
  const std::set<std::string> help = HelpFlags();
  ASSERT_GT(help.size(), 30u) << "could not read the flags from --help";

  // --help and --version answer without starting anything.
  {
    const CliResult h = RunCli({"--help"});
    Covered("--help", h.exit_code == 0 && absl::StrContains(h.output, "--tensor-parallel-size"));
    const CliResult v = RunCli({"--version"});
    Covered("--version", v.exit_code == 0 && absl::StrContains(v.output, "vllm-launch "), v.output);
  }

  // --kv-events-config: its effect (the engine publishes KV-cache events) is
  // serve_kv_events_test's; here, a bad value is refused before anything starts.
  {
    const CliResult r = RunCli({"--kv-events-config", R"({"enable_kv_cache_events": "yes"})"});
    Covered("--kv-events-config",
            r.exit_code == 2 && absl::StrContains(r.output, "--kv-events-config") &&
                absl::StrContains(r.output, "enable_kv_cache_events"),
            r.output);
  }

  // --kv-transfer-config, --kv-offloading-size, --kv-offloading-backend: what the connectors
  // do is their own tests'; here, a value this runtime cannot honour is refused before
  // anything starts, naming the flag.
  {
    const CliResult r = RunCli({"--kv-transfer-config",
                                R"({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})"});
    Covered("--kv-transfer-config",
            r.exit_code == 2 && absl::StrContains(r.output, "--kv-transfer-config kv_connector") &&
                absl::StrContains(r.output, "LMCacheConnectorV1"),
            r.output);
    const CliResult size = RunCli({"--kv-offloading-size", "0"});
    Covered("--kv-offloading-size",
            size.exit_code == 2 && absl::StrContains(size.output, "--kv-offloading-size"),
            size.output);
    const CliResult backend =
        RunCli({"--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache"});
    Covered("--kv-offloading-backend",
            backend.exit_code == 2 &&
                absl::StrContains(backend.output, "--kv-offloading-backend lmcache"),
            backend.output);
  }

  {
    // --reasoning-parser needs <think> and </think> in the tokenizer (vLLM raises the same);
    // the bundled model has neither, so the server refuses to start. Its effect on a model
    // that has them is serve_structured_output_test's (ReasoningComesFirst).
    const CliResult r = RunCli({"--reasoning-parser", "deepseek_r1"});
    Covered("--reasoning-parser",
            r.exit_code != 0 && absl::StrContains(r.output, "--reasoning-parser deepseek_r1") &&
                absl::StrContains(r.output, "<think>"),
            r.output);
  }
  {
    // --kv-cache-memory-bytes sets --kv-cache-memory's field (launcher_vllm_serve_flags_test
    // checks 512M gives 512 MiB); here vLLM's human-readable integers reach the parser.
    const CliResult r = RunCli({"--kv-cache-memory-bytes", "1.5K"});
    Covered("--kv-cache-memory-bytes",
            r.exit_code == 2 && absl::StrContains(r.output, "--kv-cache-memory-bytes: decimals"),
            r.output);
  }
  {
    // --tokenizer: only the model's own (serve_args_test: the model's path is accepted).
    const CliResult r = RunCli({"--tokenizer", "other/tokenizer"});
    Covered("--tokenizer",
            r.exit_code == 2 && absl::StrContains(r.output, "--tokenizer 'other/tokenizer'"),
            r.output);
  }
  {
    // Re-joining a silent head is a --headless node's (its effect: multinode_partition_test).
    const CliResult r = RunCli({"--no-rejoin-head"});
    Covered(
        "--no-rejoin-head",
        r.exit_code == 2 && absl::StrContains(r.output, "--no-rejoin-head: only with --headless"),
        r.output);
  }
  {
    // The head's port only means something when engines reach it over TCP.
    const CliResult r = RunCli({"-dpp", "13345"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "--data-parallel-rpc-port")) << r.output;
  }

  // 1. Defaults: the baseline the other runs are compared with (stats lines every 0.5 s).
  setenv("VLLM_LOG_STATS_INTERVAL", "0.5", 1);
  ASSERT_NO_FATAL_FAILURE(Start({}));
  std::string log = Log();
  const int64_t default_blocks = ReportedBlocks(log);
  ASSERT_GT(default_blocks, 16) << log;
  const int default_prompt_tokens = PromptTokensOfChat(port_, "");
  ASSERT_GT(default_prompt_tokens, 0);
  {
    // Without --enable-prompt-tokens-details and --enable-per-request-metrics: neither field.
    const nlohmann::json body = {{"prompt", "In the beginning"}, {"max_tokens", 1}};
    const nlohmann::json r = Request(port_, "POST", "/v1/completions", body.dump(), "").Json();
    EXPECT_TRUE(r.contains("usage") && !r["usage"].contains("prompt_tokens_details") &&
                !r.contains("metrics"))
        << r.dump();
  }
  Covered("--enable-prefix-caching", PrefixHitsOfARepeat(port_, "") > 0);
  EXPECT_EQ(ProcessesUnder(server_->pid()), 1u);   // the engine core; its worker in-process
  log = Log("Engine 000: Avg prompt throughput");  // and uvicorn's access lines
  EXPECT_TRUE(HasAccessLine(log) && HasStatsLine(log)) << log;
  EXPECT_EQ(ServerLoad(port_), 0);  // no --enable-server-load-tracking: 0, as vLLM
  EXPECT_FALSE(absl::StrContains(Request(port_, "GET", "/version", "", "").head, "X-Request-Id"));
  {
    // Far below the default limit, idle connections stay open.
    std::vector<int> idle;
    for (int i = 0; i < 6; ++i) idle.push_back(ConnectIdle(port_));
    EXPECT_TRUE(HealthOk(port_));
    for (int fd : idle) EXPECT_FALSE(ClosedByServer(fd, absl::Milliseconds(50)));
    for (int fd : idle) close(fd);
  }
  Stop();
  server_.reset();

  // 2. Everything else away from its default at once (the single-replica flags).
  const std::string key = "sekrit";
  const std::string chat_template =
      "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tools %}{{ tools | tojson }}"
      "{% endif %}";
  setenv("VLLM_LOGGING_LEVEL", "DEBUG", 1);  // the request log's prompt line
  extra_args_ = WithHttpFlags({}, key);
  ASSERT_NO_FATAL_FAILURE(Start({"--model",
                                 kModel,
                                 "--served-model-name",
                                 "fooname",
                                 "--max-model-len",
                                 "200",
                                 "--seed",
                                 "5",
                                 "--max-logprobs",
                                 "3",
                                 "--max-num-seqs",
                                 "7",
                                 "--max-num-batched-tokens",
                                 "300",
                                 "--long-prefill-token-threshold",
                                 "40",
                                 "--scheduling-policy",
                                 "priority",
                                 "--no-enable-prefix-caching",
                                 "--no-enable-chunked-prefill",
                                 "--block-size",
                                 "32",
                                 "--kv-cache-memory",
                                 "32MiB",
                                 "--dtype",
                                 "bfloat16",
                                 "--gpu-memory-utilization",
                                 "0.5",
                                 "--enforce-eager",
                                 "--stream-interval",
                                 "2",
                                 "--enable-sleep-mode",
                                 "--load-format",
                                 "safetensors",
                                 "--device",
                                 "cpu",
                                 "--distributed-executor-backend",
                                 "mp",
                                 "--host",
                                 "127.0.0.1",
                                 "--max-connections",
                                 "4",
                                 "--shutdown-timeout",
                                 "7",
                                 "--chat-template",
                                 chat_template,
                                 "--structured-outputs-config",
                                 R"({"backend": "xgrammar", "disable_any_whitespace": true})",
                                 "--enable-auto-tool-choice",
                                 "--tool-call-parser",
                                 "hermes",
                                 "--exclude-tools-when-tool-choice-none",
                                 "--max-structured-output-compile-seconds",
                                 "5",
                                 "--speculative-config",
                                 R"({"method": "ngram", "num_speculative_tokens": 3,
                                     "prompt_lookup_min": 1, "prompt_lookup_max": 2})"}));
  unsetenv("VLLM_LOGGING_LEVEL");
  log = Log();
  const std::string config = ConfigLine(log);
  ASSERT_FALSE(config.empty()) << log;
  InConfig("--model", config, absl::StrCat("model='", kModel, "'"));
  InConfig("--seed", config, "seed=5");
  InConfig("--max-num-seqs", config, "max_num_seqs=7");
  InConfig("--max-num-batched-tokens", config, "max_num_batched_tokens=300");
  InConfig("--long-prefill-token-threshold", config, "long_prefill_token_threshold=40");
  InConfig("--scheduling-policy", config, "scheduling_policy=priority");
  InConfig("--stream-interval", config, "stream_interval=2");
  InConfig("--enable-sleep-mode", config, "enable_sleep_mode=True");  // serve_endpoints_test
  InConfig("--no-enable-chunked-prefill", config, "enable_chunked_prefill=False");
  // CUDA-only values reach the engine (the CPU computes in float32 without graphs anyway).
  InConfig("--dtype", config, "dtype=bfloat16");
  InConfig("--gpu-memory-utilization", config, "gpu_memory_utilization=0.5");
  InConfig("--enforce-eager", config, "enforce_eager=True");
  InConfig("--load-format", config, "load_format=safetensors");
  InConfig("--device", config, "device_config=cpu");
  InConfig("--distributed-executor-backend", config, "distributed_executor_backend=mp");
  // One worker process under the engine core: the mp executor, not the in-process one.
  Covered("--distributed-executor-backend", ProcessesUnder(server_->pid()) == 2u,
          absl::StrCat(ProcessesUnder(server_->pid()), " processes under the server"));
  // Half the memory and blocks twice the size: a quarter of the blocks.
  const int64_t blocks = ReportedBlocks(log);
  Covered("--block-size", blocks == default_blocks / 4,
          absl::StrCat(blocks, " blocks, default ", default_blocks));
  Covered("--kv-cache-memory", blocks == default_blocks / 4);
  Covered("--host", absl::StrContains(log, "at http://127.0.0.1:"), log);

  // The API key guards every /v1 route.
  Covered("--api-key", Request(port_, "GET", "/v1/models", "", "").status == 401 &&
                           Request(port_, "GET", "/v1/models", "", key).status == 200);
  for (const FlagCheck& c :
       CheckHttpFlags(port_, key, [&](const std::string& m) { return Log(m); }))
    Covered(c.flag, c.ok, c.detail);
  const nlohmann::json models = Request(port_, "GET", "/v1/models", "", key).Json();
  ASSERT_TRUE(models.contains("data")) << models.dump();
  Covered("--served-model-name", models["data"][0].value("id", "") == "fooname", models.dump());
  Covered("--max-model-len", models["data"][0].value("max_model_len", 0) == 200, models.dump());
  {
    const nlohmann::json too_long = {{"prompt", std::vector<int>(201, 5)}, {"max_tokens", 1}};
    EXPECT_EQ(Request(port_, "POST", "/v1/completions", too_long.dump(), key).status, 400);
  }
  InConfig("--max-logprobs", config, "max_logprobs=3");
  InConfig("--max-structured-output-compile-seconds", config, "max_compile_seconds=5");
  {
    // Drafts from the request's own tokens are verified (greedy output is unchanged: the
    // reference test); /metrics counts them.
    const nlohmann::json body = {{"prompt", "And he said unto him, And he said unto him, And he"},
                                 {"max_tokens", 40},
                                 {"temperature", 0}};
    EXPECT_EQ(Request(port_, "POST", "/v1/completions", body.dump(), key).status, 200);
    const double drafts = SumOf(ParseMetrics(Request(port_, "GET", "/metrics", "", key).body),
                                "vllm:spec_decode_num_drafts_total");
    Covered("--speculative-config",
            drafts > 0 && absl::StrContains(config, "speculative_config.method='ngram'") &&
                absl::StrContains(config, "speculative_config.num_speculative_tokens=3"),
            absl::StrCat(drafts, " drafts; ", config));
  }
  {
    // disable_any_whitespace: JSON comes out with XGrammar's fixed separators ", " and ": "
    // (as Python's json.dumps), never a newline, tab or run of spaces.
    const nlohmann::json body = {
        {"prompt", "In the beginning"},
        {"max_tokens", 60},
        {"structured_outputs",
         {{"json",
           {{"type", "object"},
            {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "boolean"}}}}},
            {"required", {"a", "b"}}}}}}};
    const nlohmann::json r = Request(port_, "POST", "/v1/completions", body.dump(), key).Json();
    const std::string text = r.contains("choices") ? r["choices"][0].value("text", "") : "";
    Covered("--structured-outputs-config",
            !text.empty() && text.front() == '{' &&
                text.find_first_of("\n\t") == std::string::npos && !absl::StrContains(text, "  ") &&
                absl::StartsWith(text, "{\"a\": ") &&
                absl::StrContains(config, "disable_any_whitespace=True"),
            r.dump());
  }
  {
    const CliResult r = RunCli({"--structured-outputs-config", R"({"backend": "outlines"})"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "--structured-outputs-config backend")) << r.output;
  }
  {
    auto with_logprobs = [](int n) {
      return nlohmann::json{{"prompt", "In the beginning"}, {"max_tokens", 1}, {"logprobs", n}}
          .dump();
    };
    Covered("--max-logprobs",
            Request(port_, "POST", "/v1/completions", with_logprobs(3), key).status == 200 &&
                Request(port_, "POST", "/v1/completions", with_logprobs(4), key).status == 400);
  }
  const int template_prompt_tokens = PromptTokensOfChat(port_, key);
  Covered("--chat-template",
          template_prompt_tokens > 0 && template_prompt_tokens < default_prompt_tokens,
          absl::StrCat(template_prompt_tokens, " prompt tokens, default template ",
                       default_prompt_tokens));
  Covered("--no-enable-prefix-caching", PrefixHitsOfARepeat(port_, key) == 0);
  {
    // Tool calling: "auto" is served (a 400 without --enable-auto-tool-choice), "required"
    // answers a call parsed by the forced-choice parser (needs --tool-call-parser), and with
    // tool_choice "none" the template sees no tools (the prompt is as long as without them).
    const nlohmann::json tool = {{"type", "function"},
                                 {"function",
                                  {{"name", "pick"},
                                   {"parameters",
                                    {{"type", "object"},
                                     {"properties", {{"x", {{"enum", {"a", "b"}}}}}},
                                     {"required", {"x"}}}}}}};
    auto chat = [&](const nlohmann::json& extra) {
      nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Choose"}}}},
                             {"max_tokens", 60}};
      body.update(extra);
      return Request(port_, "POST", "/v1/chat/completions", body.dump(), key);
    };
    const auto plain = chat(nlohmann::json::object());
    const auto auto_choice = chat({{"tools", {tool}}});
    Covered("--enable-auto-tool-choice",
            auto_choice.status == 200 && absl::StrContains(config, "enable_auto_tool_choice=True"),
            auto_choice.body);
    const nlohmann::json required =
        chat({{"tools", {tool}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}})
            .Json();
    Covered("--tool-call-parser",
            required.contains("choices") &&
                required["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "pick" &&
                absl::StrContains(config, "tool_call_parser='hermes'"),
            required.dump());
    const auto none = chat({{"tools", {tool}}, {"tool_choice", "none"}});
    Covered(
        "--exclude-tools-when-tool-choice-none",
        none.status == 200 && plain.status == 200 &&
            none.Json()["usage"]["prompt_tokens"] == plain.Json()["usage"]["prompt_tokens"] &&
            auto_choice.Json()["usage"]["prompt_tokens"] > plain.Json()["usage"]["prompt_tokens"],
        none.body);
  }
  {
    // Four connections at most: past them a new one evicts the longest-idle one.
    std::vector<int> idle;
    for (int i = 0; i < 6; ++i) idle.push_back(ConnectIdle(port_));
    (void)Http(port_, "GET", "/health", "", "", absl::Seconds(5));
    bool evicted = false;
    for (int fd : idle) evicted |= ClosedByServer(fd, absl::Seconds(evicted ? 0 : 2));
    Covered("--max-connections", evicted, "no idle connection was closed");
    for (int fd : idle) close(fd);
  }
  log = Stop();
  Covered("--shutdown-timeout", absl::StrContains(log, "for up to 7 s"), log);
  server_.reset();

  // 3. Tensor and pipeline parallelism (2 × 2 workers: rank 2, the last stage's first, answers),
  //    a fixed block count, a fixed port, the positive spellings.
  const int port = FreePort();
  ASSERT_NO_FATAL_FAILURE(Start({kModel, "-tp", "2", "-pp", "2", "--num-gpu-blocks-override", "64",
                                 "--enable-chunked-prefill", "--enable-prefix-caching", "--port",
                                 absl::StrCat(port), "--uvicorn-log-level", "warning"}));
  (void)Http(port_, "GET", "/metrics");
  log = Log();
  Covered("--uvicorn-log-level", !HasAccessLine(log), log);  // access lines are info
  InConfig("--tensor-parallel-size", ConfigLine(log), "tensor_parallel_size=2");
  InConfig("--pipeline-parallel-size", ConfigLine(log), "pipeline_parallel_size=2");
  Covered("--tensor-parallel-size", ProcessesUnder(server_->pid()) == 5u,
          absl::StrCat(ProcessesUnder(server_->pid()), " processes under the server"));
  {
    const nlohmann::json body = {
        {"prompt", "In the beginning"}, {"max_tokens", 8}, {"temperature", 0}};
    const auto r = Request(port_, "POST", "/v1/completions", body.dump(), "");
    Covered("--pipeline-parallel-size",
            r.status == 200 && absl::StrContains(log, "pipeline stage 1 of 2 linked"),
            absl::StrCat(r.status, " ", r.body, "\n", log));
  }
  Covered("--num-gpu-blocks-override", ReportedBlocks(log) == 64, log);
  InConfig("--enable-chunked-prefill", ConfigLine(log), "enable_chunked_prefill=True");
  Covered("--port", port_ == port && HealthOk(port));
  Stop();
  server_.reset();

  // 3b. One engine across two "nodes" on this machine: the head runs stage 0, a worker node
  //     (--node-rank 1 --headless) stage 1; they meet at --master-addr:--master-port.
  {
    const std::string master_port = absl::StrCat(FreePort());
    auto node = Subprocess::Spawn({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>/dev/null",
                                   BinDir() + "/vllm-launch", kModel, "-pp", "2", "--nnodes", "2",
                                   "--node-rank", "1", "--master-addr", "127.0.0.1",
                                   "--master-port", master_port, "--headless"});
    ASSERT_TRUE(node.ok()) << node.status();
    auto line = node->ReadLine(absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    Covered("--node-rank", absl::StrContains(*line, "headless: node rank 1 of 2"), *line);
    ASSERT_NO_FATAL_FAILURE(Start({kModel, "-pp", "2", "--nnodes", "2", "--master-addr",
                                   "127.0.0.1", "--master-port", master_port}));
    log = Log("node rank 1 joined");
    InConfig("--nnodes", ConfigLine(log), "nnodes=2");
    Covered("--master-addr", absl::StrContains(log, "join at tcp://127.0.0.1:"), log);
    Covered("--master-port",
            absl::StrContains(log, absl::StrCat(":", master_port, " (--nnodes 2)")), log);
    // Only stage 0's worker runs under the head's engine core.
    EXPECT_EQ(ProcessesUnder(server_->pid()), 2u);
    const nlohmann::json body = {
        {"prompt", "In the beginning"}, {"max_tokens", 8}, {"temperature", 0}};
    EXPECT_EQ(Request(port_, "POST", "/v1/completions", body.dump(), "").status, 200);
    Stop();
    server_.reset();
    node->Kill(SIGTERM);
    auto status = node->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);
  }

  // 4. Data parallelism on this node: two engine cores (each runs its worker in-process), and
  //    requests reach both (request_success_total per engine label).
  //    With --data-parallel-lockstep every engine learns the coordinator's waves (it says so).
  ASSERT_NO_FATAL_FAILURE(Start({"--data-parallel-size", "2", "--data-parallel-size-local", "2",
                                 "--data-parallel-lockstep"}));
  log = Log("engine 1: lockstep");
  // Two engine cores and the DP coordinator.
  Covered("--data-parallel-size",
          ChildrenRunning(server_->pid(), "engine-core").size() == 2u &&
              ChildrenRunning(server_->pid(), "dp-coordinator").size() == 1u,
          absl::StrCat(ProcessesUnder(server_->pid()), " processes under the server"));
  Covered(
      "--data-parallel-lockstep",
      absl::StrContains(log, "engine 0: lockstep") && absl::StrContains(log, "engine 1: lockstep"),
      log);
  {
    // Sent concurrently, so the balancer sees both engines loaded.
    std::vector<std::thread> clients;
    for (int i = 0; i < 6; ++i) {
      clients.emplace_back([this] {
        const nlohmann::json body = {{"prompt", "In the beginning"}, {"max_tokens", 8}};
        (void)Request(port_, "POST", "/v1/completions", body.dump(), "");
      });
    }
    for (std::thread& t : clients) t.join();
  }
  const std::string metrics = Request(port_, "GET", "/metrics", "", "").body;
  bool both = true;
  for (const char* engine : {"0", "1"}) {
    const std::string series =
        absl::StrCat("vllm:request_success_total{model_name=\"kjv-llama-tiny\",engine=\"", engine,
                     "\",finished_reason=\"length\"} ");
    const size_t at = metrics.find(series);
    both = both && at != std::string::npos && metrics.compare(at + series.size(), 2, "0\n") != 0;
  }
  Covered("--data-parallel-size-local", both, metrics);
  Stop();
  server_.reset();

  // 4a. Hybrid and external load balancing: an instance serves its own node's ranks, and its
  //     /metrics names them by their global ranks.
  auto engine_labels = [&]() {
    const std::string metrics = Request(port_, "GET", "/metrics", "", "").body;
    std::set<std::string> labels;
    std::regex re("vllm:num_requests_running\\{model_name=\"[^\"]*\",engine=\"([0-9]+)\"\\}");
    for (std::sregex_iterator it(metrics.begin(), metrics.end(), re), end; it != end; ++it) {
      labels.insert((*it)[1].str());
    }
    return labels;
  };
  ASSERT_NO_FATAL_FAILURE(Start({"-dp", "4", "-dpl", "2", "-dpr", "2", "-dph"}));
  Covered(
      "--data-parallel-hybrid-lb",
      ProcessesUnder(server_->pid()) == 2u && engine_labels() == std::set<std::string>{"2", "3"},
      absl::StrCat(ProcessesUnder(server_->pid()), " processes under the server"));
  Stop();
  server_.reset();
  ASSERT_NO_FATAL_FAILURE(Start({"-dp", "3", "-dpn", "2", "-dpe"}));
  {
    const std::set<std::string> labels = engine_labels();
    Covered("--data-parallel-rank", labels == std::set<std::string>{"2"});
    Covered("--data-parallel-external-lb",
            ProcessesUnder(server_->pid()) == 1u && labels.size() == 1);
    const CliResult r = RunCli({"-dp", "2", "-dpe"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "--data-parallel-rank")) << r.output;
  }
  Stop();
  server_.reset();

  // 4b. Two API server processes on one port: fresh connections reach both (the Server
  //     header names the process); a --headless node runs none, so -asc is refused there.
  //     The request defaults travel in their spec: a --generation-config folder (greedy,
  //     max_new_tokens 50) under an override (max_new_tokens 3), and the "openai" content format.
  //     And the response flags, in the spec's serving element too.
  extra_args_ = {"--response-role",
                 "narrator",
                 "--enable-prompt-tokens-details",
                 "--enable-per-request-metrics",
                 "--enable-log-requests",
                 "--enable-log-outputs"};
  const std::string gen_dir = absl::StrCat(::testing::TempDir(), "/serve_flags_gen_", getpid());
  std::filesystem::create_directories(gen_dir);
  std::ofstream(gen_dir + "/generation_config.json")
      << R"({"temperature": 0.0, "max_new_tokens": 50})";
  //     So do vLLM's HTTP server flags (serve_http_flag_checks.h; /sleep needs dev mode).
  setenv("VLLM_SERVER_DEV_MODE", "1", 1);
  ASSERT_NO_FATAL_FAILURE(Start(WithHttpServerFlags(
      {"--api-server-count", "2", "--generation-config", gen_dir, "--override-generation-config",
       R"({"max_new_tokens": 3})", "--chat-template",
       "{{ greeting }} {% for m in messages %}{% if m['content'] is string %}S:{{ m['content'] }}"
       "{% else %}list list list {{ m['content'][0]['text'] }}{% endif %}{% endfor %}",
       "--chat-template-content-format", "openai", "--default-chat-template-kwargs",
       R"({"greeting": "hi"})", "--return-tokens-as-token-ids", "--enable-force-include-usage"})));
  unsetenv("VLLM_SERVER_DEV_MODE");
  CheckRequestDefaults(gen_dir);
  CheckResponseFlags();
  for (const FlagCheck& c :
       CheckHttpServerFlags(port_, [&](const std::string& m) { return Log(m); }))
    Covered(c.flag, c.ok, c.detail);
  std::filesystem::remove_all(gen_dir);
  {
    std::set<std::string> servers;
    for (int i = 0; i < 24 && servers.size() < 2; ++i) {
      auto r = testing::Http(port_, "GET", "/health", "", "");
      if (r.ok() && r->status == 200) servers.insert(r->server);
    }
    Covered("--api-server-count", servers.size() == 2 && ProcessesUnder(server_->pid()) == 3u,
            absl::StrCat(servers.size(), " API servers answered, ", ProcessesUnder(server_->pid()),
                         " processes under the server"));
    const CliResult r = RunCli({"-asc", "2", "-dp", "2", "-dpl", "1", "-dpr", "1", "--headless"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "--api-server-count")) << r.output;
  }
  Stop();
  server_.reset();

  // 5. Two "nodes" on this machine: a head with one replica and a --headless node with the
  //    other, on 127.0.0.1, with a cluster key. The headless node's engine joins the head and
  //    serves.
  {
    const std::string key = absl::StrCat(::testing::TempDir(), "/serve_flags_key_", getpid());
    std::remove(key.c_str());
    // The subcommand that makes the key (and never overwrites one).
    const CliResult made = RunCli({"make-cluster-key", key});
    ASSERT_EQ(made.exit_code, 0) << made.output;
    const CliResult again = RunCli({"make-cluster-key", key});
    EXPECT_EQ(again.exit_code, 1) << again.output;
    EXPECT_TRUE(absl::StrContains(again.output, "exists")) << again.output;
    ASSERT_TRUE(ipc::LoadCurveKeyFile(key).ok());
    const std::string rpc_port = absl::StrCat(FreePort());
    auto node = Subprocess::Spawn({"/bin/sh",
                                   "-c",
                                   "exec \"$0\" \"$@\" 2>/dev/null",
                                   BinDir() + "/vllm-launch",
                                   "--headless",
                                   "-dp",
                                   "2",
                                   "-dpl",
                                   "1",
                                   "--data-parallel-start-rank",
                                   "1",
                                   "--data-parallel-address",
                                   "127.0.0.1",
                                   "--data-parallel-rpc-port",
                                   rpc_port,
                                   "--cluster-key-file",
                                   key,
                                   "--restart-dead-engines",
                                   "--kv-cache-memory",
                                   "64MiB"});
    ASSERT_TRUE(node.ok()) << node.status();
    auto line = node->ReadLine(absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    Covered("--headless", absl::StrContains(*line, "headless: data-parallel engines 1..1"), *line);
    Covered("--data-parallel-start-rank", absl::StrContains(*line, "engines 1..1"), *line);
    // The default (--rejoin-head): the node says it re-joins a head that goes silent.
    Covered("--rejoin-head", absl::StrContains(*line, "and again whenever it goes silent"), *line);
    Covered("--data-parallel-rpc-port",
            absl::StrContains(*line, absl::StrCat("tcp://127.0.0.1:", rpc_port)), *line);
    ASSERT_NO_FATAL_FAILURE(Start({"-dp", "2", "-dpl", "1", "--data-parallel-address", "127.0.0.1",
                                   "-dpp", rpc_port, "--cluster-key-file", key}));
    log = Log("data-parallel engine 1 on node");
    Covered("--data-parallel-address",
            absl::StrContains(log, absl::StrCat("join at tcp://127.0.0.1:", rpc_port)), log);
    // With the key, no warning that the sockets admit anyone, and the engine got in.
    Covered("--cluster-key-file",
            !absl::StrContains(log, "admit anyone") && absl::StrContains(log, "joined"), log);
    // Only rank 0 (and the DP coordinator) runs under the head.
    EXPECT_EQ(ProcessesUnder(server_->pid()), 2u);
    EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "dp-coordinator").size(), 1u);
    // kill -9 of the node's engine core: its launcher starts it again and it joins again.
    const std::vector<pid_t> node_engines = ChildrenOf(node->pid());
    ASSERT_EQ(node_engines.size(), 1u);
    ASSERT_EQ(kill(node_engines[0], SIGKILL), 0);
    log = Log("joins again");
    Covered("--restart-dead-engines",
            absl::StrContains(log, "data-parallel engine 1 on node") &&
                absl::StrContains(log, "joins again"),
            log);
    Stop();
    server_.reset();
    node->Kill(SIGTERM);
    auto status = node->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);
    std::remove(key.c_str());
  }

  // Every flag of --help was checked above, and nothing above checks a flag --help lacks.
  for (const std::string& flag : help) {
    EXPECT_TRUE(covered_.count(flag) > 0) << flag << " has no row in serve_flags_test.cc";
  }
  for (const std::string& flag : covered_) {
    EXPECT_TRUE(help.count(flag) > 0) << flag << " is checked but not in --help";
  }
}

}  // namespace
}  // namespace vllm::testing
