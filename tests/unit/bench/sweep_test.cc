// Tests of `vllm-launch bench sweep`'s values (bench/sweep/sweep_params.h) and flags
// (bench/sweep/sweep.h): vLLM 0.33's param_sweep.py semantics, the SLA constraints and search,
// pandas' CSV, and the refusals. The runs themselves are tested with real servers in
// tests/integration/serve/serve_sweep_test.cc.
#include "bench/sweep/sweep.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/sweep/sweep_params.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::bench_sweep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ShlexSplitTest, QuotesAndEscapesAsPython) {
  auto words = ShlexSplit(R"(vllm serve  'a b' "c \"d\" \x" e\ f --x='{"k": 1}')");
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_THAT(*words, ElementsAre("vllm", "serve", "a b", "c \"d\" \\x", "e f", "--x={\"k\": 1}"));
  EXPECT_FALSE(ShlexSplit("a 'b").ok());
  EXPECT_FALSE(ShlexSplit("a \\").ok());
  EXPECT_TRUE(ShlexSplit("   ")->empty());
}

TEST(ParamItemTest, ApplyToCmdReplacesOrAppendsAsVllm) {
  const ParamItem item(Json::parse(
      R"({"max_num_seqs": 32, "max-num-batched-tokens": 1024, "enforce_eager": false,
          "compilation_config.cudagraph": true, "kv": {"a": 1.5}, "_benchmark_name": "x"})"));
  const std::vector<std::string> cmd = item.ApplyToCmd(
      {"vllm-launch", "serve", "--max-num-seqs", "8", "--enforce-eager", "--port", "1"});
  EXPECT_THAT(cmd, ElementsAre("vllm-launch", "serve", "--max-num-seqs", "32", "--no-enforce-eager",
                               "--port", "1", "--max-num-batched-tokens", "1024",
                               "--compilation-config.cudagraph=true", "--kv", R"({"a": 1.5})"));
  EXPECT_EQ(item.Name(), "x");
  EXPECT_TRUE(item.HasParam("max-num-seqs"));
  EXPECT_TRUE(item.HasParam("max_num_batched_tokens"));
  EXPECT_FALSE(item.HasParam("request_rate"));
  EXPECT_EQ(ParamItem(Json::parse(R"({"a": 1, "b": 0.5, "c": "s"})")).Name(), "a=1-b=0.5-c=s");
  EXPECT_EQ(ParamItem(Json::parse(R"({"a": 1, "b": "s"})")).Repr(), "{'a': 1, 'b': 's'}");
}

TEST(ParamSweepTest, ListOrNamedDict) {
  auto list = ParamSweepFromJson(Json::parse(R"([{"b": 1, "a": 2}, {}])"));
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].AsText(), "b=1, a=2");  // the file's key order
  auto named = ParamSweepFromJson(Json::parse(R"({"small": {"max_num_seqs": 4}})"));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)[0].Name(), "small");
  EXPECT_EQ((*named)[0].AsText(), "max_num_seqs=4");
  EXPECT_THAT(ParamSweepFromJson(Json::parse(R"([{"_benchmark_name": "a"},
                                                 {"_benchmark_name": "a"}])"))
                  .status()
                  .message(),
              HasSubstr("Duplicate _benchmark_name"));
  EXPECT_FALSE(ParamSweepFromJson(Json::parse("[1]")).ok());
  EXPECT_FALSE(ParamSweepFromJson(Json::parse("3")).ok());
}

TEST(SlaSweepTest, OperatorsAndErrors) {
  auto sla = SlaSweepFromJson(Json::parse(R"([{"p99_ttft_ms": "<=200", "p99_itl_ms": "<50.5"}])"));
  ASSERT_TRUE(sla.ok()) << sla.status();
  ASSERT_EQ((*sla)[0].criteria.size(), 2u);
  EXPECT_EQ((*sla)[0].AsText(), "p99_ttft_ms<=200.00, p99_itl_ms<50.50");
  EXPECT_TRUE((*sla)[0].criteria[0].Validate(200));
  EXPECT_FALSE((*sla)[0].criteria[1].Validate(50.5));
  EXPECT_THAT(SlaSweepFromJson(Json::parse(R"([{"p99_ttft_ms": "=200"}])")).status().message(),
              HasSubstr("Invalid operator"));
  EXPECT_FALSE(SlaSweepFromJson(Json::parse(R"([{"p99_ttft_ms": "<=abc"}])")).ok());
  EXPECT_FALSE(SlaSweepFromJson(Json::parse(R"({"p99_ttft_ms": "<=1"})")).ok());
}

