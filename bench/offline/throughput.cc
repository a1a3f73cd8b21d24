#include "bench/offline/throughput.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/offline/offline_common.h"
#include "bench/serve/dataset.h"
#include "bench/serve/dataset_files.h"
#include "frontend/engine/llm_engine.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::bench_offline {
namespace {

constexpr std::string_view kCommand = "bench throughput";

struct ThroughputFlags {
  std::string backend = "vllm";
  std::string dataset_name = "sharegpt";
  std::string dataset_path;
  // Lengths as given: --random-* win over --input-len / --output-len / --prefix-len (vLLM's
  // "The random version will be preferred"); 1024 / 128 / 0 when neither is given.
  std::optional<int32_t> input_len, output_len, prefix_len;
  std::optional<int32_t> random_input_len, random_output_len, random_prefix_len;
  std::string random_range_ratio = "0.0";
  // --dataset-name prefix_repetition: all four are needed (vLLM passes None for a missing one).
  std::optional<int32_t> prefix_repetition_prefix_len, prefix_repetition_suffix_len,
      prefix_repetition_num_prefixes, prefix_repetition_output_len;
  bool no_oversample = false;
  int32_t n = 1;
  int32_t num_prompts = 1000;
  int32_t num_warmups = 0;
  std::string output_json;
  bool disable_detokenize = false;
  bool prequeue_requests = false;
  EngineFlags engine;
};

// vLLM's flags of `bench throughput` that vllm-launch does not implement.
const std::vector<RefusedFlag>& RefusedThroughputFlags() {
  constexpr std::string_view kFiles =
      "only the random, sharegpt and prefix_repetition datasets are supported";
  constexpr std::string_view kHf = "only the vllm backend (the offline engine) is supported";
  constexpr std::string_view kMm = "multimodal and reranking datasets are not supported";
  static const auto* const kRefused = new std::vector<RefusedFlag>{
      {"--async-engine",
       "the benchmark runs the offline engine in this process; for the async engine behind a "
       "server use `vllm-launch bench serve`"},
      {"--hf-max-batch-size", kHf},
      {"--hf-enable-torch-compile", kHf},
      {"--lora-path", "LoRA adapters are not supported"},
      {"--lora-assignment", "LoRA adapters are not supported"},
      {"--profile", "no profiler is built in (time the run with perf or nsys instead)"},
      {"--custom-output-len", "the custom dataset is not one of bench throughput's"},
      {"--hf-subset", kFiles},
      {"--hf-split", kFiles},
      {"--hf-name", kFiles},
      {"--enable-multimodal-chat", kMm},
      {"--random-batch-size", kMm},
      {"--no-reranker", kMm},
      {"--random-mm-base-items-per-request", kMm},
      {"--random-mm-num-mm-items-range-ratio", kMm},
      {"--random-mm-limit-mm-per-prompt", kMm},
      {"--random-mm-bucket-config", kMm},
      {"--asr-min-audio-len-sec", "audio datasets are not supported"},
      {"--asr-max-audio-len-sec", "audio datasets are not supported"},
  };
  return *kRefused;
}

void AddThroughputOptions(CLI::App& app, ThroughputFlags& f) {
  app.add_option("--backend", f.backend,
                 "vllm (the offline engine; vLLM's hf, mii and "
                 "vllm-chat are refused).");
  app.add_option("--dataset-name", f.dataset_name,
                 "Name of the dataset to benchmark on (default sharegpt; without "
                 "--dataset-path, every name but prefix_repetition gives random).");
  app.add_option("--dataset-path", f.dataset_path,
                 "Path to the dataset (a ShareGPT JSON file for sharegpt).");
  app.add_flag("--no-oversample", f.no_oversample,
               "Do not oversample if the dataset has fewer samples than num-prompts.");
  app.add_option("--prefix-repetition-prefix-len", f.prefix_repetition_prefix_len,
                 "Number of prefix tokens per request (prefix_repetition).")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--prefix-repetition-suffix-len", f.prefix_repetition_suffix_len,
                 "Number of suffix tokens per request (prefix_repetition).")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--prefix-repetition-num-prefixes", f.prefix_repetition_num_prefixes,
                 "Number of prefixes to generate (prefix_repetition).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--prefix-repetition-output-len", f.prefix_repetition_output_len,
                 "Number of output tokens per request (prefix_repetition).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--input-len", f.input_len, "Input prompt length for each request.")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--output-len", f.output_len, "Output length for each request.")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--prefix-len", f.prefix_len,
                 "Number of fixed prefix tokens before the random context (default 0).")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--random-input-len", f.random_input_len,
                 "Number of input tokens per request (default 1024; wins over --input-len).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--random-output-len", f.random_output_len,
                 "Number of output tokens per request (default 128; wins over --output-len).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--random-prefix-len", f.random_prefix_len,
                 "Fixed prefix tokens (default 0; wins over --prefix-len).")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--random-range-ratio", f.random_range_ratio,
                 "Lengths drawn uniformly from [len * (1 - r), len * (1 + r)], r in [0, 1); or "
                 "{\"input\": r1, \"output\": r2}.");
  app.add_option("--n", f.n, "Number of generated sequences per prompt (default 1).")
      ->check(CLI::Range(1, 1024));
  app.add_option("--num-prompts", f.num_prompts, "Number of prompts to process (default 1000).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--num-warmups", f.num_warmups,
                 "Number of warmup prompts to process before the timed benchmark (default 0).")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--output-json", f.output_json,
                 "Path to save the throughput results in JSON format.");
  app.add_flag("--disable-detokenize", f.disable_detokenize,
               "Do not detokenize the response (i.e. do not include detokenization time in the "
               "measurement).");
  app.add_flag("--prequeue-requests", f.prequeue_requests,
               "Enqueue all requests before the scheduler runs: always so here (the engine runs "
               "in this thread and steps only once every request is added).");
}

