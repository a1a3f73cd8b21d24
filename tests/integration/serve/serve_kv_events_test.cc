// --kv-events-config end to end: vllm-launch's engine core publishes vLLM's KV-cache events
// (kv_events/kv_events.h) to a subscriber, for the blocks of the prompts it serves.
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv_events/kv_events.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm::testing {
namespace {

constexpr int kBlockSize = 16;  // the server's default --block-size

class ServeKvEventsTest : public ServeTest {
 protected:
  // The engine binds an ipc:// endpoint in a private directory (vLLM binds ipc:// and "*"
  // endpoints and connects to a named host; a bound endpoint here needs no free port and
  // opens nothing on the network) and a SUB connects to it.
  void SetUp() override {
    ServeTest::SetUp();
    char dir[] = "/tmp/vllm-kv-events-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    endpoint_ = absl::StrCat("ipc://", dir_, "/events");
    sub_.set(zmq::sockopt::subscribe, "kv@");
    sub_.set(zmq::sockopt::linger, 0);
    sub_.connect(endpoint_);  // ZMQ retries until the engine binds
  }
  void TearDown() override {
    ServeTest::TearDown();
    std::filesystem::remove_all(dir_);
  }

  // The BlockStored events of the next batches until they hold `num_tokens` tokens, by
  // `deadline` (empty on timeout). Checks the framing of every message.
  std::vector<kv_events::KvBlockStored> Stored(size_t num_tokens, absl::Time deadline) {
    std::vector<kv_events::KvBlockStored> stored;
    size_t tokens = 0;
    while (tokens < num_tokens && absl::Now() < deadline) {
      sub_.set(zmq::sockopt::rcvtimeo, 200);
      zmq::message_t topic;
      if (!sub_.recv(topic)) continue;
      zmq::message_t seq, payload;
      EXPECT_TRUE(topic.more());
      EXPECT_TRUE(sub_.recv(seq));
      EXPECT_TRUE(sub_.recv(payload));
      EXPECT_EQ(topic.to_string(), "kv@test");
      EXPECT_EQ(seq.size(), 8u);
      uint64_t n = 0;
      for (size_t i = 0; i < seq.size(); ++i) {
        n = (n << 8) | static_cast<const uint8_t*>(seq.data())[i];
      }
      // Batches published before the subscription reached the engine are lost (PUB/SUB);
      // from the first one received on, none may be missing.
      if (next_seq_.has_value()) {
        EXPECT_EQ(n, *next_seq_);
      }
      next_seq_ = n + 1;
      absl::StatusOr<kv_events::KvEventBatch> batch = kv_events::DecodeKvEventBatch(
          {static_cast<const uint8_t*>(payload.data()), payload.size()});
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok()) return {};
      EXPECT_EQ(batch->data_parallel_rank, 0);
      EXPECT_GT(batch->ts, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - 600);
      for (kv_events::KvEvent& e : batch->events) {
        if (auto* s = std::get_if<kv_events::KvBlockStored>(&e)) {
          tokens += s->token_ids.size();
          stored.push_back(std::move(*s));
        }
      }
    }
    return stored;
  }

  void Complete(const std::vector<int>& prompt) {
    nlohmann::json body = {{"model", "kjv-llama-tiny"}, {"prompt", prompt}, {"max_tokens", 2}};
    absl::StatusOr<HttpResponse> r = Http(port_, "POST", "/v1/completions", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
  }

  zmq::context_t context_;
  zmq::socket_t sub_{context_, zmq::socket_type::sub};
  std::string dir_;
  std::string endpoint_;
  std::optional<uint64_t> next_seq_;
};

TEST_F(ServeKvEventsTest, PublishesThePromptsFullBlocksChained) {
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"--kv-events-config",
                   absl::StrCat(R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":")",
                                endpoint_, R"(","topic":"kv@test"})")}));
  // A subscriber joins a PUB asynchronously: probe with one-block prompts of their own tokens
  // until a batch arrives, so that the prompts below are published to a subscriber.
  std::vector<kv_events::KvBlockStored> probe;
  for (int i = 0; probe.empty() && i < 60; ++i) {
    std::vector<int> tokens(kBlockSize + 1, 2000 + i);
    ASSERT_NO_FATAL_FAILURE(Complete(tokens));
    probe = Stored(kBlockSize, absl::Now() + absl::Milliseconds(500));
  }
  ASSERT_FALSE(probe.empty()) << "no KV event reached the subscriber";
  // 4 full blocks and 5 tokens more.
  std::vector<int> prompt;
  for (int i = 0; i < 4 * kBlockSize + 5; ++i) prompt.push_back(100 + i);
  ASSERT_NO_FATAL_FAILURE(Complete(prompt));
  std::vector<kv_events::KvBlockStored> stored =
      Stored(4 * kBlockSize, absl::Now() + absl::Seconds(30));
  std::vector<int32_t> tokens;
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> expected_parent;  // the first block has none
  for (const kv_events::KvBlockStored& s : stored) {
    EXPECT_EQ(s.block_size, kBlockSize);
    EXPECT_EQ(s.token_ids.size(), s.block_hashes.size() * kBlockSize);
    EXPECT_EQ(s.parent_block_hash, expected_parent);
    EXPECT_EQ(s.medium, "GPU");
    tokens.insert(tokens.end(), s.token_ids.begin(), s.token_ids.end());
    hashes.insert(hashes.end(), s.block_hashes.begin(), s.block_hashes.end());
    if (!s.block_hashes.empty()) expected_parent = s.block_hashes.back();
  }
  ASSERT_EQ(tokens.size(), 4u * kBlockSize);
  EXPECT_EQ(tokens, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4 * kBlockSize));
  ASSERT_EQ(hashes.size(), 4u);

  // A second prompt sharing the first two blocks: its new blocks hang off the second one.
  std::vector<int> second(prompt.begin(), prompt.begin() + 2 * kBlockSize);
  for (int i = 0; i < 2 * kBlockSize + 3; ++i) second.push_back(900 + i);
  ASSERT_NO_FATAL_FAILURE(Complete(second));
  stored = Stored(2 * kBlockSize, absl::Now() + absl::Seconds(30));
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(stored.front().parent_block_hash, hashes[1]);
  tokens.clear();
  for (const kv_events::KvBlockStored& s : stored) {
    tokens.insert(tokens.end(), s.token_ids.begin(), s.token_ids.end());
  }
  EXPECT_EQ(tokens,
            std::vector<int32_t>(second.begin() + 2 * kBlockSize, second.begin() + 4 * kBlockSize));
}

TEST_F(ServeKvEventsTest, ABadConfigStopsTheServerNamingTheFlag) {
  absl::StatusOr<Subprocess> p =
      Subprocess::Spawn({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", BinDir() + "/vllm-launch",
                         "--port", "0", "--kv-events-config", R"({"enable_kv_cache_event":1})"});
  ASSERT_TRUE(p.ok()) << p.status();
  std::string output;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> line = p->ReadLine(deadline - absl::Now());
    if (!line.ok()) break;
    absl::StrAppend(&output, *line, "\n");
  }
  absl::StatusOr<int> status = p->Wait(absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << DescribeWaitStatus(*status);
  EXPECT_NE(output.find("--kv-events-config"), std::string::npos) << output;
  EXPECT_NE(output.find("enable_kv_cache_event"), std::string::npos) << output;
}

}  // namespace
}  // namespace vllm::testing
