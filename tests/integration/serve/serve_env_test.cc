// vLLM's environment variables reach the server (config/vllm_envs.h, launcher/serve_env.h):
// one server with VLLM_API_KEY, VLLM_HTTP_TIMEOUT_KEEP_ALIVE, VLLM_HTTP_MAX_REQUEST_BODY_SIZE,
// VLLM_CPU_KVCACHE_SPACE, the request limits (VLLM_MAX_N_SEQUENCES, VLLM_MAX_STOP_STRINGS,
// VLLM_MAX_COMPLETION_PROMPTS), VLLM_PORT and VLLM_MQ_MAX_CHUNK_BYTES_MB (honoured: not
// named), an unknown VLLM_NOT_A_VARIABLE and the ignored VLLM_USE_DEEP_GEMM (one warning line
// names both); one with VLLM_LOGGING_LEVEL=warning (no info line from any process),
// VLLM_ALLOW_LONG_MAX_MODEL_LEN (a --max-model-len past the model's, served) and the default
// VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=0 (its engine killed, the server exits with an error naming
// it); and start-ups refused before anything runs, each naming its variable.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/process.h"

namespace vllm::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ServeEnvTest : public ServeTest {
 protected:
  void TearDown() override {
    ServeTest::TearDown();
    std::remove(log_path_.c_str());
  }
  // The prefix that runs the server with `env` and its stderr (all processes') in log_path_.
  std::vector<std::string> Prefix(const std::vector<std::string>& env) {
    log_path_ = absl::StrCat(::testing::TempDir(), "/serve_env_", getpid(), ".log");
    std::remove(log_path_.c_str());
    std::vector<std::string> p = {
        "/bin/sh", "-c", absl::StrCat("exec \"$0\" \"$@\" 2>>", log_path_), "/usr/bin/env"};
    p.insert(p.end(), env.begin(), env.end());
    return p;
  }
  // The log once it holds `marker` (by a deadline).
  std::string Log(const std::string& marker) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::string log = ReadFile(log_path_);
    while (!absl::StrContains(log, marker) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
      log = ReadFile(log_path_);
    }
    return log;
  }
  std::string log_path_;
};

// Sends one keep-alive GET /health on a new connection and returns the connection after the
// response's headers arrived (its body is empty); -1 on failure.
int KeepAliveRequest(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string request = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    if (fd >= 0) close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[4096];
  while (!absl::StrContains(got, "\r\n\r\n")) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  if (!absl::StrContains(got, " 200 ")) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_F(ServeEnvTest, HonouredVariablesTakeEffectAndIgnoredOnesAreNamed) {
  ASSERT_NO_FATAL_FAILURE(StartServer(
      {}, Prefix({"VLLM_API_KEY=env-key", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE=1",
                  "VLLM_HTTP_MAX_REQUEST_BODY_SIZE=2000", "VLLM_CPU_KVCACHE_SPACE=1",
                  "VLLM_NOT_A_VARIABLE=1", "VLLM_USE_DEEP_GEMM=1", "VLLM_MAX_N_SEQUENCES=2",
                  "VLLM_MAX_STOP_STRINGS=5", "VLLM_MAX_COMPLETION_PROMPTS=2", "VLLM_PORT=47000",
                  "VLLM_MQ_MAX_CHUNK_BYTES_MB=1"})));
  const std::string log = Log("KV-cache blocks");
  // One warning line names the unknown and the ignored variable, and nothing honoured.
  std::vector<std::string> warnings;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "environment variables ignored")) warnings.emplace_back(line);
  }
  ASSERT_EQ(warnings.size(), 1u) << log;
  EXPECT_TRUE(absl::StrContains(warnings[0], "VLLM_NOT_A_VARIABLE")) << warnings[0];
  EXPECT_TRUE(absl::StrContains(warnings[0], "VLLM_USE_DEEP_GEMM (")) << warnings[0];
  EXPECT_FALSE(absl::StrContains(warnings[0], "VLLM_API_KEY")) << warnings[0];
  EXPECT_FALSE(absl::StrContains(warnings[0], "VLLM_MAX_")) << warnings[0];
  EXPECT_FALSE(absl::StrContains(warnings[0], "VLLM_PORT")) << warnings[0];
  EXPECT_FALSE(absl::StrContains(warnings[0], "VLLM_MQ_MAX_CHUNK_BYTES_MB")) << warnings[0];
  // VLLM_CPU_KVCACHE_SPACE=1 (GiB) wins over the fixture's --kv-cache-memory 64MiB, as vLLM.
  EXPECT_TRUE(absl::StrContains(log, "kv_cache_memory_bytes=1073741824")) << log;

  // VLLM_API_KEY: /v1/* needs the key.
  auto denied = Http(port_, "GET", "/v1/models");
  ASSERT_TRUE(denied.ok()) << denied.status();
  EXPECT_EQ(denied->status, 401) << denied->body;
  auto allowed = HttpRaw(port_,
                         "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Authorization: Bearer env-key\r\n\r\n");
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(allowed->status, 200) << allowed->body;

  // The request limits: n 2 (vLLM: 16384), 5 stop strings (vLLM: 4), 2 prompts (vLLM: 1024),
  // with vLLM's messages.
  const std::vector<std::pair<std::string, std::string>> limits = {
      {R"({"prompt": "a", "max_tokens": 1, "n": 2, "stop": ["1", "2", "3", "4", "5"]})", ""},
      {R"({"prompt": ["a", "b"], "max_tokens": 1})", ""},
      {R"({"prompt": "a", "max_tokens": 1, "n": 3})",
       "n must be at most 2, got 3. To increase this limit, set the VLLM_MAX_N_SEQUENCES"},
      {R"({"prompt": "a", "max_tokens": 1, "stop": ["1", "2", "3", "4", "5", "6"]})",
       "List should have at most 5 items after validation, not 6"},
      {R"({"prompt": ["a", "b", "c"], "max_tokens": 1})",
       "prompt list length 3 exceeds the maximum allowed count of 2. To increase this limit, "
       "set the VLLM_MAX_COMPLETION_PROMPTS environment variable."},
  };
  for (const auto& [body, error] : limits) {
    auto r = HttpRaw(port_, absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                         "Connection: close\r\nAuthorization: Bearer env-key"
                                         "\r\nContent-Type: application/json\r\n"
                                         "Content-Length: ",
                                         body.size(), "\r\n\r\n", body));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, error.empty() ? 200 : 400) << body << ": " << r->body;
    EXPECT_TRUE(absl::StrContains(r->body, error)) << body << ": " << r->body;
  }

  // VLLM_HTTP_MAX_REQUEST_BODY_SIZE=2000: a larger body is 413.
  const std::string big =
      absl::StrCat(R"({"model": "kjv-llama-tiny", "prompt": ")", std::string(3000, 'a'), R"("})");
  auto too_big = HttpRaw(port_, absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                             "Connection: close\r\nAuthorization: Bearer env-key"
                                             "\r\nContent-Type: application/json\r\n"
                                             "Content-Length: ",
                                             big.size(), "\r\n\r\n", big));
  ASSERT_TRUE(too_big.ok()) << too_big.status();
  EXPECT_EQ(too_big->status, 413) << too_big->body;

  // VLLM_HTTP_TIMEOUT_KEEP_ALIVE=1: an idle keep-alive connection is closed after ~1 s (the
  // default would keep it 5 s).
  const int fd = KeepAliveRequest(port_);
  ASSERT_GE(fd, 0);
  const absl::Time start = absl::Now();
  timeval tv{4, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  const ssize_t n = recv(fd, &c, 1, 0);  // EOF when the server closes it
  const absl::Duration idle = absl::Now() - start;
  close(fd);
  EXPECT_EQ(n, 0);
  EXPECT_LT(idle, absl::Seconds(3));
}

