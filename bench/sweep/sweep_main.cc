// `bench sweep serve` and `serve_sla`: the loops over the combinations (vLLM's run_combs and
// the former run_slas / solve_sla), summary.csv, and our table with the best setting.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/sweep/sweep.h"
#include "bench/sweep/sweep_run.h"

namespace vllm::bench_sweep {
namespace {
namespace fs = std::filesystem;

// vLLM's value of the SLA variable that stands for "unlimited" (request rate or concurrency).
constexpr int kSlaMaxValue = 65536;

// One line of the table: a combination and the mean of its runs (at the SLA's answer).
struct Row {
  std::string serve, bench, sla, load;
  bool ok = true;  // serve_sla: some value met the SLA
  int runs = 0;
  std::map<std::string, double> mean;
};

const std::vector<std::string>& TableMetrics() {
  static const auto* const kMetrics = new std::vector<std::string>{
      "request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "p99_itl_ms"};
  return *kMetrics;
}

// A combination as the table shows it: its _benchmark_name, else its "k=v" pairs.
std::string Label(const ParamItem& item) {
  if (item.empty()) return "(default)";
  return item.params().contains("_benchmark_name") ? item.Name() : item.AsText();
}

// The mean of `key` over `runs`; nullopt when some run lacks it or it is not a number.
std::optional<double> MeanOf(const std::vector<Json>& runs, const std::string& key) {
  if (runs.empty()) return std::nullopt;
  double sum = 0;
  for (const Json& r : runs) {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_number()) return std::nullopt;
    sum += it->get<double>();
  }
  return sum / static_cast<double>(runs.size());
}

Row MakeRow(const ParamItem& serve, const ParamItem& bench, const std::vector<Json>& runs) {
  Row row{Label(serve), Label(bench), "", "", !runs.empty(), static_cast<int>(runs.size()), {}};
  for (const std::string& m : TableMetrics()) {
    if (std::optional<double> v = MeanOf(runs, m)) row.mean[m] = *v;
  }
  return row;
}

// Prints the table and "Best setting: ..." (the row with the highest request throughput, as
// vLLM's benchmarks/auto_tune picks).
void PrintTable(const std::vector<Row>& rows, bool sla) {
  std::vector<std::string> header = {"serve params", "bench params"};
  if (sla) header.insert(header.end(), {"SLA", "max load meeting SLA"});
  header.insert(header.end(),
                {"runs", "req/s", "output tok/s", "mean TTFT ms", "P99 TTFT ms", "P99 ITL ms"});
  std::vector<std::vector<std::string>> cells = {header};
  for (const Row& r : rows) {
    std::vector<std::string> line = {r.serve, r.bench};
    if (sla) line.insert(line.end(), {r.sla, r.ok ? r.load : "none"});
    line.push_back(std::to_string(r.runs));
    for (const std::string& m : TableMetrics()) {
      const auto it = r.mean.find(m);
      line.push_back(r.ok && it != r.mean.end() ? absl::StrFormat("%.2f", it->second) : "-");
    }
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  }
  std::printf("%s\n",
              absl::StrCat(std::string(24, '='), " Sweep Result ", std::string(24, '=')).c_str());
  for (const auto& line : cells) {
    std::string text;
    for (size_t c = 0; c < line.size(); ++c) {
      absl::StrAppend(&text, c == 0 ? "" : " | ", line[c],
                      std::string(width[c] - line[c].size(), ' '));
    }
    std::printf("%s\n", text.c_str());
  }
  const Row* best = nullptr;
  for (const Row& r : rows) {
    if (!r.ok || !r.mean.count("request_throughput")) continue;
    if (best == nullptr || r.mean.at("request_throughput") > best->mean.at("request_throughput")) {
      best = &r;
    }
  }
  if (best == nullptr) {
    std::printf("Best setting: none (no combination %s)\n",
                sla ? "met the SLA" : "has a successful run");
    return;
  }
  std::string line = absl::StrCat("Best setting: serve: ", best->serve, " | bench: ", best->bench);
  if (sla) absl::StrAppend(&line, " | ", best->load, " under ", best->sla);
  absl::StrAppendFormat(
      &line, " | %.2f req/s, %.2f output tok/s", best->mean.at("request_throughput"),
      best->mean.count("output_throughput") ? best->mean.at("output_throughput") : 0.0);
  std::printf("%s\n", line.c_str());
}

// vLLM's _comb_needs_server: some bench combination lacks its summary.json.
bool CombNeedsServer(const SweepArgs& args, const std::string& dir, const ParamItem& serve_comb) {
  for (const ParamItem& bench_comb : args.bench_params) {
    if (!fs::exists(RunPath(CombBasePath(dir, serve_comb, bench_comb, {}), std::nullopt))) {
      return true;
    }
  }
  return false;
}

// With --continue-on-error, a server that fails is recorded in SERVE-<name>-failure.json.
void RecordServerFailure(const std::string& dir, const ParamItem& serve_comb,
                         const absl::Status& error) {
  const std::string name = serve_comb.Name().empty() ? "default" : serve_comb.Name();
  const std::string path =
      (fs::path(dir) / SanitizeFilename(absl::StrCat("SERVE-", name, "-failure.json"))).string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  const Json record = {{"error_type", "RuntimeError"},
                       {"error", std::string(error.message())},
                       {"serve_overrides", serve_comb.params()}};
  (void)WriteTextFile(path, record.dump(2, ' ', true) + "\n");
  std::printf("[FAILED SERVER COMBINATION] %s: RuntimeError: %s\nFailure details: %s\n",
              serve_comb.Name().empty() ? "(default)" : serve_comb.Name().c_str(),
              std::string(error.message()).c_str(), path.c_str());
}

// The benchmarks of one server combination; its rows are appended to `rows`.
absl::Status ServeOneServer(const SweepArgs& args, const std::string& dir,
                            const ParamItem& serve_comb, std::vector<Json>* all_data,
                            std::vector<Row>* rows) {
  std::optional<ServerProcess> server;
  const bool needed = CombNeedsServer(args, dir, serve_comb);
  if (needed) {
    absl::StatusOr<std::optional<ServerProcess>> started = BeginServer(args, serve_comb);
    if (!started.ok()) return started.status();
    if (started->has_value()) server.emplace(std::move(**started));
  }
  for (const ParamItem& bench_comb : args.bench_params) {
    absl::StatusOr<std::optional<std::vector<Json>>> data =
        RunComb(args, server ? &*server : nullptr, serve_comb, bench_comb,
                CombBasePath(dir, serve_comb, bench_comb, {}));
    if (!data.ok()) return data.status();
    if (!data->has_value()) continue;
    all_data->insert(all_data->end(), (*data)->begin(), (*data)->end());
    rows->push_back(MakeRow(serve_comb, bench_comb, **data));
  }
  if (needed) return EndServer(server);
  return absl::OkStatus();
}

absl::Status RunServeSweep(const SweepArgs& args, const std::string& dir) {
  std::vector<Json> all_data;
  std::vector<Row> rows;
  for (const ParamItem& serve_comb : args.serve_params) {
    absl::Status s = ServeOneServer(args, dir, serve_comb, &all_data, &rows);
    if (s.ok()) continue;
    if (!args.continue_on_error) return s;
    RecordServerFailure(dir, serve_comb, s);
  }
  if (args.dry_run) return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (absl::Status s =
          WriteTextFile((fs::path(dir) / "summary.csv").string(), RecordsToCsv(all_data));
      !s.ok()) {
    return s;
  }
  PrintTable(rows, /*sla=*/false);
  return absl::OkStatus();
}

// ---- serve_sla ----

// BASE/SLA--<criteria>.json (the runs of every probe) or BASE/<variable>=<value>.
std::string SlaIterPath(const std::string& base, const SlaItem& sla, const std::string& variable,
                        std::optional<int> value) {
  if (!value.has_value()) {
    return (fs::path(base) / SanitizeFilename(absl::StrCat("SLA--", sla.AsText("-"), ".json")))
        .string();
  }
  return (fs::path(base) / absl::StrCat(variable, "=", *value)).string();
}

// Whether the mean of the runs meets every criterion (printing vLLM's "Validating SLA" lines).
absl::StatusOr<bool> ValidateSla(const SlaItem& sla, const std::vector<Json>& runs) {
  bool all = true;
  for (const SlaCriterion& c : sla.criteria) {
    std::optional<double> mean = MeanOf(runs, c.metric);
    if (!mean.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SLA metric '", c.metric,
          "' is not a number in every benchmark result (keys such "
          "as p99_ttft_ms, p99_itl_ms, mean_e2el_ms; --percentile-metrics ttft,tpot,itl,e2el is "
          "passed, --metric-percentiles in --bench-cmd chooses the percentiles)"));
    }
    const bool ok = c.Validate(*mean);
    std::printf("Validating SLA: %s | %s\n",
                c.FormatCond(absl::StrFormat("%s = %.2f", c.metric, *mean)).c_str(),
                ok ? "PASSED" : "FAILED");
    all = all && ok;
  }
  return all;
}

