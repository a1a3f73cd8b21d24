// The flags of `bench sweep serve` and `serve_sla` (vLLM's SweepServeArgs.add_cli_args and
// SweepServeSLAArgs.add_cli_args), parsed as argparse does: "--flag value" or "--flag=value".
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/sweep/sweep.h"

namespace vllm::bench_sweep {
namespace {

// vLLM 0.33's `bench sweep` subcommands we do not have, with what to use instead.
const std::map<std::string, std::string>& RefusedSubcommands() {
  static const auto* const kRefused = new std::map<std::string, std::string>{
      {"serve_workload",
       "the workload explorer (serial and batch runs, then interpolated request rates) is not "
       "implemented; use `serve` with --bench-params listing the rates"},
      {"startup", "the start-up time sweep (`vllm bench startup`) is not implemented"},
      {"plot", "plotting (matplotlib/seaborn) is not implemented; read summary.csv"},
      {"plot_pareto", "plotting (matplotlib) is not implemented; read summary.csv"},
  };
  return *kRefused;
}

constexpr const char* kUsage =
    "usage: vllm-launch bench sweep {serve,serve_sla} [options]\n"
    "  serve      run `bench serve` against the server under every parameter combination\n"
    "  serve_sla  for every combination, find the largest --request-rate (or\n"
    "             --max-concurrency) that meets the SLA constraints\n"
    "options: --serve-cmd CMD --bench-cmd CMD [--after-bench-cmd CMD] [--show-stdout]\n"
    "  [--server-ready-timeout S] [--serve-params FILE] [--bench-params FILE]\n"
    "  [--link-vars a=b,...] [-o/--output-dir DIR] [-e/--experiment-name NAME]\n"
    "  [--num-runs N] [--warmup-num-prompts N] [--continue-on-error] [--dry-run] [--resume]\n"
    "serve_sla: --sla-params FILE [--sla-variable request_rate|max_concurrency]\n"
    "See bench/sweep/README.md.\n";

const std::set<std::string>& BoolFlags() {
  static const auto* const kFlags =
      new std::set<std::string>{"--show-stdout", "--continue-on-error", "--dry-run", "--resume"};
  return *kFlags;
}

const std::set<std::string>& ValueFlags(bool sla) {
  static const auto* const kServe = new std::set<std::string>{
      "--serve-cmd",       "--bench-cmd",    "--after-bench-cmd",   "--server-ready-timeout",
      "--serve-params",    "--bench-params", "--link-vars",         "--output-dir",
      "--experiment-name", "--num-runs",     "--warmup-num-prompts"};
  static const auto* const kSla = [] {
    auto* s = new std::set<std::string>(*kServe);
    s->insert({"--sla-params", "--sla-variable"});
    return s;
  }();
  return sla ? *kSla : *kServe;
}

absl::Status BadFlag(const std::string& flag, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("argument ", flag, ": ", why));
}

absl::Status ParseInt(const std::string& flag, const std::string& value, int* out) {
  if (!absl::SimpleAtoi(value, out)) {
    return BadFlag(flag, absl::StrCat("invalid int value: '", value, "'"));
  }
  return absl::OkStatus();
}

// Reads the flag values into `args` (the command lines split, the files read).
absl::Status ApplyValues(const std::map<std::string, std::string>& v, SweepArgs* args) {
  auto split = [&](const char* flag, std::vector<std::string>* out) -> absl::Status {
    auto it = v.find(flag);
    if (it == v.end()) return absl::OkStatus();
    absl::StatusOr<std::vector<std::string>> words = ShlexSplit(it->second);
    if (!words.ok()) return BadFlag(flag, std::string(words.status().message()));
    if (words->empty()) return BadFlag(flag, "empty command");
    *out = std::move(*words);
    return absl::OkStatus();
  };
  for (const char* flag : {"--serve-cmd", "--bench-cmd"}) {
    if (!v.count(flag)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the following arguments are required: ", flag));
    }
  }
  if (absl::Status s = split("--serve-cmd", &args->serve_cmd); !s.ok()) return s;
  if (absl::Status s = split("--bench-cmd", &args->bench_cmd); !s.ok()) return s;
  if (absl::Status s = split("--after-bench-cmd", &args->after_bench_cmd); !s.ok()) return s;
  for (auto [flag, out] : {std::pair{"--serve-params", &args->serve_params},
                           std::pair{"--bench-params", &args->bench_params}}) {
    auto it = v.find(flag);
    if (it == v.end() || it->second.empty()) {
      *out = {ParamItem()};  // the command as given
      continue;
    }
    absl::StatusOr<std::vector<ParamItem>> items = ReadParamSweep(it->second);
    if (!items.ok()) return BadFlag(flag, std::string(items.status().message()));
    *out = std::move(*items);
  }
  if (auto it = v.find("--link-vars"); it != v.end() && !it->second.empty()) {
    for (absl::string_view item : absl::StrSplit(it->second, ',')) {
      std::vector<std::string> ab = absl::StrSplit(item, '=');
      if (ab.size() != 2) return BadFlag("--link-vars", absl::StrCat("bad pair '", item, "'"));
      args->link_vars.emplace_back(std::string(absl::StripAsciiWhitespace(ab[0])),
                                   std::string(absl::StripAsciiWhitespace(ab[1])));
    }
  }
  if (auto it = v.find("--output-dir"); it != v.end()) args->output_dir = it->second;
  if (auto it = v.find("--experiment-name"); it != v.end()) args->experiment_name = it->second;
  for (auto [flag, out] : {std::pair{"--server-ready-timeout", &args->server_ready_timeout},
                           std::pair{"--num-runs", &args->num_runs},
                           std::pair{"--warmup-num-prompts", &args->warmup_num_prompts}}) {
    auto it = v.find(flag);
    if (it == v.end()) continue;
    if (absl::Status s = ParseInt(flag, it->second, out); !s.ok()) return s;
  }
  if (args->num_runs < 1) return absl::InvalidArgumentError("`num_runs` should be at least 1.");
  if (args->warmup_num_prompts < 0) {
    return absl::InvalidArgumentError("`warmup_num_prompts` should be at least 0.");
  }
  return absl::OkStatus();
}

absl::Status ApplySlaValues(const std::map<std::string, std::string>& v, SweepArgs* args) {
  auto it = v.find("--sla-params");
  if (it == v.end()) {
    return absl::InvalidArgumentError("the following arguments are required: --sla-params");
  }
  absl::StatusOr<std::vector<SlaItem>> sla = ReadSlaSweep(it->second);
  if (!sla.ok()) return BadFlag("--sla-params", std::string(sla.status().message()));
  args->sla_params = std::move(*sla);
  if (auto var = v.find("--sla-variable"); var != v.end()) {
    if (var->second != "request_rate" && var->second != "max_concurrency") {
      return BadFlag("--sla-variable",
                     absl::StrCat("invalid choice: '", var->second,
                                  "' (choose from 'request_rate', 'max_concurrency')"));
    }
    args->sla_variable = var->second;
  }
  if (args->continue_on_error) {
    return BadFlag("--continue-on-error",
                   "not supported by serve_sla here (the search needs every probe's result)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SweepArgs> ParseSweepArgs(const std::vector<std::string>& argv) {
  SweepArgs args;
  if (argv.empty() || argv[0] == "-h" || argv[0] == "--help") {
    args.help = true;
    if (argv.empty()) return absl::InvalidArgumentError(kUsage);
    return args;
  }
  args.subcommand = argv[0];
  if (auto it = RefusedSubcommands().find(args.subcommand); it != RefusedSubcommands().end()) {
    return absl::InvalidArgumentError(absl::StrCat("`bench sweep ", args.subcommand,
                                                   "` (vLLM's) is not supported: ", it->second));
  }
  if (args.subcommand != "serve" && args.subcommand != "serve_sla") {
    return absl::InvalidArgumentError(absl::StrCat(
        "argument sweep_type: invalid choice: '", args.subcommand,
        "' (choose from 'serve', 'serve_sla'; vLLM's serve_workload, startup, plot and "
        "plot_pareto are not supported)"));
  }
  const bool sla = args.subcommand == "serve_sla";
  std::map<std::string, std::string> values;
  for (size_t i = 1; i < argv.size(); ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      args.help = true;
      return args;
    }
    if (flag == "-o") flag = "--output-dir";
    if (flag == "-e") flag = "--experiment-name";
    std::string value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); absl::StartsWith(flag, "--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (BoolFlags().count(flag)) {
      if (has_value) return BadFlag(flag, "ignored explicit argument");
      if (flag == "--show-stdout") args.show_stdout = true;
      if (flag == "--continue-on-error") args.continue_on_error = true;
      if (flag == "--dry-run") args.dry_run = true;
      if (flag == "--resume") args.resume = true;
      continue;
    }
    if (!ValueFlags(sla).count(flag)) {
      return absl::InvalidArgumentError(absl::StrCat("unrecognized arguments: ", argv[i]));
    }
    if (!has_value) {
      if (i + 1 >= argv.size()) return BadFlag(flag, "expected one argument");
      value = argv[++i];
    }
    values[flag] = value;
  }
  if (absl::Status s = ApplyValues(values, &args); !s.ok()) return s;
  if (sla) {
    if (absl::Status s = ApplySlaValues(values, &args); !s.ok()) return s;
  }
  return args;
}

std::string SweepUsage() { return kUsage; }

}  // namespace vllm::bench_sweep
