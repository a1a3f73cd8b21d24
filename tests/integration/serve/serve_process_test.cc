// `vllm-launch` as a user runs it, on the bundled model: it prints its ready line, answers
// /v1/completions (the greedy text transformers produced for the model), /v1/chat/completions
// and /health; Ctrl-C (SIGINT) stops everything within 5 s; kill -9 of the server takes the
// engine core and its workers down within 2 s. Nothing is left in /dev/shm.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"

namespace vllm {
namespace {

const std::filesystem::path kModel =
    std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";

struct HttpResponse {
  int status = 0;
  std::string body;
};

// One HTTP/1.1 request over a fresh connection (Connection: close), read to EOF with a
// 30 s receive timeout.
std::optional<HttpResponse> Http(int port, const std::string& method, const std::string& path,
                                 const std::string& body = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                   "Content-Type: application/json\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n\r\n", body);
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  HttpResponse r;
  const size_t sp = raw.find(' ');
  const size_t head_end = raw.find("\r\n\r\n");
  if (sp == std::string::npos || head_end == std::string::npos ||
      !absl::SimpleAtoi(raw.substr(sp + 1, 3), &r.status)) {
    return std::nullopt;
  }
  r.body = raw.substr(head_end + 4);
  return r;
}

class ServeProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphans come to us: we can count them
    shm_before_ = testing::ShmEntries();
    auto p = testing::Subprocess::Spawn(
        {testing::BinDir() + "/vllm-launch", "--port", "0", "--kv-cache-memory", "64MiB"});
    ASSERT_TRUE(p.ok()) << p.status();
    server_.emplace(std::move(*p));
    // "vllm-launch: ready at http://127.0.0.1:PORT/v1"
    auto line = server_->ReadLine(absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << line.status();
    const size_t colon = line->rfind(':');
    const size_t slash = line->rfind("/v1");
    ASSERT_NE(colon, std::string::npos) << *line;
    ASSERT_TRUE(absl::SimpleAtoi(line->substr(colon + 1, slash - colon - 1), &port_)) << *line;
  }
  void TearDown() override {
    if (server_.has_value() && server_->running()) {
      server_->Kill(SIGKILL);
      (void)server_->Wait(absl::Seconds(5));
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while ((!Descendants().empty() || testing::ShmEntries() != shm_before_) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
    }
    EXPECT_TRUE(Descendants().empty()) << "processes left behind";
    EXPECT_EQ(testing::ShmEntries(), shm_before_) << "shared memory left behind";
  }
  // Our children, reaping orphans re-parented to us.
  static std::vector<pid_t> Descendants() {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    return testing::ChildrenOf(getpid());
  }

  std::set<std::string> shm_before_;
  std::optional<testing::Subprocess> server_;
  int port_ = 0;
};

TEST_F(ServeProcessTest, AnswersLikeTheModelAndStopsOnCtrlC) {
  auto health = Http(port_, "GET", "/health");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);

  // The bundled model's first greedy sample, as transformers generated it.
  std::ifstream in(kModel / "training_log.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json sample = nlohmann::json::parse(text.str()).at("samples").at(0);
  nlohmann::json req = {{"model", "kjv-llama-tiny"},
                        {"prompt", sample.at("prompt")},
                        {"max_tokens", sample.at("greedy_ids").size()},
                        {"temperature", 0}};
  auto completion = Http(port_, "POST", "/v1/completions", req.dump());
  ASSERT_TRUE(completion.has_value());
  ASSERT_EQ(completion->status, 200) << completion->body;
  const nlohmann::json c = nlohmann::json::parse(completion->body);
  EXPECT_EQ(c.at("choices").at(0).at("text").get<std::string>(),
            sample.at("text").get<std::string>());
  EXPECT_EQ(c.at("usage").at("completion_tokens").get<size_t>(), sample.at("greedy_ids").size());

  nlohmann::json chat = {{"model", "kjv-llama-tiny"},
                         {"messages", {{{"role", "user"}, {"content", "Blessed are the meek"}}}},
                         {"max_tokens", 16}};
  auto chat_response = Http(port_, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_TRUE(chat_response.has_value());
  EXPECT_EQ(chat_response->status, 200) << chat_response->body;

  auto bad = Http(port_, "POST", "/v1/completions", R"({"model": "x", "prompt": "a"})");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->status, 404) << bad->body;

  const absl::Time start = absl::Now();
  server_->Kill(SIGINT);
  auto status = server_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
}

TEST_F(ServeProcessTest, KilledServerTakesTheEngineDownWithinTwoSeconds) {
  const std::vector<pid_t> engines = testing::ChildrenOf(server_->pid());
  ASSERT_EQ(engines.size(), 1u);
  server_->Kill(SIGKILL);
  ASSERT_TRUE(server_->Wait(absl::Seconds(5)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (!Descendants().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  EXPECT_TRUE(Descendants().empty()) << "the engine core outlived the killed server";
}

}  // namespace
}  // namespace vllm
