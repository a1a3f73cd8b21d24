#include "bench/serve/bench_serve.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/serve/dataset_flags.h"
#include "bench/serve/metrics.h"
#include "bench/serve/preflight.h"
#include "frontend/tokenizer/tokenizer.h"

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
    if (name != "ttft" && name != "tpot" && name != "itl" && name != "e2el" &&
        name != "client_queue_time") {
      return absl::InvalidArgumentError(
          absl::StrCat("--percentile-metrics: unknown metric \"", name,
                       "\" (ttft, tpot, itl, e2el, client_queue_time)"));
    }
    names.push_back(name);
  }
  return names;
}

// vLLM 0.33 `vllm bench serve` flags we do not support, with the reason (refused by name,
// never ignored). Source: vllm/benchmarks/serve.py add_cli_args and
// vllm/benchmarks/datasets/datasets.py add_dataset_parser.
struct RefusedFlag {
  const char* name;
  const char* reason;
};
constexpr RefusedFlag kRefusedFlags[] = {
    {"--insecure", "http only"},
    {"--lora-modules", "no LoRA"},
    {"--lora-assignment", "no LoRA"},
    {"--plot-timeline", "no plots"},
    {"--plot-dataset-stats", "no plots"},
    {"--timeline-itl-thresholds", "no plots"},
    {"--probe-request-rate", "no probe requests"},
    {"--profile", "no profiler control"},
    {"--self-timed", "no timed_trace dataset"},
    {"--no-self-timed", "no timed_trace dataset"},
    {"--skip-tokenizer-init", "the random dataset needs the tokenizer"},
    {"--use-beam-search", "beam search is not requested"},
    {"--no-stream", "requests always stream"},
    {"--enable-multimodal-chat", "no multimodal datasets"},
    {"--custom-ensure-client-side-data", "no such check"},
    {"--no-reranker", "no rerank datasets"},
    {"--hf-name", "no Hugging Face datasets"},
    {"--hf-split", "no Hugging Face datasets"},
    {"--hf-subset", "no Hugging Face datasets"},
    {"--hf-output-len", "no Hugging Face datasets"},
    {"--random-mm-base-items-per-request", "no multimodal datasets"},
    {"--random-mm-bucket-config", "no multimodal datasets"},
    {"--random-mm-limit-mm-per-prompt", "no multimodal datasets"},
    {"--random-mm-num-mm-items-range-ratio", "no multimodal datasets"},
    {"--asr-max-audio-len-sec", "no audio datasets"},
    {"--asr-min-audio-len-sec", "no audio datasets"},
    {"--bfcl-categories", "no BFCL dataset"},
    {"--blazedit-min-distance", "no blazedit dataset"},
    {"--blazedit-max-distance", "no blazedit dataset"},
    {"--spec-bench-category", "no spec_bench dataset"},
    {"--spec-bench-output-len", "no spec_bench dataset"},
    {"--speed-bench-category", "no speed_bench dataset"},
    {"--speed-bench-dataset-subset", "no speed_bench dataset"},
    {"--speed-bench-output-len", "no speed_bench dataset"},
    {"--timed-trace-chunk-hash-size", "no timed_trace dataset"},
    {"--timed-trace-label-hash-ids", "no timed_trace dataset"},
    {"--timed-trace-label-input-length", "no timed_trace dataset"},
    {"--timed-trace-label-output-length", "no timed_trace dataset"},
    {"--timed-trace-label-timestamp", "no timed_trace dataset"},
    {"--timed-trace-sec-multiplier", "no timed_trace dataset"},
};

absl::Status RefuseUnsupported(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    const absl::string_view name = absl::string_view(arg).substr(0, arg.find('='));
    for (const RefusedFlag& refused : kRefusedFlags) {
      if (name == refused.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(refused.name, " (a vLLM bench flag) is not supported: ", refused.reason));
      }
    }
  }
  return absl::OkStatus();
}

// vLLM's parse_goodput/check_goodput_args: "KEY:VALUE" pairs, KEY in ttft/tpot/e2el, VALUE ms.
absl::StatusOr<GoodputSlos> ParseGoodput(const std::vector<std::string>& pairs) {
  GoodputSlos slos;
  for (const std::string& pair : pairs) {
    const std::vector<std::string> parts = absl::StrSplit(pair, ':');
    double value = 0;
    if (parts.size() != 2 || !absl::SimpleAtod(parts[1], &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--goodput: expected \"KEY:VALUE\" pairs (a metric name and milliseconds), got \"", pair,
          "\""));
    }
    if (parts[0] != "ttft" && parts[0] != "tpot" && parts[0] != "e2el") {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: invalid metric name ", parts[0], " (ttft, tpot, e2el)"));
    }
    if (value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--goodput: negative value for ", parts[0]));
    }
    slos.emplace_back(parts[0], value);
  }
  return slos;
}