// The probes of one SLA search, their runs kept by value.
struct SlaProbes {
  std::map<int, std::vector<Json>> runs;
  std::vector<Json> all;
};

// vLLM's run_sla: --num-runs runs at `value`, BASE/<variable>=<value>/summary.json.
absl::StatusOr<std::optional<std::vector<Json>>> RunSlaIter(const SweepArgs& args,
                                                            ServerProcess* server,
                                                            const ParamItem& serve_comb,
                                                            const ParamItem& bench_comb,
                                                            const std::string& iter_path) {
  std::vector<Json> iter_data;
  for (int run = 0; run < args.num_runs; ++run) {
    absl::StatusOr<std::optional<Json>> data =
        RunBenchmark(args, server, serve_comb, bench_comb, run, RunPath(iter_path, run));
    if (!data.ok()) return data.status();
    if (data->has_value()) iter_data.push_back(std::move(**data));
  }
  if (args.dry_run) return std::optional<std::vector<Json>>();
  if (absl::Status s = WriteJsonFile(RunPath(iter_path, std::nullopt), Json(iter_data)); !s.ok()) {
    return s;
  }
  return std::optional<std::vector<Json>>(std::move(iter_data));
}

// vLLM's search_sla for one (serve, bench, SLA) combination; appends its row.
absl::Status SearchOneSla(const SweepArgs& args, ServerProcess* server, const std::string& base,
                          const ParamItem& serve_comb, const ParamItem& bench_comb,
                          const SlaItem& sla, std::vector<Json>* all_data, std::vector<Row>* rows) {
  const std::string& var = args.sla_variable;
  std::printf("[SLA START]\nSLA criteria: %s\n", sla.AsText().c_str());
  SlaProbes probes;
  bool dry = false;
  auto probe = [&](int value) -> absl::StatusOr<bool> {
    std::printf("Testing %s: %d%s\n", var.c_str(), value, var == "request_rate" ? " req/s" : "");
    absl::StatusOr<std::optional<std::vector<Json>>> iter =
        RunSlaIter(args, server, serve_comb, bench_comb.Merge({{var, value}}),
                   SlaIterPath(base, sla, var, value));
    if (!iter.ok()) return iter.status();
    if (!iter->has_value()) {
      dry = true;  // a dry run: the first probe's commands are printed, the search stops
      return true;
    }
    absl::StatusOr<bool> met = ValidateSla(sla, **iter);
    if (!met.ok()) return met.status();
    std::printf("SLA criteria are %s.\n", *met ? "met" : "not met");
    probes.all.insert(probes.all.end(), (*iter)->begin(), (*iter)->end());
    probes.runs[value] = std::move(**iter);
    return *met;
  };
  absl::StatusOr<SlaSearchResult> result = SearchSla(1, kSlaMaxValue, probe);
  if (!result.ok()) return result.status();
  if (dry) {
    std::printf("Omitting SLA search.\n[SLA END]\n");
    return absl::OkStatus();
  }
  std::printf("Maximum %s for SLA: %d%s.\n", var.c_str(), result->max_passing,
              var == "request_rate" ? " req/s" : "");
  if (absl::Status s = WriteJsonFile(SlaIterPath(base, sla, var, std::nullopt), Json(probes.all));
      !s.ok()) {
    return s;
  }
  std::printf("[SLA END]\n");
  all_data->insert(all_data->end(), probes.all.begin(), probes.all.end());
  Row row = MakeRow(serve_comb, bench_comb, probes.runs[result->max_passing]);
  row.sla = sla.AsText();
  row.load = absl::StrCat(var, "=", result->max_passing);
  row.ok = result->any_passing;
  rows->push_back(std::move(row));
  return absl::OkStatus();
}