// vLLM's datasets of bench throughput that we build: random (what every name but
// prefix_repetition gives without --dataset-path), sharegpt (with it), prefix_repetition.
absl::Status CheckDatasetFlags(const ThroughputFlags& f) {
  static constexpr std::string_view kNames[] = {
      "sharegpt",          "random",    "burstgpt",      "hf",
      "prefix_repetition", "random-mm", "random-rerank", "custom_audio"};
  if (std::find(std::begin(kNames), std::end(kNames), f.dataset_name) == std::end(kNames)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-name: invalid choice '", f.dataset_name,
                     "' (choose from sharegpt, random, burstgpt, hf, prefix_repetition, random-mm, "
                     "random-rerank, custom_audio)"));
  }
  if (f.dataset_name == "prefix_repetition") {
    if (!f.prefix_repetition_prefix_len || !f.prefix_repetition_suffix_len ||
        !f.prefix_repetition_num_prefixes || !f.prefix_repetition_output_len) {
      return absl::InvalidArgumentError(
          "--dataset-name prefix_repetition needs --prefix-repetition-prefix-len, "
          "--prefix-repetition-suffix-len, --prefix-repetition-num-prefixes and "
          "--prefix-repetition-output-len (bench throughput has no defaults for them)");
    }
    return absl::OkStatus();
  }
  if (!f.dataset_path.empty() && f.dataset_name != "sharegpt") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-name ", f.dataset_name,
                     " with --dataset-path: vLLM's dataset is not supported "
                     "by vllm-launch bench throughput (sharegpt with a path, random and "
                     "prefix_repetition are)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ThroughputFlags> ParseThroughputFlags(const std::vector<std::string>& args,
                                                     std::string& help) {
  ThroughputFlags f;
  CLI::App app(
      "Benchmark offline inference throughput (vLLM's `vllm bench throughput`, backend vllm). "
      "Every other flag is an engine flag of `vllm-launch serve` (see its --help; its server "
      "flags are refused).",
      "vllm-launch bench throughput");
  app.allow_extras();
  AddThroughputOptions(app, f);
  VLLM_RETURN_IF_ERROR(RefuseFlags(args, RefusedThroughputFlags(), kCommand));
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help = app.help();
    return f;
  } catch (const CLI::ParseError& err) {
    return absl::InvalidArgumentError(err.what());
  }
  if (f.backend != "vllm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend ", f.backend,
        ": vLLM's backend is not supported by vllm-launch: only vllm "
        "(the offline engine in this process) is; for a server use `vllm-launch bench serve`"));
  }
  VLLM_RETURN_IF_ERROR(CheckDatasetFlags(f));
  VLLM_ASSIGN_OR_RETURN(f.engine, ParseEngineFlags(app.remaining(), kCommand,
                                                   /*prefix_caching_default=*/true));
  return f;
}