// Raw values CLI11 collects before they are checked together.
struct RawFlags {
  std::string base_url, endpoint, request_rate = "inf", metrics = "ttft,tpot,itl",
                                  percentiles = "99", tokenizer_mode = "auto", extra_body;
  std::optional<int> max_concurrency, top_k, logprobs;
  std::optional<double> top_p, min_p, frequency_penalty, presence_penalty, repetition_penalty;
  std::string ramp_up_strategy;
  std::optional<int> ramp_up_start_rps, ramp_up_end_rps;
  std::vector<std::string> goodput, metadata;
  double request_timeout_s = 6 * 3600;
  bool disable_tqdm = false;
  bool trust_remote_code = false;
  std::vector<std::string> headers;
  std::optional<std::string> request_id_prefix;
  DatasetRawFlags dataset;
};

// The sampling flags and --extra-body, merged into the request body as vLLM does.
absl::Status SamplingBody(const RawFlags& raw, bool body_is_chat, nlohmann::json& body) {
  if (!raw.extra_body.empty()) {
    nlohmann::json extra = nlohmann::json::parse(raw.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      return absl::InvalidArgumentError("--extra-body: expected a JSON object");
    }
    body = std::move(extra);
  }
  // vLLM: {**sampling_params, **extra_body}: --extra-body wins.
  const auto set = [&](const char* key, const auto& value) {
    if (value.has_value() && !body.contains(key)) body[key] = *value;
  };
  // vLLM's completions payload carries "logprobs"; its chat payload has no such field.
  if (raw.logprobs.has_value() && body_is_chat) {
    return absl::InvalidArgumentError(
        "--logprobs applies to --backend openai only (vLLM's chat requests do not send it)");
  }
  set("logprobs", raw.logprobs);
  set("top_p", raw.top_p);
  set("top_k", raw.top_k);
  set("min_p", raw.min_p);
  set("frequency_penalty", raw.frequency_penalty);
  set("presence_penalty", raw.presence_penalty);
  set("repetition_penalty", raw.repetition_penalty);
  return absl::OkStatus();
}

absl::Status FinalizeRamp(const RawFlags& raw, LoadOptions& load) {
  if (raw.ramp_up_strategy.empty()) {
    if (raw.ramp_up_start_rps || raw.ramp_up_end_rps) {
      return absl::InvalidArgumentError(
          "--ramp-up-start-rps and --ramp-up-end-rps need --ramp-up-strategy");
    }
    return absl::OkStatus();
  }
  if (!raw.ramp_up_start_rps || !raw.ramp_up_end_rps) {
    return absl::InvalidArgumentError(
        "--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps");
  }
  if (*raw.ramp_up_start_rps > *raw.ramp_up_end_rps) {
    return absl::InvalidArgumentError("--ramp-up-start-rps must be <= --ramp-up-end-rps");
  }
  if (*raw.ramp_up_start_rps < (raw.ramp_up_strategy == "exponential" ? 1 : 0) ||
      *raw.ramp_up_end_rps < 1) {
    return absl::InvalidArgumentError(
        "--ramp-up-start-rps must be > 0 for the exponential strategy, --ramp-up-end-rps > 0");
  }
  load.ramp_up = {raw.ramp_up_strategy, *raw.ramp_up_start_rps, *raw.ramp_up_end_rps};
  return absl::OkStatus();
}

// vLLM's --header KEY=VALUE pairs (split at the first '=', both sides stripped) and
// --request-id-prefix (default "bench-" and 8 random hex digits and "-", as vLLM's uuid4 prefix).
absl::Status FinalizeRequestFlags(const RawFlags& raw, LoadOptions& load) {
  for (const std::string& item : raw.headers) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError("--header: invalid header format, use KEY=VALUE");
    }
    std::string name(absl::StripAsciiWhitespace(item.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(item.substr(eq + 1)));
    const bool bad_name =
        name.empty() || name.find_first_of(" \t\r\n:()<>@,;\\\"/[]?={}") != std::string::npos;
    if (bad_name || value.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--header: invalid header ", item));
    }
    load.headers.emplace_back(std::move(name), std::move(value));
  }
  if (raw.request_id_prefix.has_value()) {
    load.request_id_prefix = *raw.request_id_prefix;
  } else {
    std::random_device device;
    load.request_id_prefix = absl::StrFormat("bench-%08x-", static_cast<uint32_t>(device()));
  }
  return absl::OkStatus();
}