// vLLM's _sla_needs_server: some (bench, SLA) combination lacks its SLA--*.json.
bool SlaNeedsServer(const SweepArgs& args, const std::string& dir, const ParamItem& serve_comb) {
  for (const ParamItem& bench_comb : args.bench_params) {
    const std::string base = CombBasePath(dir, serve_comb, bench_comb, {});
    for (const SlaItem& sla : args.sla_params) {
      if (!fs::exists(SlaIterPath(base, sla, args.sla_variable, std::nullopt))) return true;
    }
  }
  return false;
}

absl::Status SlaOneServer(const SweepArgs& args, const std::string& dir,
                          const ParamItem& serve_comb, std::vector<Json>* all_data,
                          std::vector<Row>* rows) {
  std::optional<ServerProcess> server;
  const bool needed = SlaNeedsServer(args, dir, serve_comb);
  if (needed) {
    absl::StatusOr<std::optional<ServerProcess>> started = BeginServer(args, serve_comb);
    if (!started.ok()) return started.status();
    if (started->has_value()) server.emplace(std::move(**started));
  }
  for (const ParamItem& bench_comb : args.bench_params) {
    if (!CombIsValid(serve_comb, bench_comb, args.link_vars)) continue;
    const std::string base = CombBasePath(dir, serve_comb, bench_comb, {});
    ServerProcess* s = server ? &*server : nullptr;
    if (args.warmup_num_prompts > 0) {
      absl::StatusOr<std::optional<Json>> warm = RunBenchmark(
          args, s, serve_comb, bench_comb.Merge({{"num_prompts", args.warmup_num_prompts}}), -1,
          (fs::path(base) / "warmup.json").string());
      if (!warm.ok()) return warm.status();
    }
    for (const SlaItem& sla : args.sla_params) {
      absl::Status st = SearchOneSla(args, s, base, serve_comb, bench_comb, sla, all_data, rows);
      if (!st.ok()) return st;
    }
  }
  if (needed) return EndServer(server);
  return absl::OkStatus();
}

