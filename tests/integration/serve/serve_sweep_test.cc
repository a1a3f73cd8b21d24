// `vllm-launch bench sweep serve_sla` end to end on the bundled model: two server
// combinations (--max-num-seqs / --max-num-batched-tokens), two SLAs (one every run meets, one
// none can), one run of 4 tiny prompts per probe. Checks the table, the best-setting line,
// vLLM's files, and that every server the sweep started is gone (ServeTest's TearDown counts
// our descendants: this process is their subreaper).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/process.h"

namespace vllm::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kModel = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ServeSweepTest : public ServeTest {};

TEST_F(ServeSweepTest, SlaSearchPrintsTableBestSettingAndWritesVllmFiles) {
  const fs::path dir = fs::path(::testing::TempDir()) / absl::StrCat("sweep_", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "serve.json") << R"([{"max_num_seqs": 1, "max_num_batched_tokens": 32},
                                            {"max_num_seqs": 4, "max_num_batched_tokens": 128}])";
  std::ofstream(dir / "sla.json") << R"([{"p99_ttft_ms": "<=600000", "p99_itl_ms": "<=600000"},
                                          {"p99_ttft_ms": "<0.0001"}])";
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string launch = BinDir() + "/vllm-launch";
  auto sweep = Subprocess::Spawn(
      {launch,
       "bench",
       "sweep",
       "serve_sla",
       "--serve-cmd",
       absl::StrCat(launch, " serve ", kModel, " --port ", port, " --kv-cache-memory 64MiB"),
       "--bench-cmd",
       absl::StrCat(launch, " bench serve --model ", kModel, " --port ", port,
                    " --num-prompts 4 --random-input-len 8 --random-output-len 4"),
       "--serve-params",
       (dir / "serve.json").string(),
       "--sla-params",
       (dir / "sla.json").string(),
       "--sla-variable",
       "max_concurrency",
       "--num-runs",
       "1",
       "-o",
       (dir / "out").string(),
       "-e",
       "e"});
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  std::string out;
  while (true) {
    absl::StatusOr<std::string> line = sweep->ReadLine(absl::Seconds(120));
    if (!line.ok()) break;
    absl::StrAppend(&out, *line, "\n");
  }
  absl::StatusOr<int> status = sweep->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(*status, 0) << DescribeWaitStatus(*status) << "\n" << out;

  // The search: "infinite" concurrency first, met by the lenient SLA; the strict one fails at the
  // maximum and the minimum and is met by none.
  EXPECT_THAT(out, HasSubstr("Testing max_concurrency: 65536"));
  EXPECT_THAT(out, HasSubstr("Maximum max_concurrency for SLA: 65536."));
  EXPECT_THAT(out, HasSubstr("Testing max_concurrency: 1\n"));
  EXPECT_THAT(out, HasSubstr("SLA criteria are not met."));
  // The table: a header and one row per (server, SLA), the strict SLA's rows with "none".
  EXPECT_THAT(out, HasSubstr("Sweep Result"));
  int rows = 0, none_rows = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (!absl::StartsWith(line, "max_num_seqs=")) continue;
    ++rows;
    if (absl::StrContains(line, "| none ")) ++none_rows;
  }
  EXPECT_EQ(rows, 4) << out;
  EXPECT_EQ(none_rows, 2) << out;
  EXPECT_THAT(out, HasSubstr("Best setting: serve: max_num_seqs="));
  EXPECT_THAT(out, HasSubstr("| max_concurrency=65536 under p99_ttft_ms<=600000.00"));

  // vLLM's files.
  const fs::path exp = dir / "out" / "e";
  const fs::path base = exp / "SERVE--max_num_seqs=4-max_num_batched_tokens=128";
  const fs::path run = base / "max_concurrency=65536" / "run=0.json";
  ASSERT_TRUE(fs::exists(run)) << run;
  const auto result = nlohmann::json::parse(ReadFile(run));
  EXPECT_EQ(result["completed"], 4);
  EXPECT_EQ(result["run_number"], 0);
  EXPECT_EQ(result["max_num_seqs"], 4);
  EXPECT_EQ(result["max_concurrency"], 65536);
  EXPECT_TRUE(result.contains("p99_itl_ms"));
  EXPECT_TRUE(fs::exists(base / "max_concurrency=65536" / "summary.json"));
  EXPECT_TRUE(fs::exists(base / "SLA--p99_ttft_ms<=600000.00-p99_itl_ms<=600000.00.json"));
  EXPECT_TRUE(fs::exists(base / "SLA--p99_ttft_ms<0.00.json"));
  const std::string csv = ReadFile(exp / "summary.csv");
  // One line per run: 2 servers x (1 probe + 2 probes), and the header.
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7) << csv;
  EXPECT_TRUE(absl::StartsWith(csv, ",")) << csv.substr(0, 80);  // pandas' unnamed index
  EXPECT_THAT(csv.substr(0, csv.find('\n')),
              HasSubstr(",run_number,max_num_seqs,max_num_batched_tokens"));
  // The last server is gone: its port answers no more.
  EXPECT_FALSE(Http(port, "GET", "/health").ok());
}

}  // namespace
}  // namespace vllm::testing