// Fills `flags` from the raw values CLI11 collected and checks them together.
absl::Status Finalize(BenchServeFlags& flags, const RawFlags& raw) {
  LoadOptions& load = flags.load;
  load.backend = flags.backend_name == "openai-chat" ? BenchBackend::kOpenAIChat
                                                     : BenchBackend::kOpenAICompletions;
  std::string prefix;
  if (!raw.base_url.empty()) {
    if (absl::Status status = ParseBaseUrl(raw.base_url, load, prefix); !status.ok()) return status;
  }
  const std::string default_endpoint =
      load.backend == BenchBackend::kOpenAIChat ? "/v1/chat/completions" : "/v1/completions";
  load.path = prefix + (raw.endpoint.empty() ? default_endpoint : raw.endpoint);
  if (!absl::SimpleAtod(raw.request_rate, &load.request_rate) || !(load.request_rate > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-rate: expected a positive number or inf, got ", raw.request_rate));
  }
  if (!(load.burstiness > 0)) return absl::InvalidArgumentError("--burstiness must be > 0");
  if (raw.max_concurrency.has_value() && *raw.max_concurrency < 1) {
    return absl::InvalidArgumentError("--max-concurrency must be >= 1");
  }
  load.max_concurrency = raw.max_concurrency;
  if (absl::Status status = FinalizeRamp(raw, load); !status.ok()) return status;
  if (absl::Status status = FinalizeDatasetFlags(flags, raw.dataset); !status.ok()) {
    return status;
  }
  if (absl::Status status = FinalizeRequestFlags(raw, load); !status.ok()) return status;
  if (absl::Status status =
          SamplingBody(raw, load.backend == BenchBackend::kOpenAIChat, load.settings.extra_body);
      !status.ok()) {
    return status;
  }
  for (const std::string& item : raw.metadata) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError("--metadata: use KEY=VALUE");
    }
    flags.metadata.emplace_back(absl::StripAsciiWhitespace(item.substr(0, eq)),
                                absl::StripAsciiWhitespace(item.substr(eq + 1)));
  }
  auto goodput = ParseGoodput(raw.goodput);
  if (!goodput.ok()) return goodput.status();
  flags.goodput = *std::move(goodput);
  auto names = ParseMetricNames(raw.metrics);
  if (!names.ok()) return names.status();
  flags.percentile_metrics = *std::move(names);
  auto values = ParsePercentiles(raw.percentiles);
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
  std::error_code size_ec;
  const bool append_newline = flags.append_result && std::filesystem::exists(path, size_ec) &&
                              std::filesystem::file_size(path, size_ec) > 0 && !size_ec;
  std::ofstream out(path, flags.append_result ? std::ios::app : std::ios::trunc);
  if (append_newline) out << "\n";
  out << result.dump();
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  std::printf("Result saved to %s\n", path.string().c_str());
  return absl::OkStatus();
}

