#include "bench/serve/bench_serve.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/serve/metrics.h"

namespace vllm::bench_serve {
namespace {

// Errors printed to stderr after the table, so a failed run says why.
constexpr size_t kMaxErrorsShown = 5;
constexpr std::chrono::seconds kModelsTimeout(30);

// Splits "http://host[:port][/prefix]" into host, port and path prefix.
absl::Status ParseBaseUrl(const std::string& url, LoadOptions& load, std::string& prefix) {
  absl::string_view rest = url;
  if (absl::StartsWith(rest, "https://")) {
    return absl::InvalidArgumentError("--base-url: https is not supported; use http://");
  }
  absl::ConsumePrefix(&rest, "http://");
  const size_t slash = rest.find('/');
  prefix = slash == absl::string_view::npos ? "" : std::string(rest.substr(slash));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const absl::string_view authority = rest.substr(0, slash);
  const size_t colon = authority.rfind(':');
  if (authority.empty() || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--base-url: no host in ", url));
  }
  if (colon == absl::string_view::npos) {
    load.host = std::string(authority);
    load.port = "80";
  } else {
    load.host = std::string(authority.substr(0, colon));
    load.port = std::string(authority.substr(colon + 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ParsePercentiles(const std::string& text) {
  std::vector<double> percentiles;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double p = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &p) || !(p > 0 && p < 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metric-percentiles: expected numbers in (0, 100), got \"", part, "\""));
    }
    percentiles.push_back(p);
  }
  return percentiles;
}

absl::StatusOr<std::vector<std::string>> ParseMetricNames(const std::string& text) {
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::string name(absl::StripAsciiWhitespace(part));
    if (name != "ttft" && name != "tpot" && name != "itl" && name != "e2el") {
      return absl::InvalidArgumentError(absl::StrCat("--percentile-metrics: unknown metric \"",
                                                     name, "\" (ttft, tpot, itl, e2el)"));
    }
    names.push_back(name);
  }
  return names;
}

// Fills `flags` from the raw values CLI11 collected and checks them together.
absl::Status Finalize(BenchServeFlags& flags, const std::string& base_url,
                      const std::string& endpoint, const std::string& request_rate,
                      std::optional<int> max_concurrency, const std::string& metrics,
                      const std::string& percentiles) {
  LoadOptions& load = flags.load;
  load.backend = flags.backend_name == "openai-chat" ? BenchBackend::kOpenAIChat
                                                     : BenchBackend::kOpenAICompletions;
  std::string prefix;
  if (!base_url.empty()) {
    if (absl::Status status = ParseBaseUrl(base_url, load, prefix); !status.ok()) return status;
  }
  const std::string default_endpoint =
      load.backend == BenchBackend::kOpenAIChat ? "/v1/chat/completions" : "/v1/completions";
  load.path = prefix + (endpoint.empty() ? default_endpoint : endpoint);
  if (!absl::SimpleAtod(request_rate, &load.request_rate) || !(load.request_rate > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-rate: expected a positive number or inf, got ", request_rate));
  }
  if (!(load.burstiness > 0)) return absl::InvalidArgumentError("--burstiness must be > 0");
  if (max_concurrency.has_value() && *max_concurrency < 1) {
    return absl::InvalidArgumentError("--max-concurrency must be >= 1");
  }
  load.max_concurrency = max_concurrency;
  load.seed = flags.random.seed;
  if (flags.random.num_prompts < 1) return absl::InvalidArgumentError("--num-prompts must be >= 1");
  if (flags.dataset_name == "custom") flags.dataset_name = "prompts";
  if (flags.dataset_name == "prompts" && flags.dataset_path.empty()) {
    return absl::InvalidArgumentError("--dataset-name prompts needs --dataset-path");
  }
  if (!(flags.structured_output_ratio >= 0.0 && flags.structured_output_ratio <= 1.0)) {
    return absl::InvalidArgumentError("--structured-output-ratio must be in [0, 1]");
  }
  if (flags.dataset_name == "random" && load.backend == BenchBackend::kOpenAIChat) {
    return absl::InvalidArgumentError(
        "the random dataset sends token ids, which chat messages cannot carry: use --backend "
        "openai, or --dataset-name prompts with --backend openai-chat");
  }
  auto names = ParseMetricNames(metrics);
  if (!names.ok()) return names.status();
  flags.percentile_metrics = *std::move(names);
  auto values = ParsePercentiles(percentiles);
  if (!values.ok()) return values.status();
  flags.metric_percentiles = *std::move(values);
  return absl::OkStatus();
}

std::string NowDate() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y%m%d-%H%M%S", &local);
  return buffer;
}

absl::StatusOr<std::vector<SampleRequest>> BuildDataset(const BenchServeFlags& flags) {
  absl::StatusOr<std::vector<SampleRequest>> requests =
      flags.dataset_name == "prompts"
          ? LoadPromptsFile(flags.dataset_path, flags.random.num_prompts, flags.custom_output_len)
          : SampleRandomRequests(flags.random);
  if (!requests.ok() || flags.json_schema_path.empty()) return requests;
  absl::StatusOr<JsonSchemaList> schemas = LoadJsonSchemas(flags.json_schema_path);
  if (!schemas.ok()) return schemas.status();
  if (absl::Status status =
          AssignJsonSchemas(*schemas, flags.structured_output_ratio, flags.random.seed, *requests);
      !status.ok()) {
    return status;
  }
  return requests;
}

// The structured-output counts when some request carried a schema.
std::optional<StructuredOutputSummary> StructuredOutputs(
    const std::vector<SampleRequest>& requests, const std::vector<RequestOutput>& outputs) {
  std::vector<bool> constrained(requests.size());
  bool any = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    constrained[i] = requests[i].json_schema != nullptr;
    any = any || constrained[i];
  }
  if (!any) return std::nullopt;
  return SummarizeStructuredOutputs(outputs, constrained);
}

