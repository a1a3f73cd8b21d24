// `vllm-launch bench serve`: the serving load generator. Sends a dataset of prompts to any
// OpenAI-compatible endpoint (ours or vLLM's) with the request format, arrival process, metrics,
// printed table and result JSON of vLLM's `vllm bench serve`, so the two compare directly.
// See bench/serve/README.md for the flags.
#ifndef VLLM_BENCH_SERVE_BENCH_SERVE_H_
#define VLLM_BENCH_SERVE_BENCH_SERVE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/client.h"
#include "bench/serve/dataset.h"
#include "bench/serve/dataset_files.h"

namespace vllm::bench_serve {

// Everything the flags of `bench serve` say.
struct BenchServeFlags {
  // Where and how to send (host, port, path, backend, model, rate, burstiness, concurrency,
  // seed, temperature, ignore_eos, progress bar).
  LoadOptions load;
  // "openai" or "openai-chat", as given (for the table and the JSON).
  std::string backend_name = "openai";
  // "random", "sharegpt", "custom", "prefix_repetition" (vLLM's) or "prompts" (ours).
  std::string dataset_name = "random";
  std::string dataset_path;
  // vLLM's --custom-output-len: every custom request's max_tokens (-1: the line's
  // "output_tokens"); for `prompts` files, lines without "output_len".
  int custom_output_len = 256;
  // vLLM's --sharegpt-output-len: replaces the completions' lengths.
  std::optional<int> sharegpt_output_len;
  // vLLM's --skip-chat-template (custom: send the prompt as written), --disable-shuffle (file
  // datasets in file order, prefix_repetition in generated order) and --no-oversample (file
  // datasets: fewer requests than --num-prompts when fewer pass).
  bool skip_chat_template = false;
  // vLLM's --chat-template-kwargs: variables for the custom dataset's chat template (a JSON
  // object; null: none).
  nlohmann::ordered_json chat_template_kwargs;
  bool disable_shuffle = false;
  bool no_oversample = false;
  RandomDatasetOptions random;
  // vLLM's --prefix-repetition-* (num_prompts and seed are taken from `random`).
  PrefixRepetitionOptions prefix_repetition;
  // vLLM's --num-warmups: copies of the first request sent before the measured run.
  int num_warmups = 0;
  // vLLM's --ready-check-timeout-sec: retry the first request until it succeeds, for at most
  // this long (0: no check).
  int ready_check_timeout_s = 0;
  // --random-vocab-min or --random-vocab-max was given (refused when a tokenizer is used).
  bool vocab_range_given = false;
  // JSON schemas that constrain requests (vLLM's benchmark_serving_structured_output.py flag
  // names): one schema file, a .jsonl file of schemas or a directory of *.json files; empty:
  // every request unconstrained.
  std::string json_schema_path;
  // Share of the requests sent with a schema, chosen by --seed.
  double structured_output_ratio = 1.0;
  // --tokenizer (a local directory with tokenizer.json); empty: the model's, when --model (or
  // the served model's id) is such a directory.
  std::string tokenizer;
  // --served-model-name: the "model" sent in requests (default: --model).
  std::string served_model_name;
  // --label: replaces the backend in the result file name; saved as "label".
  std::string label;
  // --goodput SLOs in ms ("ttft", "tpot", "e2el"); empty: no goodput.
  GoodputSlos goodput;
  // --metadata KEY=VALUE pairs, saved in the result JSON.
  std::vector<std::pair<std::string, std::string>> metadata;
  bool save_result = false;
  // --append-result: append the JSON as one line to the result file instead of replacing it.
  bool append_result = false;
  // --save-detailed: also save the per-request lists.
  bool save_detailed = false;
  std::string result_dir;
  std::string result_filename;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99.0};
  // --help was given; nothing else is meaningful.
  bool help = false;
  std::string help_text;
};

// Parses the arguments after `bench serve`. Fails with InvalidArgument (message for the user)
// on an unknown flag, a vLLM flag we do not support (named, with the reason), a bad value or
// inconsistent flags.
[[nodiscard]] absl::StatusOr<BenchServeFlags> ParseBenchServeFlags(
    const std::vector<std::string>& args);

// Runs the benchmark: builds the dataset, asks /v1/models for the model when --model is not
// given, sends the requests, prints vLLM's result table on stdout (progress and errors on
// stderr) and, with --save-result, writes vLLM's result JSON. Returns the process exit code:
//   0  every request succeeded;
//   1  the run finished but some requests failed (the table and the JSON are still written,
//      failures counted in "Failed requests" and their messages in "errors"), or the model
//      could not be discovered, or the result file could not be written;
//   2  bad flags or an unreadable dataset (nothing was sent).
// (vLLM exits 0 when requests fail; we exit 1 so scripts notice.)
int RunBenchServe(const std::vector<std::string>& args);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_BENCH_SERVE_H_