// vLLM's random dataset with the lengths the flags resolve to (warnings as vLLM's).
absl::StatusOr<bench_serve::RandomDatasetOptions> DatasetOptions(const ThroughputFlags& f) {
  bench_serve::RandomDatasetOptions o;
  const auto warn_both = [](const char* legacy, const char* random) {
    std::fprintf(stderr,
                 "UserWarning: Both %s and %s are specified. The random version (%s) will be "
                 "preferred in this run.\n",
                 legacy, random, random);
  };
  if (f.input_len && f.random_input_len) warn_both("--input-len", "--random-input-len");
  if (f.output_len && f.random_output_len) warn_both("--output-len", "--random-output-len");
  if (f.prefix_len && f.random_prefix_len) warn_both("--prefix-len", "--random-prefix-len");
  o.input_len = f.random_input_len.value_or(f.input_len.value_or(1024));
  o.output_len = f.random_output_len.value_or(f.output_len.value_or(128));
  o.prefix_len = f.random_prefix_len.value_or(f.prefix_len.value_or(0));
  // vLLM's _parse_range_ratio: a number for both lengths, or {"input": r1, "output": r2}.
  if (!absl::SimpleAtod(f.random_range_ratio, &o.range_ratio)) {
    const nlohmann::json ratios = nlohmann::json::parse(f.random_range_ratio, nullptr, false);
    if (!ratios.is_object() || ratios.size() != 2 || !ratios.contains("input") ||
        !ratios.contains("output") || !ratios["input"].is_number() ||
        !ratios["output"].is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--random-range-ratio '", f.random_range_ratio,
                       "': give a number in [0, 1) or a JSON object {\"input\": r1, "
                       "\"output\": r2}"));
    }
    o.range_ratio = ratios["input"].get<double>();
    o.output_range_ratio = ratios["output"].get<double>();
  }
  o.num_prompts = f.num_prompts;
  o.seed = f.engine.config.model.seed;
  return o;
}

// `num_prompts` requests of the dataset the flags name, drawn from `seed`.
absl::StatusOr<std::vector<bench_serve::SampleRequest>> SampleRequests(
    const ThroughputFlags& f, const bench_serve::RandomDatasetOptions& random,
    const frontend::Tokenizer& tokenizer, int32_t num_prompts, uint64_t seed) {
  if (f.dataset_name == "prefix_repetition") {
    bench_serve::PrefixRepetitionOptions o;
    o.num_prompts = num_prompts;
    o.prefix_len = *f.prefix_repetition_prefix_len;
    o.suffix_len = *f.prefix_repetition_suffix_len;
    o.num_prefixes = *f.prefix_repetition_num_prefixes;
    o.output_len = *f.prefix_repetition_output_len;
    o.seed = seed;
    return bench_serve::SamplePrefixRepetitionRequests(o, tokenizer);
  }
  if (!f.dataset_path.empty()) {  // sharegpt; --output-len replaces the completions' lengths
    bench_serve::FileDatasetOptions o;
    o.path = f.dataset_path;
    o.num_prompts = num_prompts;
    o.seed = seed;
    o.no_oversample = f.no_oversample;
    std::optional<int> output_len;
    if (f.output_len) output_len = *f.output_len;
    return bench_serve::LoadShareGptDataset(o, tokenizer, output_len);
  }
  bench_serve::RandomDatasetOptions o = random;
  o.tokenizer = &tokenizer;
  o.num_prompts = num_prompts;
  o.seed = seed;
  return bench_serve::SampleRandomRequests(o);
}

// The dataset's prompts as the engine's frontend tokenizes text (special tokens added).
absl::StatusOr<std::vector<OfflinePrompt>> SamplePrompts(
    const ThroughputFlags& f, const bench_serve::RandomDatasetOptions& random,
    const frontend::Tokenizer& tokenizer, int32_t num_prompts, uint64_t seed,
    int32_t max_model_len) {
  VLLM_ASSIGN_OR_RETURN(std::vector<bench_serve::SampleRequest> requests,
                        SampleRequests(f, random, tokenizer, num_prompts, seed));
  std::vector<OfflinePrompt> prompts;
  for (const bench_serve::SampleRequest& r : requests) {
    OfflinePrompt p;
    if (r.prompt.empty() && !r.prompt_token_ids.empty()) {
      p.token_ids = r.prompt_token_ids;
    } else {
      VLLM_ASSIGN_OR_RETURN(p.token_ids, tokenizer.Encode(r.prompt, /*add_special_tokens=*/true));
    }
    p.max_tokens = r.expected_output_len;
    if (static_cast<int64_t>(p.token_ids.size()) + p.max_tokens > max_model_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("Please ensure that max_model_len is greater than the sum of prompt_len and "
                       "expected_output_len for all requests (",
                       max_model_len, " < ", p.token_ids.size(), " + ", p.max_tokens, ")"));
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "vllm-launch %s: %s\n", kCommand.data(),
               std::string(status.message()).c_str());
  return code;
}