absl::Status SaveResult(const BenchServeFlags& flags, const BenchmarkRunInfo& info,
                        const nlohmann::json& result) {
  std::filesystem::path path =
      flags.result_filename.empty() ? DefaultResultFilename(info) : flags.result_filename;
  if (!flags.result_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(flags.result_dir, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create --result-dir ", flags.result_dir, ": ", ec.message()));
    }
    path = std::filesystem::path(flags.result_dir) / path;
  }
  std::ofstream out(path);
  out << result.dump() << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  std::printf("Result saved to %s\n", path.string().c_str());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BenchServeFlags> ParseBenchServeFlags(const std::vector<std::string>& args) {
  BenchServeFlags flags;
  LoadOptions& load = flags.load;
  std::string base_url, endpoint, request_rate = "inf", metrics = "ttft,tpot,itl",
                                  percentiles = "99";
  std::optional<int> max_concurrency;
  CLI::App app("Serving benchmark against an OpenAI-compatible server (vLLM's `bench serve`)",
               "vllm-launch bench serve");
  app.add_option("--backend", flags.backend_name, "openai (/v1/completions) or openai-chat")
      ->check(CLI::IsMember({"openai", "openai-chat"}));
  app.add_option("--base-url", base_url, "http://host:port[/prefix]; overrides --host/--port");
  app.add_option("--host", load.host, "Server host")->capture_default_str();
  app.add_option("--port", load.port, "Server port")->capture_default_str();
  app.add_option("--endpoint", endpoint,
                 "Request path (default /v1/completions, or /v1/chat/completions for chat)");
  app.add_option("--model", load.settings.model, "Model name (default: first of /v1/models)");
  app.add_option("--dataset-name", flags.dataset_name, "random or prompts")
      ->check(CLI::IsMember({"random", "prompts", "custom"}))
      ->capture_default_str();
  app.add_option("--dataset-path", flags.dataset_path,
                 "Prompts file: JSON lines {\"prompt\": ..., \"output_len\": N} or text lines");
  app.add_option("--custom-output-len", flags.custom_output_len,
                 "max_tokens for prompts-file lines without output_len")
      ->capture_default_str();
  app.add_option("--num-prompts", flags.random.num_prompts, "Number of requests")
      ->capture_default_str();
  app.add_option("--random-input-len", flags.random.input_len)->capture_default_str();
  app.add_option("--random-output-len", flags.random.output_len)->capture_default_str();
  app.add_option("--random-range-ratio", flags.random.range_ratio,
                 "Lengths uniform in [len*(1-r), len*(1+r)]")
      ->capture_default_str();
  app.add_option("--random-vocab-min", flags.random.vocab_min, "Smallest random token id")
      ->capture_default_str();
  app.add_option("--random-vocab-max", flags.random.vocab_max, "Random token ids are below this")
      ->capture_default_str();
  CLI::Option* schema_path =
      app.add_option("--json-schema-path", flags.json_schema_path,
                     "Constrain requests by JSON schema (structured_outputs.json): one schema "
                     "file, a .jsonl of schemas or a directory of *.json, cycled over requests");
  app.add_option("--structured-output-ratio", flags.structured_output_ratio,
                 "Share of requests sent with a schema (which ones: --seed)")
      ->needs(schema_path)
      ->capture_default_str();
  app.add_option("--request-rate", request_rate, "Requests per second, or inf (all at once)")
      ->capture_default_str();
  app.add_option("--burstiness", load.burstiness,
                 "Gamma shape of request intervals (1 = Poisson process)")
      ->capture_default_str();
  app.add_option("--max-concurrency", max_concurrency, "At most this many requests in flight");
  app.add_option("--seed", flags.random.seed)->capture_default_str();
  app.add_flag("--ignore-eos", load.settings.ignore_eos, "Send ignore_eos: true");
  app.add_option("--temperature", load.settings.temperature)->capture_default_str();
  app.add_flag("--save-result", flags.save_result, "Write the result JSON");
  app.add_option("--result-dir", flags.result_dir, "Directory of the result JSON");
  app.add_option("--result-filename", flags.result_filename,
                 "Result file name (default: vLLM's {backend}-{rate}qps-...-{date}.json)");
  double request_timeout_s = 6 * 3600;
  app.add_option("--request-timeout", request_timeout_s,
                 "Seconds each network step may take (not a vLLM flag; vLLM allows 6 hours)")
      ->capture_default_str();
  bool disable_tqdm = false;
  app.add_flag("--disable-tqdm", disable_tqdm, "No progress bar");
  app.add_option("--percentile-metrics", metrics, "Subset of ttft,tpot,itl,e2el")
      ->capture_default_str();
  app.add_option("--metric-percentiles", percentiles, "Comma-separated percentiles")
      ->capture_default_str();
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses back to front
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    flags.help = true;
    flags.help_text = app.help();
    return flags;
  } catch (const CLI::ParseError& error) {
    return absl::InvalidArgumentError(error.what());
  }
  load.show_progress = !disable_tqdm;
  if (!(request_timeout_s > 0)) return absl::InvalidArgumentError("--request-timeout must be > 0");
  load.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(request_timeout_s * 1000));
  if (absl::Status status =
          Finalize(flags, base_url, endpoint, request_rate, max_concurrency, metrics, percentiles);
      !status.ok()) {
    return status;
  }
  return flags;
}

