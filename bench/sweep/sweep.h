// `vllm-launch bench sweep`: vLLM 0.33's `vllm bench sweep` (vllm/benchmarks/sweep/). Starts
// the server of --serve-cmd once per combination of --serve-params, runs the benchmark of
// --bench-cmd (`vllm-launch bench serve ...`) against it for every combination of
// --bench-params, --num-runs times, saves every run's result JSON under
// OUTPUT_DIR/EXPERIMENT_NAME/ with vLLM's names, and writes summary.csv. Subcommands:
//   serve      vLLM's `bench sweep serve`;
//   serve_sla  the SLA mode of vLLM's former `bench sweep serve_sla` (--sla-params,
//              --sla-variable): for each combination, the largest request rate (or
//              concurrency) whose results meet every SLA constraint.
// Both then print a table of the combinations and the best setting (ours: vLLM leaves that to
// its `plot` subcommands). vLLM's other subcommands are refused by name. See
// bench/sweep/README.md.
#ifndef VLLM_BENCH_SWEEP_SWEEP_H_
#define VLLM_BENCH_SWEEP_SWEEP_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sweep/sweep_params.h"

namespace vllm::bench_sweep {

// Everything the flags of `bench sweep serve` / `serve_sla` say (vLLM's SweepServeArgs and
// SweepServeSLAArgs).
struct SweepArgs {
  // "serve" or "serve_sla".
  std::string subcommand;
  std::vector<std::string> serve_cmd;
  std::vector<std::string> bench_cmd;
  std::vector<std::string> after_bench_cmd;
  bool show_stdout = false;
  int server_ready_timeout = 300;
  std::vector<ParamItem> serve_params;
  std::vector<ParamItem> bench_params;
  std::vector<std::pair<std::string, std::string>> link_vars;
  std::string output_dir = "results";
  std::string experiment_name;
  int num_runs = 3;
  int warmup_num_prompts = 0;
  bool continue_on_error = false;
  bool dry_run = false;
  bool resume = false;
  // serve_sla only.
  std::vector<SlaItem> sla_params;
  std::string sla_variable = "request_rate";
  bool help = false;
};

// Parses the arguments after `bench sweep` (the subcommand first). Fails with
// InvalidArgument (the message for the user) on a missing or unknown subcommand, vLLM's
// subcommands we lack (named), an unknown flag, a bad value or an unreadable params file.
[[nodiscard]] absl::StatusOr<SweepArgs> ParseSweepArgs(const std::vector<std::string>& args);

// The usage text of `bench sweep`.
std::string SweepUsage();

// Runs the sweep. Returns the exit code: 0 done; 1 a server or benchmark failed (the
// message names it, and --resume continues from the last saved run); 2 bad flags.
int RunBenchSweep(const std::vector<std::string>& args);

}  // namespace vllm::bench_sweep

#endif  // VLLM_BENCH_SWEEP_SWEEP_H_
