// The runs of `bench sweep serve` (vLLM's sweep/serve.py: run_benchmark, run_comb, run_combs)
// and the files they leave: OUTPUT_DIR/EXPERIMENT/SERVE--<name>-BENCH--<name>/run=N.json
// (bench serve's result JSON with run_number and the overrides added), summary.json (the
// runs), warmup.json, run=N.failure.json, SERVE-<name>-failure.json and summary.csv.
#include "bench/sweep/sweep_run.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/ordered_json.h"

namespace vllm::bench_sweep {
namespace fs = std::filesystem;

absl::StatusOr<Json> ReadResultFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  return base::ParseOrderedJson(text.str(), path);
}

absl::Status WriteJsonFile(const std::string& path, const Json& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << value.dump(4, ' ', true);
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string CombBasePath(const std::string& experiment_dir, const ParamItem& serve_comb,
                         const ParamItem& bench_comb, const std::vector<std::string>& extra) {
  std::vector<std::string> parts;
  if (!serve_comb.empty()) parts.insert(parts.end(), {"SERVE-", serve_comb.Name()});
  if (!bench_comb.empty()) parts.insert(parts.end(), {"BENCH-", bench_comb.Name()});
  parts.insert(parts.end(), extra.begin(), extra.end());
  return (fs::path(experiment_dir) / SanitizeFilename(absl::StrJoin(parts, "-"))).string();
}

std::string RunPath(const std::string& base_path, std::optional<int> run_number) {
  if (!run_number.has_value()) return (fs::path(base_path) / "summary.json").string();
  return (fs::path(base_path) / absl::StrCat("run=", *run_number, ".json")).string();
}

bool CombIsValid(const ParamItem& serve_comb, const ParamItem& bench_comb,
                 const std::vector<std::pair<std::string, std::string>>& link_vars) {
  for (const auto& [serve_key, bench_key] : link_vars) {
    if (!serve_comb.params().contains(serve_key) || !bench_comb.params().contains(bench_key) ||
        serve_comb.params()[serve_key] != bench_comb.params()[bench_key]) {
      return false;
    }
  }
  return true;
}

absl::Status AfterBench(const SweepArgs& args, const ServerProcess& server) {
  if (args.after_bench_cmd.empty()) return server.ResetCaches();
  return RunCommand(args.after_bench_cmd, args.show_stdout);
}

namespace {

Json UpdateRunData(Json run_data, const ParamItem& serve_overrides,
                   const ParamItem& bench_overrides, int run_number) {
  run_data["run_number"] = run_number;
  for (const auto& [k, v] : serve_overrides.params().items()) run_data[k] = v;
  for (const auto& [k, v] : bench_overrides.params().items()) run_data[k] = v;
  return run_data;
}

}  // namespace

absl::StatusOr<std::optional<Json>> RunBenchmark(const SweepArgs& args, ServerProcess* server,
                                                 const ParamItem& serve_overrides,
                                                 const ParamItem& bench_overrides, int run_number,
                                                 const std::string& output_path) {
  const fs::path out(output_path);
  std::vector<std::string> cmd = bench_overrides.ApplyToCmd(args.bench_cmd);
  cmd.insert(cmd.end(),
             {"--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--result-dir",
              out.parent_path().string(), "--result-filename", out.filename().string()});
  std::printf("[BEGIN BENCHMARK]\nBenchmark overrides: %s\nRun Number: %d\n",
              bench_overrides.Repr().c_str(), run_number);
  std::printf("Benchmark command: %s\nOutput file: %s\n", PythonListRepr(cmd).c_str(),
              output_path.c_str());
  if (fs::exists(out)) {
    std::printf("Found existing results.\n[SKIPPED BENCHMARK]\n");
    absl::StatusOr<Json> data = ReadResultFile(output_path);
    if (!data.ok()) return data.status();
    return UpdateRunData(std::move(*data), serve_overrides, bench_overrides, run_number);
  }
  if (server == nullptr) {
    if (!args.dry_run) {
      return absl::NotFoundError(absl::StrCat("Cannot find results at ", output_path));
    }
    std::printf("[END BENCHMARK]\n");
    return std::optional<Json>();
  }
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  std::fflush(stdout);
  if (absl::Status s = RunCommand(cmd, args.show_stdout); !s.ok()) return s;
  if (absl::Status s = AfterBench(args, *server); !s.ok()) return s;
  absl::StatusOr<Json> data = ReadResultFile(output_path);
  if (!data.ok()) return data.status();
  Json run_data = UpdateRunData(std::move(*data), serve_overrides, bench_overrides, run_number);
  if (absl::Status s = WriteJsonFile(output_path, run_data); !s.ok()) return s;
  std::printf("[END BENCHMARK]\n");
  return std::optional<Json>(std::move(run_data));
}

namespace {

// run_benchmark_with_error_handling: with --continue-on-error a failed run is recorded in
// run=N.failure.json and skipped (nullopt).
absl::StatusOr<std::optional<Json>> RunRecorded(const SweepArgs& args, ServerProcess* server,
                                                const ParamItem& serve_comb,
                                                const ParamItem& bench_overrides, int run_number,
                                                const std::string& output_path) {
  absl::StatusOr<std::optional<Json>> run =
      RunBenchmark(args, server, serve_comb, bench_overrides, run_number, output_path);
  if (run.ok() || !args.continue_on_error) return run;
  const fs::path out(output_path);
  const std::string failure =
      (out.parent_path() / absl::StrCat(out.stem().string(), ".failure.json")).string();
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  Json record = {
      {"run_number", run_number},
      {"error_type",
       run.status().code() == absl::StatusCode::kInternal ? "CalledProcessError" : "RuntimeError"},
      {"error", std::string(run.status().message())},
      {"serve_overrides", serve_comb.params()},
      {"bench_overrides", bench_overrides.params()}};
  (void)WriteTextFile(failure, record.dump(2, ' ', true) + "\n");
  std::printf("[FAILED BENCHMARK] run=%d: %s\nFailure details: %s\n", run_number,
              std::string(run.status().message()).c_str(), failure.c_str());
  if (server != nullptr) (void)AfterBench(args, *server);
  return std::optional<Json>();
}

}  // namespace

absl::StatusOr<std::optional<std::vector<Json>>> RunComb(const SweepArgs& args,
                                                         ServerProcess* server,
                                                         const ParamItem& serve_comb,
                                                         const ParamItem& bench_comb,
                                                         const std::string& base_path) {
  using Result = std::optional<std::vector<Json>>;
  if (!CombIsValid(serve_comb, bench_comb, args.link_vars)) return Result();
  if (args.warmup_num_prompts > 0) {
    const ParamItem warmup = bench_comb.Merge({{"num_prompts", args.warmup_num_prompts}});
    absl::StatusOr<std::optional<Json>> run = RunRecorded(
        args, server, serve_comb, warmup, -1, (fs::path(base_path) / "warmup.json").string());
    if (!run.ok()) return run.status();
  }
  std::vector<Json> comb_data;
  for (int run_number = 0; run_number < args.num_runs; ++run_number) {
    absl::StatusOr<std::optional<Json>> run = RunRecorded(
        args, server, serve_comb, bench_comb, run_number, RunPath(base_path, run_number));
    if (!run.ok()) return run.status();
    if (run->has_value()) comb_data.push_back(std::move(**run));
  }
  if (args.dry_run) return Result();
  if (comb_data.empty()) {
    std::printf("[NO SUCCESSFUL MEASURED RUNS] leaving combination retryable\n");
    return Result(std::vector<Json>());
  }
  if (absl::Status s = WriteJsonFile(RunPath(base_path, std::nullopt), Json(comb_data)); !s.ok()) {
    return s;
  }
  return Result(std::move(comb_data));
}

absl::StatusOr<std::optional<ServerProcess>> BeginServer(const SweepArgs& args,
                                                         const ParamItem& serve_comb) {
  const std::vector<std::string> cmd = serve_comb.ApplyToCmd(args.serve_cmd);
  std::printf("[BEGIN SERVER]\nServer overrides: %s\nServer command: %s\n",
              serve_comb.Repr().c_str(), PythonListRepr(cmd).c_str());
  std::fflush(stdout);
  if (args.dry_run) return std::optional<ServerProcess>();
  absl::StatusOr<ServerProcess> server = ServerProcess::Start(cmd, args.show_stdout);
  if (!server.ok()) return server.status();
  if (absl::Status s = server->WaitUntilReady(absl::Seconds(args.server_ready_timeout)); !s.ok()) {
    (void)server->Stop(absl::Seconds(30));
    return s;
  }
  return std::optional<ServerProcess>(std::move(*server));
}

absl::Status EndServer(std::optional<ServerProcess>& server) {
  absl::Status stopped = absl::OkStatus();
  if (server.has_value()) stopped = server->Stop(absl::Seconds(30));
  server.reset();
  std::printf("[END SERVER]\n");
  return stopped;
}

absl::StatusOr<std::string> ResolveExperimentDir(const SweepArgs& args) {
  const std::string dir = (fs::path(args.output_dir) / args.experiment_name).string();
  if (args.resume && !fs::exists(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cannot resume from non-existent experiment_dir=", dir));
  }
  if (!args.resume && fs::exists(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cannot overwrite existing experiment_dir=", dir));
  }
  return dir;
}

}  // namespace vllm::bench_sweep
