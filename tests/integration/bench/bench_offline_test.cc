// `vllm-launch bench latency` and `bench throughput` on the bundled model with tiny sizes: the
// lines they print and the keys of --output-json are vLLM 0.33's (the lists are test data,
// tests/fixtures/vllm_0_33/bench_offline.json, taken from vllm/benchmarks/latency.py and
// throughput.py); every vLLM flag of the two commands is either ours (listed by --help) or
// refused by name; the server's own flags are refused.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"

namespace vllm::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Runs `vllm-launch ARGS` to its end within `timeout`; `output` is stdout (with `merge_stderr`,
// stdout and stderr together).
struct CliResult {
  int exit_code = -1;
  std::string output;
};
CliResult RunCli(const std::vector<std::string>& args, bool merge_stderr = false,
                 absl::Duration timeout = absl::Seconds(60)) {
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   merge_stderr ? "exec \"$0\" \"$@\" 2>&1" : "exec \"$0\" \"$@\"",
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

const nlohmann::json& Fixture() {
  static const nlohmann::json* const kFixture = [] {
    std::ifstream in(std::filesystem::path(VLLM_SOURCE_DIR) /
                     "tests/fixtures/vllm_0_33/bench_offline.json");
    return new nlohmann::json(nlohmann::json::parse(in));
  }();
  return *kFixture;
}

std::vector<std::string> Keys(const nlohmann::ordered_json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

// The engine flags that keep the runs small: the bundled model, a small KV cache.
const std::vector<std::string> kEngineFlags = {
    "--model",           std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny",
    "--kv-cache-memory", "16MiB",
    "--max-model-len",   "64"};

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("bench_offline_test_", getpid(), "_", name))
      .string();
}

TEST(BenchOfflineTest, LatencyPrintsVllmLinesAndJson) {
  const std::string json_path = TempPath("latency.json");
  std::vector<std::string> args = {
      "bench",         "latency", "--input-len", "8", "--output-len",       "4",
      "--batch-size",  "2",       "--num-iters", "2", "--num-iters-warmup", "1",
      "--output-json", json_path, "--seed",      "3"};
  args.insert(args.end(), kEngineFlags.begin(), kEngineFlags.end());
  const CliResult r = RunCli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json& fx = Fixture();
  for (const auto& label : fx["latency_labels"]) {
    EXPECT_THAT(r.output, HasSubstr(label.get<std::string>()));
  }
  EXPECT_TRUE(std::regex_search(r.output, std::regex("Avg latency: [0-9.e-]+ seconds\n")))
      << r.output;
  for (const auto& p : fx["latency_percentiles"]) {
    const std::regex line(
        absl::StrCat("\n", p.get<std::string>(), "% percentile latency: [0-9.e-]+ seconds\n"));
    EXPECT_TRUE(std::regex_search(r.output, line)) << p << "\n" << r.output;
  }
  std::ifstream in(json_path);
  const nlohmann::ordered_json result = nlohmann::ordered_json::parse(in, nullptr, false);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(result.is_object());
  EXPECT_THAT(Keys(result),
              ElementsAreArray(fx["latency_json_keys"].get<std::vector<std::string>>()));
  EXPECT_EQ(result["latencies"].size(), 2u);
  EXPECT_GT(result["avg_latency"].get<double>(), 0.0);
  EXPECT_THAT(Keys(result["percentiles"]),
              ElementsAreArray(fx["latency_percentiles"].get<std::vector<std::string>>()));
  EXPECT_EQ(result["model_id"], kEngineFlags[1]);
}

TEST(BenchOfflineTest, ThroughputPrintsVllmLinesAndJson) {
  const std::string json_path = TempPath("throughput.json");
  std::vector<std::string> args = {"bench",        "throughput", "--input-len",   "8",
                                   "--output-len", "4",          "--num-prompts", "4",
                                   "--n",          "2",          "--output-json", json_path};
  args.insert(args.end(), kEngineFlags.begin(), kEngineFlags.end());
  const CliResult r = RunCli(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json& fx = Fixture();
  for (const auto& label : fx["throughput_labels"]) {
    EXPECT_THAT(r.output, HasSubstr(label.get<std::string>()));
  }
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("\nThroughput: [0-9]+\\.[0-9]{2} requests/s, [0-9]+\\.[0-9]{2} total "
                           "tokens/s, [0-9]+\\.[0-9]{2} output tokens/s\n")))
      << r.output;
  // ignore_eos: every one of the 4 prompts x 2 sequences generates its 4 tokens.
  EXPECT_THAT(r.output, HasSubstr("Total num output tokens:  32\n"));
  std::smatch prompt_tokens;
  ASSERT_TRUE(std::regex_search(r.output, prompt_tokens,
                                std::regex("Total num prompt tokens:  ([0-9]+)\n")));
  const int64_t prompt = std::stoll(prompt_tokens[1]);
  EXPECT_GE(prompt, 4 * 8);  // 8 tokens per prompt and the BOS the tokenizer adds
  std::ifstream in(json_path);
  const nlohmann::ordered_json result = nlohmann::ordered_json::parse(in, nullptr, false);
  std::filesystem::remove(json_path);
  ASSERT_TRUE(result.is_object());
  EXPECT_THAT(Keys(result),
              ElementsAreArray(fx["throughput_json_keys"].get<std::vector<std::string>>()));
  EXPECT_EQ(result["num_requests"], 4);
  EXPECT_EQ(result["total_num_tokens"], prompt + 32);
  EXPECT_GT(result["requests_per_second"].get<double>(), 0.0);
}

