#include "bench/offline/latency.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/offline/offline_common.h"
#include "bench/serve/metrics.h"
#include "frontend/engine/llm_engine.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::bench_offline {
namespace {

constexpr std::string_view kCommand = "bench latency";

struct LatencyFlags {
  int32_t input_len = 32;
  int32_t output_len = 128;
  int32_t batch_size = 8;
  int32_t n = 1;
  int32_t num_iters_warmup = 10;
  int32_t num_iters = 30;
  std::string output_json;
  bool disable_detokenize = false;
  EngineFlags engine;
};

// vLLM's flags of `bench latency` that vllm-launch does not implement.
const std::vector<RefusedFlag>& RefusedLatencyFlags() {
  static const auto* const kRefused = new std::vector<RefusedFlag>{
      {"--use-beam-search", "beam search is not supported"},
      {"--profile", "no profiler is built in (time the run with perf or nsys instead)"},
  };
  return *kRefused;
}

// Parses the command's flags and hands the others to the engine's parser. `help` is set (and
// nothing else meaningful) for --help.
absl::StatusOr<LatencyFlags> ParseLatencyFlags(const std::vector<std::string>& args,
                                               std::string& help) {
  LatencyFlags f;
  CLI::App app(
      "Benchmark the latency of processing a single batch of requests (vLLM's `vllm bench "
      "latency`). Every other flag is an engine flag of `vllm-launch serve` (see its --help; "
      "its server flags are refused).",
      "vllm-launch bench latency");
  app.allow_extras();
  app.add_option("--input-len", f.input_len, "Prompt tokens (default 32).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--output-len", f.output_len, "Generated tokens (default 128).")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--batch-size", f.batch_size, "Prompts in the batch (default 8).")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--n", f.n, "Number of generated sequences per prompt (default 1).")
      ->check(CLI::Range(1, 1024));
  app.add_option("--num-iters-warmup", f.num_iters_warmup,
                 "Number of iterations to run for warmup (default 10).")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--num-iters", f.num_iters, "Number of iterations to run (default 30).")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--output-json", f.output_json,
                 "Path to save the latency results in JSON format.");
  app.add_flag("--disable-detokenize", f.disable_detokenize,
               "Do not detokenize responses (i.e. do not include detokenization time in the "
               "latency measurement).");
  VLLM_RETURN_IF_ERROR(RefuseFlags(args, RefusedLatencyFlags(), kCommand));
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help = app.help();
    return f;
  } catch (const CLI::ParseError& err) {
    return absl::InvalidArgumentError(err.what());
  }
  VLLM_ASSIGN_OR_RETURN(f.engine, ParseEngineFlags(app.remaining(), kCommand,
                                                   /*prefix_caching_default=*/false));
  return f;
}

// The batch of vLLM's latency benchmark: --batch-size prompts of --input-len ids drawn
// uniformly from [0, 10000) (numpy's randint(10000)), bounded by the model's vocabulary.
std::vector<OfflinePrompt> DummyPrompts(const LatencyFlags& f, int32_t vocab_size) {
  std::mt19937_64 rng(f.engine.config.model.seed);
  const uint64_t span = static_cast<uint64_t>(std::clamp(vocab_size, 1, 10000));
  std::vector<OfflinePrompt> prompts(f.batch_size);
  for (OfflinePrompt& p : prompts) {
    p.max_tokens = f.output_len;
    p.token_ids.resize(f.input_len);
    for (int32_t& id : p.token_ids) id = static_cast<int32_t>(rng() % span);
  }
  return prompts;
}

int Run(const LatencyFlags& f) {
  config::EngineArgs engine_args;
  engine_args.config = f.engine.config;
  auto engine = frontend::LLMEngine::Create(engine_args);
  if (!engine.ok()) {
    std::fprintf(stderr, "vllm-launch %s: %s\n", kCommand.data(),
                 engine.status().ToString().c_str());
    return 1;
  }
  if ((*engine)->max_model_len() < int64_t{f.input_len} + f.output_len) {
    std::fprintf(stderr,
                 "vllm-launch %s: Please ensure that max_model_len is greater than the sum of "
                 "input_len and output_len (%d < %d + %d).\n",
                 kCommand.data(), (*engine)->max_model_len(), f.input_len, f.output_len);
    return 2;
  }
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  if (!f.disable_detokenize) {
    auto loaded = frontend::Tokenizer::Load(f.engine.config.model.model);
    if (!loaded.ok()) {
      std::fprintf(stderr, "vllm-launch %s: %s (or pass --disable-detokenize)\n", kCommand.data(),
                   loaded.status().ToString().c_str());
      return 1;
    }
    tokenizer = *std::move(loaded);
  }
  const std::vector<OfflinePrompt> prompts = DummyPrompts(f, (*engine)->model_config().vocab_size);
  BatchOptions options{.n = f.n,
                       .detokenize = !f.disable_detokenize,
                       .tokenizer = tokenizer.get(),
                       .request_id_prefix = {}};
  int iteration = 0;
  const auto run_once = [&]() -> absl::StatusOr<double> {
    options.request_id_prefix = absl::StrCat("iter-", iteration++, "-");
    VLLM_ASSIGN_OR_RETURN(BatchResult r, RunBatch(**engine, prompts, options));
    return r.elapsed_s;
  };
  std::printf("Warming up...\n");
  std::fflush(stdout);
  std::vector<double> latencies;
  for (int32_t i = 0; i < f.num_iters_warmup + f.num_iters; ++i) {
    const bool warmup = i < f.num_iters_warmup;
    absl::StatusOr<double> latency = run_once();
    if (!latency.ok()) {
      std::fprintf(stderr, "vllm-launch %s: %s\n", kCommand.data(),
                   latency.status().ToString().c_str());
      return 1;
    }
    if (!warmup) latencies.push_back(*latency);
    PrintProgress(warmup ? "Warmup iterations" : "Bench iterations",
                  warmup ? i + 1 : i + 1 - f.num_iters_warmup,
                  warmup ? f.num_iters_warmup : f.num_iters);
  }
  const double avg = bench_serve::Mean(latencies);
  std::printf("Avg latency: %s seconds\n", PyFloat(avg).c_str());
  nlohmann::ordered_json percentiles = nlohmann::ordered_json::object();
  for (int p : {10, 25, 50, 75, 90, 99}) {
    const double value = bench_serve::Percentile(latencies, p);
    std::printf("%d%% percentile latency: %s seconds\n", p, PyFloat(value).c_str());
    percentiles[std::to_string(p)] = value;
  }
  std::fflush(stdout);
  if (f.output_json.empty()) return 0;
  nlohmann::ordered_json results;
  results["model_id"] = f.engine.model_id;
  results["avg_latency"] = avg;
  results["latencies"] = latencies;
  results["percentiles"] = percentiles;
  if (absl::Status written = WriteJsonFile(f.output_json, results); !written.ok()) {
    std::fprintf(stderr, "vllm-launch %s: %s\n", kCommand.data(),
                 std::string(written.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int RunBenchLatency(const std::vector<std::string>& args) {
  // stdout carries the results; the engine's log goes to stderr.
  const spdlog::level::level_enum level = spdlog::get_level();
  spdlog::set_default_logger(spdlog::stderr_color_mt("bench-latency"));
  spdlog::set_level(level);
  std::string help;
  absl::StatusOr<LatencyFlags> flags = ParseLatencyFlags(args, help);
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