// VLLM_LOGGING_LEVEL=warning; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 with --max-model-len 1100 (the
// model's max_position_embeddings is 1024): vLLM's warning, and a prompt past position 1024
// is served; VLLM_KEEP_ALIVE_ON_ENGINE_DEATH unset (0): once its only engine is killed the
// server exits with an error naming the variable.
TEST_F(ServeEnvTest, LoggingLevelLongMaxModelLenAndEngineDeath) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--max-model-len", "1100"},
                  Prefix({"VLLM_LOGGING_LEVEL=warning", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"})));
  auto health = Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(absl::StrContains(ReadFile(log_path_), "User-specified max_model_len (1100)"));
  auto models = Http(port_, "GET", "/v1/models");
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_EQ(models->Json()["data"][0].value("max_model_len", 0), 1100) << models->body;
  const nlohmann::json long_prompt = {{"prompt", std::vector<int>(1060, 100)}, {"max_tokens", 4}};
  auto r = Http(port_, "POST", "/v1/completions", long_prompt.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->Json()["usage"].value("prompt_tokens", 0), 1060) << r->body;

  const std::vector<pid_t> engines = ChildrenOf(server_->pid());
  ASSERT_EQ(engines.size(), 1u);
  ASSERT_EQ(kill(engines[0], SIGKILL), 0);
  auto status = server_->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << DescribeWaitStatus(*status);
  const std::string log = ReadFile(log_path_);
  EXPECT_TRUE(absl::StrContains(log, "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 keeps it up")) << log;
  EXPECT_FALSE(absl::StrContains(log, "[info]")) << log;
}

// Refused before anything starts (exit 2), the message naming the variable.
TEST_F(ServeEnvTest, RefusedVariables) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"VLLM_ALLOW_RUNTIME_LORA_UPDATING=1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING"},
      {"VLLM_LOGGING_CONFIG_PATH=/etc/logging.json", "VLLM_LOGGING_CONFIG_PATH"},
      {"VLLM_DP_SIZE=2", "VLLM_DP_SIZE"},
      {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE=5s", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"},
      {"VLLM_PORT=tcp://10.0.0.3:8000", "appears to be a URI"},
      {"VLLM_MQ_MAX_CHUNK_BYTES_MB=0", "VLLM_MQ_MAX_CHUNK_BYTES_MB"},
      {"VLLM_MAX_STOP_STRINGS=four", "VLLM_MAX_STOP_STRINGS"},
  };
  for (const auto& [assignment, name] : cases) {
    std::vector<std::string> argv = Prefix({assignment});
    argv.push_back(BinDir() + "/vllm-launch");
    auto p = Subprocess::Spawn(argv);
    ASSERT_TRUE(p.ok()) << p.status();
    auto status = p->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.ok()) << assignment;
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2)
        << assignment << ": " << DescribeWaitStatus(*status);
    const std::string log = ReadFile(log_path_);
    EXPECT_TRUE(absl::StrContains(log, name)) << assignment << ": " << log;
  }
}

}  // namespace
}  // namespace vllm::testing