// The sharegpt file dataset and the synthetic prefix_repetition one (bench/serve's builders).
TEST(BenchOfflineTest, ThroughputTakesSharegptAndPrefixRepetition) {
  std::vector<std::string> sharegpt = {
      "bench",          "throughput",
      "--dataset-name", "sharegpt",
      "--dataset-path", std::string(VLLM_SOURCE_DIR) + "/tests/fixtures/bench/sharegpt_tiny.json",
      "--output-len",   "4",
      "--num-prompts",  "6"};
  sharegpt.insert(sharegpt.end(), kEngineFlags.begin(), kEngineFlags.end());
  const CliResult r = RunCli(sharegpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Total num output tokens:  24\n"));  // 6 prompts x 4
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("default to random dataset")));
  std::vector<std::string> prefix = {"bench",
                                     "throughput",
                                     "--dataset-name",
                                     "prefix_repetition",
                                     "--prefix-repetition-prefix-len",
                                     "8",
                                     "--prefix-repetition-suffix-len",
                                     "4",
                                     "--prefix-repetition-num-prefixes",
                                     "2",
                                     "--prefix-repetition-output-len",
                                     "3",
                                     "--num-prompts",
                                     "4"};
  prefix.insert(prefix.end(), kEngineFlags.begin(), kEngineFlags.end());
  const CliResult p = RunCli(prefix);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_THAT(p.output, HasSubstr("Total num output tokens:  12\n"));  // 4 prompts x 3
  std::smatch prompt_tokens;
  ASSERT_TRUE(std::regex_search(p.output, prompt_tokens,
                                std::regex("Total num prompt tokens:  ([0-9]+)\n")));
  EXPECT_GE(std::stoll(prompt_tokens[1]), 4 * (8 + 4));
}

// Every vLLM flag of the command is listed by our --help or refused by name (exit 2, before
// any engine starts); server flags are refused too.
void CheckFlags(const std::string& command, const std::string& fixture_key) {
  const CliResult help = RunCli({"bench", command, "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.output;
  for (const auto& flag_json : Fixture()[fixture_key]) {
    const std::string flag = flag_json.get<std::string>();
    if (absl::StrContains(help.output, " " + flag + " ")) continue;
    const CliResult r = RunCli({"bench", command, flag, "1"}, /*merge_stderr=*/true);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(flag + ": vLLM's flag")) << flag;
  }
  for (const std::string flag : {"--host", "--port", "--api-key", "--headless", "-asc"}) {
    const CliResult r = RunCli({"bench", command, flag, "1"}, /*merge_stderr=*/true);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("a flag of `vllm-launch serve`")) << flag;
  }
}

TEST(BenchOfflineTest, LatencyFlagsAreVllmsOrRefused) { CheckFlags("latency", "latency_flags"); }

TEST(BenchOfflineTest, ThroughputFlagsAreVllmsOrRefused) {
  CheckFlags("throughput", "throughput_flags");
  const CliResult hf = RunCli({"bench", "throughput", "--backend", "hf"}, true);
  EXPECT_EQ(hf.exit_code, 2);
  EXPECT_THAT(hf.output, HasSubstr("--backend hf"));
}

}  // namespace
}  // namespace vllm::testing
