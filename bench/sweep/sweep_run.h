// Internal to bench/sweep/: the steps of a sweep (vLLM's sweep/serve.py), shared by the
// `serve` and `serve_sla` subcommands. Every function prints vLLM's progress lines
// ("[BEGIN SERVER]", "Benchmark command: [...]", ...) on stdout.
#ifndef VLLM_BENCH_SWEEP_SWEEP_RUN_H_
#define VLLM_BENCH_SWEEP_SWEEP_RUN_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/sweep/sweep.h"
#include "bench/sweep/sweep_params.h"
#include "bench/sweep/sweep_process.h"

namespace vllm::bench_sweep {

// JSON files: read (ordered, bounded by base::ParseOrderedJson), written with indent 4.
[[nodiscard]] absl::StatusOr<Json> ReadResultFile(const std::string& path);
[[nodiscard]] absl::Status WriteJsonFile(const std::string& path, const Json& value);
[[nodiscard]] absl::Status WriteTextFile(const std::string& path, const std::string& text);

// EXPERIMENT_DIR/SERVE--<serve name>-BENCH--<bench name>[-extra...] (a part is left out when
// its combination is empty), sanitized.
std::string CombBasePath(const std::string& experiment_dir, const ParamItem& serve_comb,
                         const ParamItem& bench_comb, const std::vector<std::string>& extra);
// BASE/run=N.json, or BASE/summary.json for nullopt.
std::string RunPath(const std::string& base_path, std::optional<int> run_number);
// --link-vars: every linked serve key and bench key are set and equal.
bool CombIsValid(const ParamItem& serve_comb, const ParamItem& bench_comb,
                 const std::vector<std::pair<std::string, std::string>>& link_vars);
// --after-bench-cmd, or the server's cache reset.
[[nodiscard]] absl::Status AfterBench(const SweepArgs& args, const ServerProcess& server);

// One benchmark run (vLLM's run_benchmark): a saved result at `output_path` is reused
// ("Found existing results."); otherwise the bench command with `bench_overrides` runs against
// `server` and saves its result there. Returns the result with run_number and the overrides
// added; nullopt in a dry run (server null). Fails when the command fails, or no result is
// saved and there is no server outside a dry run.
[[nodiscard]] absl::StatusOr<std::optional<Json>> RunBenchmark(
    const SweepArgs& args, ServerProcess* server, const ParamItem& serve_overrides,
    const ParamItem& bench_overrides, int run_number, const std::string& output_path);

// One combination (vLLM's run_comb): the warm-up, then --num-runs runs under `base_path`,
// summary.json. nullopt when --link-vars rules the combination out or in a dry run; an empty
// list when every run failed under --continue-on-error.
[[nodiscard]] absl::StatusOr<std::optional<std::vector<Json>>> RunComb(
    const SweepArgs& args, ServerProcess* server, const ParamItem& serve_comb,
    const ParamItem& bench_comb, const std::string& base_path);

// Prints "[BEGIN SERVER]", then starts the server with `serve_comb` applied and waits for
// /health (nullopt in a dry run). On a failure the server is stopped.
[[nodiscard]] absl::StatusOr<std::optional<ServerProcess>> BeginServer(const SweepArgs& args,
                                                                       const ParamItem& serve_comb);
// Stops the server (if any), prints "[END SERVER]".
absl::Status EndServer(std::optional<ServerProcess>& server);

// OUTPUT_DIR/EXPERIMENT_NAME: must exist with --resume, must not without.
[[nodiscard]] absl::StatusOr<std::string> ResolveExperimentDir(const SweepArgs& args);

}  // namespace vllm::bench_sweep

#endif  // VLLM_BENCH_SWEEP_SWEEP_RUN_H_