void AddTargetOptions(CLI::App& app, BenchServeFlags& flags, RawFlags& raw) {
  LoadOptions& load = flags.load;
  app.add_option("--backend", flags.backend_name, "openai (/v1/completions) or openai-chat")
      ->check(CLI::IsMember({"openai", "openai-chat"}));
  app.add_option("--base-url", raw.base_url, "http://host:port[/prefix]; overrides --host/--port");
  app.add_option("--host", load.host, "Server host")->capture_default_str();
  app.add_option("--port", load.port, "Server port")->capture_default_str();
  app.add_option("--endpoint", raw.endpoint,
                 "Request path (default /v1/completions, or /v1/chat/completions for chat)");
  app.add_option("--model", load.settings.model, "Model name (default: first of /v1/models)");
  app.add_option("--served-model-name", flags.served_model_name,
                 "Model name sent in requests (default: --model)");
  app.add_option("--tokenizer", flags.tokenizer,
                 "Directory with tokenizer.json (default: --model when it is one)");
  app.add_option("--tokenizer-mode", raw.tokenizer_mode, "auto (tokenizer.json)")
      ->check(CLI::IsMember({"auto", "hf"}));
  app.add_flag("--trust-remote-code", raw.trust_remote_code,
               "Accepted: tokenizer.json is read without running model code");
  app.add_option("--request-rate", raw.request_rate, "Requests per second, or inf (all at once)")
      ->capture_default_str();
  app.add_option("--burstiness", load.burstiness,
                 "Gamma shape of request intervals (1 = Poisson process)")
      ->capture_default_str();
  app.add_option("--max-concurrency", raw.max_concurrency, "At most this many requests in flight");
  app.add_option("--ramp-up-strategy", raw.ramp_up_strategy, "linear or exponential")
      ->check(CLI::IsMember({"linear", "exponential"}));
  app.add_option("--ramp-up-start-rps", raw.ramp_up_start_rps, "Ramp-up start rate");
  app.add_option("--ramp-up-end-rps", raw.ramp_up_end_rps, "Ramp-up end rate");
  app.add_flag("--ignore-eos", load.settings.ignore_eos,
               "Send ignore_eos: true (always on with the random dataset, as vLLM)");
  app.add_option("--temperature", load.settings.temperature, "Sent only when given");
  app.add_option("--logprobs", raw.logprobs, "Logprobs per token (openai backend)");
  app.add_option("--top-p", raw.top_p);
  app.add_option("--top-k", raw.top_k);
  app.add_option("--min-p", raw.min_p);
  app.add_option("--frequency-penalty", raw.frequency_penalty);
  app.add_option("--presence-penalty", raw.presence_penalty);
  app.add_option("--repetition-penalty", raw.repetition_penalty);
  app.add_option("--extra-body", raw.extra_body, "JSON object merged into every request body");
  app.add_option("--header", raw.headers, "KEY=VALUE headers sent with every request");
  app.add_option("--request-id-prefix", raw.request_id_prefix,
                 "x-request-id of request i: PREFIX + i (default bench-<8 random hex>-)");
  app.add_option("--num-warmups", flags.num_warmups, "Copies of the first request sent first")
      ->capture_default_str();
  app.add_option("--ready-check-timeout-sec", flags.ready_check_timeout_s,
                 "Retry the first request until it succeeds, at most this long (0: no check)")
      ->capture_default_str();
  app.add_option("--request-timeout", raw.request_timeout_s,
                 "Seconds each network step may take (not a vLLM flag; vLLM allows 6 hours)")
      ->capture_default_str();
}

void AddOutputOptions(CLI::App& app, BenchServeFlags& flags, RawFlags& raw) {
  app.add_flag("--save-result", flags.save_result, "Write the result JSON");
  app.add_flag("--save-detailed", flags.save_detailed, "Also save the per-request lists");
  app.add_flag("--append-result", flags.append_result, "Append to the result file");
  app.add_option("--result-dir", flags.result_dir, "Directory of the result JSON");
  app.add_option("--result-filename", flags.result_filename,
                 "Result file name (default: vLLM's {label}-{rate}qps-...-{date}.json)");
  app.add_option("--label", flags.label, "Replaces the backend in the result file name");
  app.add_option("--metadata", raw.metadata, "KEY=VALUE pairs saved in the result JSON");
  app.add_option("--goodput", raw.goodput, "SLOs as KEY:VALUE (ttft, tpot, e2el; ms)");
  app.add_flag("--disable-tqdm", raw.disable_tqdm, "No progress bar");
  app.add_option("--percentile-metrics", raw.metrics,
                 "Subset of ttft,tpot,itl,e2el,client_queue_time")
      ->capture_default_str();
  app.add_option("--metric-percentiles", raw.percentiles, "Comma-separated percentiles")
      ->capture_default_str();
}

// The tokenizer of the run: --tokenizer, else the model when it names a local directory with a
// tokenizer.json (vLLM defaults the tokenizer to the model) and no --random-vocab-min/max was
// given. Null when there is none.
absl::StatusOr<std::unique_ptr<frontend::Tokenizer>> LoadBenchTokenizer(
    const BenchServeFlags& flags, std::string& tokenizer_id) {
  std::error_code ec;
  if (!flags.tokenizer.empty()) {
    tokenizer_id = flags.tokenizer;
    return frontend::Tokenizer::Load(flags.tokenizer);
  }
  const std::string& model = flags.load.settings.model;
  // An explicit id range asks for id prompts: the model's tokenizer is not used then.
  if (flags.vocab_range_given) return std::unique_ptr<frontend::Tokenizer>();
  if (std::filesystem::exists(std::filesystem::path(model) / "tokenizer.json", ec)) {
    tokenizer_id = model;
    return frontend::Tokenizer::Load(model);
  }
  return std::unique_ptr<frontend::Tokenizer>();
}

}  // namespace