int Run(const ThroughputFlags& f) {
  // vLLM: without a dataset path every dataset but prefix_repetition is the random one.
  if (f.dataset_path.empty() && f.dataset_name != "prefix_repetition") {
    std::printf("When dataset path is not set, it will default to random dataset\n");
  }
  absl::StatusOr<bench_serve::RandomDatasetOptions> dataset = DatasetOptions(f);
  if (!dataset.ok()) return Fail(dataset.status(), 2);
  auto tokenizer = frontend::Tokenizer::Load(f.engine.config.model.model);
  if (!tokenizer.ok()) return Fail(tokenizer.status(), 2);
  config::EngineArgs engine_args;
  engine_args.config = f.engine.config;
  auto engine = frontend::LLMEngine::Create(engine_args);
  if (!engine.ok()) return Fail(engine.status(), 1);
  const int32_t max_model_len = (*engine)->max_model_len();
  const uint64_t seed = f.engine.config.model.seed;
  auto requests = SamplePrompts(f, *dataset, **tokenizer, f.num_prompts, seed, max_model_len);
  if (!requests.ok()) return Fail(requests.status(), 2);
  BatchOptions options{.n = f.n,
                       .detokenize = !f.disable_detokenize,
                       .tokenizer = tokenizer->get(),
                       .request_id_prefix = "warmup"};
  if (f.num_warmups > 0) {
    // vLLM: the same dataset, --num-warmups prompts drawn with the seed plus one.
    auto warmup_requests =
        SamplePrompts(f, *dataset, **tokenizer, f.num_warmups, seed + 1, max_model_len);
    if (!warmup_requests.ok()) return Fail(warmup_requests.status(), 2);
    std::printf("Warming up with %d requests...\n", f.num_warmups);
    std::fflush(stdout);
    if (auto r = RunBatch(**engine, *warmup_requests, options); !r.ok()) {
      return Fail(r.status(), 1);
    }
  }
  options.request_id_prefix = "test";
  absl::StatusOr<BatchResult> r = RunBatch(**engine, *requests, options);
  if (!r.ok()) return Fail(r.status(), 1);
  const double num_requests = static_cast<double>(requests->size());
  const int64_t total_num_tokens = r->prompt_tokens + r->output_tokens;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              num_requests / r->elapsed_s, static_cast<double>(total_num_tokens) / r->elapsed_s,
              static_cast<double>(r->output_tokens) / r->elapsed_s);
  std::printf("Total num prompt tokens:  %lld\n", static_cast<long long>(r->prompt_tokens));
  std::printf("Total num output tokens:  %lld\n", static_cast<long long>(r->output_tokens));
  std::fflush(stdout);
  if (f.output_json.empty()) return 0;
  nlohmann::ordered_json results;
  results["model_id"] = f.engine.model_id;
  results["elapsed_time"] = r->elapsed_s;
  results["num_requests"] = requests->size();
  results["total_num_tokens"] = total_num_tokens;
  results["requests_per_second"] = num_requests / r->elapsed_s;
  results["tokens_per_second"] = static_cast<double>(total_num_tokens) / r->elapsed_s;
  if (absl::Status written = WriteJsonFile(f.output_json, results); !written.ok()) {
    return Fail(written, 1);
  }
  return 0;
}

}  // namespace

int RunBenchThroughput(const std::vector<std::string>& args) {
  // stdout carries the results; the engine's log goes to stderr.
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_default_logger(spdlog::stderr_color_mt("bench-throughput"));
  spdlog::set_level(level);
  std::string help;
  absl::StatusOr<ThroughputFlags> flags = ParseThroughputFlags(args, help);
  if (!flags.ok()) {
    std::fprintf(stderr, "vllm-launch %s: error: %s\n", kCommand.data(),
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (!help.empty()) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  return Run(*flags);
}

}  // namespace vllm::bench_offline
