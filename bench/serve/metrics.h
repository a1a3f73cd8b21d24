// Metrics of `vllm-launch bench serve`, computed as vLLM's calculate_metrics() does (numpy mean,
// median, population std and linearly interpolated percentiles), the result table it prints and
// the result JSON it saves. Pure functions; thread-compatible.
#ifndef VLLM_BENCH_SERVE_METRICS_H_
#define VLLM_BENCH_SERVE_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace vllm::bench_serve {

// What one request produced, as vLLM's RequestFuncOutput. Times in seconds.
struct RequestOutput {
  bool success = false;
  // Time from sending the request to the first chunk that carried a token.
  double ttft = 0.0;
  // Time from sending the request to the last chunk that carried a token.
  double latency = 0.0;
  // Gaps between consecutive token chunks.
  std::vector<double> itl;
  // usage.completion_tokens of the final chunk, or the number of token chunks without one.
  int64_t output_tokens = 0;
  // Prompt length: the dataset's, else the server's usage.prompt_tokens.
  int64_t prompt_len = 0;
  std::string generated_text;
  // The last string "finish_reason" the stream gave ("stop", "length"); empty if none.
  std::string finish_reason;
  // Empty on success; what went wrong otherwise.
  std::string error;
  // When the request was sent, in seconds from the start of the run (vLLM's start_time).
  double start_time = 0.0;
  // Time the request waited for a --max-concurrency slot after it arrived (vLLM's
  // client_queue_time).
  double client_queue_time = 0.0;
};

// Mean, median, std and the requested percentiles of one metric, in milliseconds.
struct MetricSummary {
  double mean_ms = 0.0;
  double median_ms = 0.0;
  double std_ms = 0.0;
  // (percentile, value) in the order asked for.
  std::vector<std::pair<double, double>> percentiles_ms;
};

// What the requests sent with a JSON schema produced (--json-schema-path; vLLM's
// benchmark_serving_structured_output.py reports the share as "correct_rate(%)").
struct StructuredOutputSummary {
  int64_t requests = 0;   // requests sent with a schema
  int64_t completed = 0;  // of them, successful
  // Of those, the generated text is one JSON value (surrounding whitespace allowed; vLLM's
  // script instead extracts the first {...} after removing all spaces and newlines).
  int64_t valid_json = 0;
  // Of those, finish_reason "length": cut at max_tokens, so usually not complete JSON.
  int64_t cut_at_max_tokens = 0;
};

// vLLM's BenchmarkMetrics.
struct BenchmarkMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0.0;
  double output_throughput = 0.0;
  double total_token_throughput = 0.0;
  // Output length per request, 0 for failed ones (vLLM's actual_output_lens).
  std::vector<int64_t> output_lens;
  MetricSummary ttft;
  MetricSummary tpot;
  MetricSummary itl;
  MetricSummary e2el;
  // Over successful requests (vLLM prints it only with --max-concurrency).
  MetricSummary client_queue_time;
  // Successful requests per second that met every --goodput SLO; set only with --goodput.
  std::optional<double> request_goodput;
  // The most output tokens in one one-second bucket of the run, and the most requests in
  // flight in one such bucket (vLLM's max_output_tokens_per_s, max_concurrent_requests).
  double max_output_tokens_per_s = 0.0;
  int64_t max_concurrent_requests = 0;
  // Set when some requests carried a JSON schema.
  std::optional<StructuredOutputSummary> structured_output;
};

// numpy.percentile(values, p) with linear interpolation; p in [0, 100]. Like vLLM's
// `np.percentile(x or 0, p)`, an empty input gives 0.
double Percentile(std::vector<double> values, double p);
// numpy.mean; 0 for an empty input.
double Mean(const std::vector<double>& values);
// numpy.std (population, ddof = 0); 0 for an empty input.
double StdDev(const std::vector<double>& values);

// Summarises `values` (seconds) into milliseconds.
MetricSummary Summarize(const std::vector<double>& values, const std::vector<double>& percentiles);

// --goodput service-level objectives in milliseconds, by metric ("ttft", "tpot", "e2el").
using GoodputSlos = std::vector<std::pair<std::string, double>>;

// Computes the metrics over all requests. TPOT = (latency - ttft) / (output_tokens - 1) for
// successful requests with more than one output token. `duration_s` must be positive. With
// `goodput` non-empty, request_goodput counts the successful requests whose every named metric
// is at most its SLO (TPOT 0 for one-token outputs), as vLLM's calculate_metrics().
BenchmarkMetrics CalculateMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                  const std::vector<double>& percentiles,
                                  const GoodputSlos& goodput = {});

// Counts the outputs of the requests whose `constrained[i]` is true (`outputs` and
// `constrained` in dataset order, same size).
StructuredOutputSummary SummarizeStructuredOutputs(const std::vector<RequestOutput>& outputs,
                                                   const std::vector<bool>& constrained);

// The run's configuration as it appears in the table and the JSON.
struct BenchmarkRunInfo {
  std::string date;     // %Y%m%d-%H%M%S
  std::string backend;  // "openai" or "openai-chat"
  // --label; empty: null in the JSON and the backend in the file name.
  std::string label;
  std::string model_id;
  // The tokenizer's name or path; empty: model_id.
  std::string tokenizer_id;
  // --ramp-up-strategy ("linear", "exponential") and its rates; empty: none.
  std::string ramp_up_strategy;
  int ramp_up_start_rps = 0;
  int ramp_up_end_rps = 0;
  // --metadata KEY=VALUE pairs, saved as top-level string fields.
  std::vector<std::pair<std::string, std::string>> metadata;
  int num_prompts = 0;
  double request_rate = 0.0;  // +inf for "all at once"
  double burstiness = 1.0;
  std::optional<int> max_concurrency;
  double duration_s = 0.0;
  // Metric names to print and save ("ttft", "tpot", "itl", "e2el").
  std::vector<std::string> percentile_metrics;
};

// vLLM's result table ("============ Serving Benchmark Result ============" ... "====="),
// with a "Structured Outputs" section before the last line when `metrics.structured_output`.
std::string FormatResultTable(const BenchmarkRunInfo& info, const BenchmarkMetrics& metrics);

// vLLM's result JSON (the keys `vllm bench serve --save-result` writes;
// request_rate is the string "inf" for an unlimited rate, request_goodput null without
// --goodput; the per-request lists input_lens, output_lens, start_times, ttfts, itls,
// generated_texts and errors only with `save_detailed`, as vLLM), plus with
// `metrics.structured_output`: structured_output_requests, structured_output_completed,
// valid_json_outputs, cut_at_max_tokens and "correct_rate(%)" (valid_json_outputs per request
// sent with a schema, as vLLM's structured-output script names it).
nlohmann::json BuildResultJson(const BenchmarkRunInfo& info, const BenchmarkMetrics& metrics,
                               const std::vector<RequestOutput>& outputs, bool save_detailed);

// vLLM's default result file name: "{label}-{rate}qps[-concurrency{n}]-{model}-{date}.json"
// (label defaults to the backend; with a ramp-up
// "{label}-ramp-up-{strategy}-{start}qps-{end}qps[-concurrency{n}]-{model}-{date}.json"),
// with rate printed as Python prints a float ("inf", "50.0") and model the last path part.
std::string DefaultResultFilename(const BenchmarkRunInfo& info);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_METRICS_H_