absl::StatusOr<BenchServeFlags> ParseBenchServeFlags(const std::vector<std::string>& args) {
  if (absl::Status status = RefuseUnsupported(args); !status.ok()) return status;
  BenchServeFlags flags;
  RawFlags raw;
  CLI::App app("Serving benchmark against an OpenAI-compatible server (vLLM's `bench serve`)",
               "vllm-launch bench serve");
  AddTargetOptions(app, flags, raw);
  AddDatasetOptions(app, flags, raw.dataset);
  AddOutputOptions(app, flags, raw);
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
  flags.load.show_progress = !raw.disable_tqdm;
  flags.vocab_range_given =
      app.count("--random-vocab-min") > 0 || app.count("--random-vocab-max") > 0;
  if (!(raw.request_timeout_s > 0)) {
    return absl::InvalidArgumentError("--request-timeout must be > 0");
  }
  flags.load.request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(raw.request_timeout_s * 1000));
  if (absl::Status status = Finalize(flags, raw); !status.ok()) return status;
  return flags;
}

namespace {

// Prints `status` as a bench serve error and returns `code`.
int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "vllm-launch bench serve: %s\n", std::string(status.message()).c_str());
  return code;
}

// Reads the files (schemas, custom prompts), discovers the model when not given, loads the
// tokenizer and draws the random dataset. Returns the exit code to stop with, or nullopt to go
// on. Files are read before the server is asked, so a bad path exits 2 without a server.
std::optional<int> Prepare(BenchServeFlags& flags, std::unique_ptr<frontend::Tokenizer>& tokenizer,
                           std::string& tokenizer_id, std::vector<SampleRequest>& requests) {
  LoadOptions& load = flags.load;
  JsonSchemaList schemas;
  if (!flags.json_schema_path.empty()) {
    absl::StatusOr<JsonSchemaList> loaded = LoadJsonSchemas(flags.json_schema_path);
    if (!loaded.ok()) return Fail(loaded.status(), 2);
    schemas = *std::move(loaded);
  }
  if (flags.dataset_name == "prompts") {
    auto prompts =
        LoadPromptsFile(flags.dataset_path, flags.random.num_prompts, flags.custom_output_len);
    if (!prompts.ok()) return Fail(prompts.status(), 2);
    requests = *std::move(prompts);
  }
  if (load.settings.model.empty()) {
    absl::StatusOr<std::string> model = FetchFirstModelId(load.host, load.port, kModelsTimeout);
    if (!model.ok()) {
      return Fail(absl::UnavailableError(absl::StrCat("cannot find the model (give --model): ",
                                                      model.status().message())),
                  1);
    }
    load.settings.model = *model;
  }
  auto loaded = LoadBenchTokenizer(flags, tokenizer_id);
  if (!loaded.ok()) {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("--tokenizer ", tokenizer_id, ": ", loaded.status().message())),
                2);
  }
  tokenizer = *std::move(loaded);
  if (flags.dataset_name != "prompts") {
    auto built = BuildDataset(flags, tokenizer.get());
    if (!built.ok()) return Fail(built.status(), 2);
    requests = *std::move(built);
  }
  // vLLM's prefix_repetition requests carry no request id.
  if (flags.dataset_name == "prefix_repetition") load.request_id_prefix.reset();
  if (!schemas.empty()) {
    if (absl::Status status =
            AssignJsonSchemas(schemas, flags.structured_output_ratio, flags.random.seed, requests);
        !status.ok()) {
      return Fail(status, 2);
    }
  }
  return std::nullopt;
}

