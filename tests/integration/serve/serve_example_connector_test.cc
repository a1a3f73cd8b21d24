// ExampleConnector (vLLM's debug connector: a prompt's KV in files under
// kv_connector_extra_config.shared_storage_path) through the server on the bundled model: the
// first server stores the prompt's whole blocks once it computed them; a second server (empty
// device cache) loads them instead of computing them — the same greedy answer, the loaded tokens
// counted as vllm:external_prefix_cache_hits. A corrupted entry is never loaded into the cache:
// under kv_load_failure_policy "recompute" the answer is still the same, under "fail" the
// request ends with finish_reason "error".
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

// 70 tokens: 4 whole blocks of 16 are stored ((70 - 1) / 16 * 16 = 64 tokens).
std::vector<int32_t> Prompt() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 70; ++i) ids.push_back(100 + (i * 37) % 3000);
  return ids;
}

class ServeExampleConnectorTest : public testing::ServeTest {
 protected:
  void SetUp() override {
    ServeTest::SetUp();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("vllm-example-connector-", getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    ServeTest::TearDown();
    std::filesystem::remove_all(dir_);
  }

  void Start(const std::string& policy) {
    const std::string config = absl::StrCat(
        R"({"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_load_failure_policy":")",
        policy, R"(","kv_connector_extra_config":{"shared_storage_path":")", dir_.string(),
        R"("}})");
    ASSERT_NO_FATAL_FAILURE(StartServer({"--kv-transfer-config", config}));
  }

  void Stop() {
    server_->Kill(SIGINT);
    ASSERT_TRUE(server_->Wait(absl::Seconds(15)).ok());
    server_.reset();
  }

  json Complete() {
    const json body = {{"prompt", Prompt()}, {"max_tokens", 8}, {"temperature", 0}};
    auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().ToString());
    return r.ok() ? r->Json()["choices"][0] : json();
  }

  double ExternalHits() {
    return testing::SumOf(testing::ScrapeMetrics(port_), "vllm:external_prefix_cache_hits_total");
  }

  // The one stored entry's files.
  std::vector<std::filesystem::path> Entries() const {
    std::vector<std::filesystem::path> files;
    if (!std::filesystem::exists(dir_)) return files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    return files;
  }

  std::filesystem::path dir_;
};

TEST_F(ServeExampleConnectorTest, StoresThenLoadsAndNeverLoadsACorruptEntry) {
  ASSERT_NO_FATAL_FAILURE(Start("fail"));
  const json first = Complete();
  EXPECT_EQ(ExternalHits(), 0);
  ASSERT_NO_FATAL_FAILURE(Stop());
  const std::vector<std::filesystem::path> files = Entries();
  ASSERT_EQ(files.size(), 1u) << "one rank, one prompt";

  // A fresh server loads the 64 stored tokens and computes the rest.
  ASSERT_NO_FATAL_FAILURE(Start("fail"));
  EXPECT_EQ(Complete()["text"], first["text"]);
  EXPECT_EQ(ExternalHits(), 64);
  ASSERT_NO_FATAL_FAILURE(Stop());

  // One byte of the data flipped: the checksum refuses it.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(-100, std::ios::end);
    f.write(&c, 1);
  }
  ASSERT_NO_FATAL_FAILURE(Start("recompute"));
  EXPECT_EQ(Complete()["text"], first["text"]);
  ASSERT_NO_FATAL_FAILURE(Stop());
  ASSERT_NO_FATAL_FAILURE(Start("fail"));
  EXPECT_EQ(Complete()["finish_reason"], "error");
}

// A server without a KV connector refuses a P/D request (vLLM would compute it whole and answer
// no kv_transfer_params; here a set-up that forgot the flag fails loudly).
TEST_F(ServeExampleConnectorTest, AServerWithoutAConnectorRefusesKvTransferParams) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  json body = {{"prompt", Prompt()}, {"max_tokens", 1}};
  body["kv_transfer_params"] = {{"do_remote_decode", true}};
  auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("--kv-transfer-config"), std::string::npos) << r->body;
  // Params that ask for nothing are fine.
  body["kv_transfer_params"] = {{"do_remote_decode", false}};
  r = testing::Http(port_, "POST", "/v1/completions", body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace vllm