int RunBenchServe(const std::vector<std::string>& args) {
  absl::StatusOr<BenchServeFlags> flags = ParseBenchServeFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "vllm-launch bench serve: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::printf("%s", flags->help_text.c_str());
    return 0;
  }
  absl::StatusOr<std::vector<SampleRequest>> requests = BuildDataset(*flags);
  if (!requests.ok()) {
    std::fprintf(stderr, "vllm-launch bench serve: %s\n",
                 std::string(requests.status().message()).c_str());
    return 2;
  }
  LoadOptions& load = flags->load;
  if (load.settings.model.empty()) {
    absl::StatusOr<std::string> model = FetchFirstModelId(load.host, load.port, kModelsTimeout);
    if (!model.ok()) {
      std::fprintf(stderr, "vllm-launch bench serve: cannot find the model (give --model): %s\n",
                   std::string(model.status().message()).c_str());
      return 1;
    }
    load.settings.model = *model;
  }
  std::printf("Traffic request rate: %s\n", absl::StrCat(load.request_rate).c_str());
  // Python prints floats with a ".0" when they are whole ("1.0").
  const std::string burstiness = load.burstiness == std::floor(load.burstiness)
                                     ? absl::StrFormat("%.1f", load.burstiness)
                                     : absl::StrCat(load.burstiness);
  std::printf("Burstiness factor: %s%s\n", burstiness.c_str(),
              load.burstiness == 1.0 ? " (Poisson process)" : "");
  std::printf("Maximum request concurrency: %s\n",
              load.max_concurrency ? absl::StrCat(*load.max_concurrency).c_str() : "None");
  std::fflush(stdout);

  const LoadResult result = RunLoad(load, *requests);
  BenchmarkRunInfo info;
  info.date = NowDate();
  info.backend = flags->backend_name;
  info.model_id = load.settings.model;
  info.num_prompts = flags->random.num_prompts;
  info.request_rate = load.request_rate;
  info.burstiness = load.burstiness;
  info.max_concurrency = load.max_concurrency;
  // An all-failed run can take no measurable time; keep the throughputs finite.
  info.duration_s = std::max(result.duration_s, 1e-9);
  info.percentile_metrics = flags->percentile_metrics;
  BenchmarkMetrics metrics =
      CalculateMetrics(result.outputs, info.duration_s, flags->metric_percentiles);
  metrics.structured_output = StructuredOutputs(*requests, result.outputs);
  std::printf("%s", FormatResultTable(info, metrics).c_str());
  std::fflush(stdout);

  size_t shown = 0;
  for (size_t i = 0; i < result.outputs.size() && shown < kMaxErrorsShown; ++i) {
    if (result.outputs[i].success) continue;
    std::fprintf(stderr, "request %zu failed: %s\n", i, result.outputs[i].error.c_str());
    ++shown;
  }
  int exit_code = metrics.failed == 0 ? 0 : 1;
  if (flags->save_result) {
    if (absl::Status status =
            SaveResult(*flags, info, BuildResultJson(info, metrics, result.outputs));
        !status.ok()) {
      std::fprintf(stderr, "vllm-launch bench serve: %s\n", std::string(status.message()).c_str());
      exit_code = 1;
    }
  }
  std::fflush(stdout);
  return exit_code;
}

}  // namespace vllm::bench_serve