// vLLM's initial test run (sent only with --ready-check-timeout-sec) and warm-ups, after its
// temperature warning. Returns the exit code to stop with (the endpoint never answered), or
// nullopt to go on.
std::optional<int> RunPreflight(const BenchServeFlags& flags,
                                const std::vector<SampleRequest>& requests) {
  const LoadOptions& load = flags.load;
  if (!load.settings.temperature.has_value()) {
    std::printf(
        "WARNING: vllm bench serve no longer sets temperature==0 (greedy) in requests by "
        "default. The default will be determined on the server side and can be model/API "
        "specific. For the old behavior, include --temperature=0.\n");
  }
  std::printf("Starting initial single prompt test run...\n");
  if (flags.ready_check_timeout_s > 0 && !requests.empty()) {
    std::printf("Waiting for endpoint to become up in %d seconds\n", flags.ready_check_timeout_s);
    std::fflush(stdout);
    const RequestOutput output =
        WaitForEndpoint(load, requests.front(), flags.ready_check_timeout_s);
    if (!output.success) {
      return Fail(absl::UnavailableError(absl::StrCat(
                      "Initial test run failed - Please make sure benchmark arguments are "
                      "correctly specified. Error: ",
                      output.error)),
                  1);
    }
    std::printf("Initial test run completed.\n");
  } else {
    std::printf("Skipping endpoint ready check.\n");
  }
  if (flags.num_warmups > 0 && !requests.empty()) {
    std::printf("Warming up with %d requests...\n", flags.num_warmups);
    std::fflush(stdout);
    RunWarmups(load, requests.front(), flags.num_warmups);
    std::printf("Warmup run completed.\n");
  }
  std::printf("Starting main benchmark run...\n");
  return std::nullopt;
}

void PrintTraffic(const LoadOptions& load) {
  if (!load.ramp_up.strategy.empty()) {
    std::printf("Traffic ramp-up strategy: %s.\n", load.ramp_up.strategy.c_str());
    std::printf("Will increase RPS from %d to %d RPS over the duration of the benchmark.\n",
                load.ramp_up.start_rps, load.ramp_up.end_rps);
  } else {
    std::printf("Traffic request rate: %s\n", absl::StrCat(load.request_rate).c_str());
  }
  // Python prints floats with a ".0" when they are whole ("1.0").
  const std::string burstiness = load.burstiness == std::floor(load.burstiness)
                                     ? absl::StrFormat("%.1f", load.burstiness)
                                     : absl::StrCat(load.burstiness);
  std::printf("Burstiness factor: %s%s\n", burstiness.c_str(),
              load.burstiness == 1.0 ? " (Poisson process)" : "");
  std::printf("Maximum request concurrency: %s\n",
              load.max_concurrency ? absl::StrCat(*load.max_concurrency).c_str() : "None");
  std::fflush(stdout);
}

}  // namespace

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
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  std::string tokenizer_id;
  std::vector<SampleRequest> requests;
  if (std::optional<int> code = Prepare(*flags, tokenizer, tokenizer_id, requests)) return *code;
  LoadOptions& load = flags->load;
  const std::string model_id = load.settings.model;
  if (!flags->served_model_name.empty()) load.settings.model = flags->served_model_name;
  if (std::optional<int> code = RunPreflight(*flags, requests)) return *code;
  PrintTraffic(load);

  const LoadResult result = RunLoad(load, requests);
  BenchmarkRunInfo info;
  info.date = NowDate();
  info.backend = flags->backend_name;
  info.label = flags->label;
  info.model_id = model_id;
  info.tokenizer_id = tokenizer_id;
  info.num_prompts = flags->random.num_prompts;
  info.request_rate = load.request_rate;
  info.burstiness = load.burstiness;
  info.max_concurrency = load.max_concurrency;
  info.ramp_up_strategy = load.ramp_up.strategy;
  info.ramp_up_start_rps = load.ramp_up.start_rps;
  info.ramp_up_end_rps = load.ramp_up.end_rps;
  info.metadata = flags->metadata;
  // An all-failed run can take no measurable time; keep the throughputs finite.
  info.duration_s = std::max(result.duration_s, 1e-9);
  info.percentile_metrics = flags->percentile_metrics;
  BenchmarkMetrics metrics =
      CalculateMetrics(result.outputs, info.duration_s, flags->metric_percentiles, flags->goodput);
  metrics.structured_output = StructuredOutputs(requests, result.outputs);
  std::printf("%s", FormatResultTable(info, metrics).c_str());
  std::fflush(stdout);

  size_t shown = 0;
  for (size_t i = 0; i < result.outputs.size() && shown < kMaxErrorsShown; ++i) {
    if (result.outputs[i].success) continue;
    std::fprintf(stderr, "request %zu failed: %s\n", i, result.outputs[i].error.c_str());
    ++shown;
  }
  int exit_code = metrics.failed == 0 ? 0 : 1;
  if (flags->save_result || flags->append_result) {
    if (absl::Status status = SaveResult(
            *flags, info, BuildResultJson(info, metrics, result.outputs, flags->save_detailed));
        !status.ok()) {
      std::fprintf(stderr, "vllm-launch bench serve: %s\n", std::string(status.message()).c_str());
      exit_code = 1;
    }
  }
  std::fflush(stdout);
  return exit_code;
}

}  // namespace vllm::bench_serve