absl::Status RunSlaSweep(const SweepArgs& args, const std::string& dir) {
  for (const ParamItem& bench_comb : args.bench_params) {
    if (bench_comb.HasParam(args.sla_variable)) {
      return absl::InvalidArgumentError(
          absl::StrCat("You should not override `", args.sla_variable,
                       "` in `bench_params` in SLA mode, since it is supposed to be determined "
                       "automatically."));
    }
  }
  std::vector<Json> all_data;
  std::vector<Row> rows;
  for (const ParamItem& serve_comb : args.serve_params) {
    if (absl::Status s = SlaOneServer(args, dir, serve_comb, &all_data, &rows); !s.ok()) return s;
  }
  if (args.dry_run) return absl::OkStatus();
  if (absl::Status s =
          WriteTextFile((fs::path(dir) / "summary.csv").string(), RecordsToCsv(all_data));
      !s.ok()) {
    return s;
  }
  PrintTable(rows, /*sla=*/true);
  return absl::OkStatus();
}

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d_%H%M%S", &local);
  return buf;
}

}  // namespace

int RunBenchSweep(const std::vector<std::string>& argv) {
  absl::StatusOr<SweepArgs> args = ParseSweepArgs(argv);
  if (!args.ok()) {
    std::fprintf(stderr, "vllm-launch bench sweep: %s\n",
                 std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help) {
    std::printf("%s", SweepUsage().c_str());
    return 0;
  }
  if (args->experiment_name.empty()) args->experiment_name = Timestamp();
  absl::StatusOr<std::string> dir = ResolveExperimentDir(*args);
  if (!dir.ok()) {
    std::fprintf(stderr, "vllm-launch bench sweep: %s\n",
                 std::string(dir.status().message()).c_str());
    return 2;
  }
  // The server's engine and worker processes come to us when it exits (Stop reaps them), and
  // an interrupted sweep kills the server it started.
  BecomeSubreaper();
  KillServerOnSignal();
  const absl::Status status =
      args->subcommand == "serve_sla" ? RunSlaSweep(*args, *dir) : RunServeSweep(*args, *dir);
  std::fflush(stdout);
  if (!status.ok()) {
    std::fprintf(stderr,
                 "vllm-launch bench sweep: %s\nThe script was terminated early. Use `--resume` "
                 "to continue the script from its last checkpoint.\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  std::printf("Experiment %s at: %s\n", args->dry_run ? "will be saved" : "has been saved",
              dir->c_str());
  return 0;
}

}  // namespace vllm::bench_sweep