TEST(SearchSlaTest, FindsTheLargestPassingValue) {
  std::vector<int> probed;
  auto result = SearchSla(1, 65536, [&](int v) -> absl::StatusOr<bool> {
    probed.push_back(v);
    return v <= 37;
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->max_passing, 37);
  EXPECT_TRUE(result->any_passing);
  ASSERT_GE(probed.size(), 2u);
  EXPECT_EQ(probed[0], 65536);  // vLLM's order: "infinite" first, then the minimum
  EXPECT_EQ(probed[1], 1);
  EXPECT_LE(probed.size(), 20u);
  EXPECT_TRUE(result->history.at(37));
  EXPECT_FALSE(result->history.at(38));

  probed.clear();
  auto all = SearchSla(1, 65536, [&](int v) -> absl::StatusOr<bool> {
    probed.push_back(v);
    return true;
  });
  EXPECT_EQ(all->max_passing, 65536);
  EXPECT_EQ(probed.size(), 1u);

  auto none = SearchSla(1, 65536, [](int) -> absl::StatusOr<bool> { return false; });
  EXPECT_FALSE(none->any_passing);
  EXPECT_EQ(none->history.size(), 2u);

  auto failed = SearchSla(
      1, 8, [](int) -> absl::StatusOr<bool> { return absl::InternalError("bench failed"); });
  EXPECT_EQ(failed.status().message(), "bench failed");
}

TEST(RecordsToCsvTest, PandasLayout) {
  const std::vector<Json> records = {Json::parse(R"({"a": 1, "s": "x,y", "f": 0.5})"),
                                     Json::parse(R"({"a": 2, "b": 3, "t": true})")};
  EXPECT_EQ(RecordsToCsv(records),
            ",a,s,f,b,t\n"
            "0,1,\"x,y\",0.5,,\n"
            "1,2,,,3.0,True\n");
}

TEST(SanitizeFilenameTest, AsVllm) {
  EXPECT_EQ(SanitizeFilename("SERVE--a/b..c"), "SERVE--a_b__c");
  EXPECT_EQ(SanitizeFilename("'x'"), "x");
}

TEST(ParseSweepArgsTest, FlagsAndRefusals) {
  const std::string dir = ::testing::TempDir() + "/sweep_args";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/serve.json") << R"([{"max_num_seqs": 2}, {"max_num_seqs": 4}])";
  std::ofstream(dir + "/sla.json") << R"([{"p99_ttft_ms": "<=100"}])";
  auto args =
      ParseSweepArgs({"serve_sla", "--serve-cmd", "vllm-launch serve --port 9",
                      "--bench-cmd=vllm-launch bench serve", "--serve-params", dir + "/serve.json",
                      "--sla-params", dir + "/sla.json", "--sla-variable", "max_concurrency", "-o",
                      dir, "--num-runs", "1", "--dry-run"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_THAT(args->serve_cmd, ElementsAre("vllm-launch", "serve", "--port", "9"));
  EXPECT_EQ(args->serve_params.size(), 2u);
  EXPECT_EQ(args->bench_params.size(), 1u);  // the command as given
  EXPECT_EQ(args->sla_variable, "max_concurrency");
  EXPECT_EQ(args->num_runs, 1);
  EXPECT_TRUE(args->dry_run);

  EXPECT_THAT(ParseSweepArgs({"plot", "EXPERIMENT_DIR"}).status().message(),
              HasSubstr("`bench sweep plot` (vLLM's) is not supported"));
  EXPECT_THAT(ParseSweepArgs({"serve_workload"}).status().message(), HasSubstr("serve_workload"));
  EXPECT_THAT(ParseSweepArgs({"serve", "--serve-cmd", "a", "--bench-cmd", "b", "--bogus"})
                  .status()
                  .message(),
              HasSubstr("unrecognized arguments: --bogus"));
  EXPECT_THAT(ParseSweepArgs({"serve", "--serve-cmd", "a"}).status().message(),
              HasSubstr("required: --bench-cmd"));
  EXPECT_THAT(
      ParseSweepArgs({"serve_sla", "--serve-cmd", "a", "--bench-cmd", "b"}).status().message(),
      HasSubstr("--sla-params"));
  EXPECT_THAT(ParseSweepArgs({"serve", "--serve-cmd", "a", "--bench-cmd", "b", "--num-runs", "0"})
                  .status()
                  .message(),
              HasSubstr("num_runs"));
  EXPECT_FALSE(ParseSweepArgs({"serve", "--serve-cmd", "a", "--bench-cmd", "b", "--sla-params",
                               dir + "/sla.json"})
                   .ok());  // serve_sla's flag
}

}  // namespace
}  // namespace vllm::bench_sweep
