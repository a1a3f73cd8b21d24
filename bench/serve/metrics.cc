#include "bench/serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace vllm::bench_serve {
namespace {

// Python's "{s:{c}^{n}}".format(...): `text` centred in `width`, the odd fill char on the right.
std::string Center(const std::string& text, char fill, size_t width) {
  if (text.size() >= width) return text;
  const size_t pad = width - text.size();
  return std::string(pad / 2, fill) + text + std::string(pad - pad / 2, fill);
}

// Python's "{:<40} {:<10.2f}" and "{:<40} {:<10}".
std::string Row(const std::string& label, double value) {
  return absl::StrFormat("%-40s %-10.2f\n", label, value);
}
std::string Row(const std::string& label, int64_t value) {
  return absl::StrFormat("%-40s %-10d\n", label, value);
}

// Python's str(float(p)) for a percentile label: "99", "99.9" (vLLM drops a ".0").
std::string PercentileWord(double p) {
  if (p == std::floor(p)) return absl::StrCat(static_cast<int64_t>(p));
  return absl::StrCat(p);
}

// Python's repr(float): shortest round-trip digits, always with a '.' or exponent.
std::string PythonFloat(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

struct MetricName {
  const char* key;     // "ttft"
  const char* label;   // "TTFT"
  const char* header;  // "Time to First Token"
  MetricSummary BenchmarkMetrics::*summary;
};

constexpr MetricName kMetricNames[] = {
    {"ttft", "TTFT", "Time to First Token", &BenchmarkMetrics::ttft},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &BenchmarkMetrics::tpot},
    {"itl", "ITL", "Inter-token Latency", &BenchmarkMetrics::itl},
    {"e2el", "E2EL", "End-to-end Latency", &BenchmarkMetrics::e2el},
};
// Printed and saved only with --max-concurrency, as vLLM.
constexpr MetricName kQueueMetric = {"client_queue_time", "Client Queue Time",
                                     "Client-side Queueing", &BenchmarkMetrics::client_queue_time};

// The metrics to print and save, in vLLM's order.
std::vector<const MetricName*> SelectedMetrics(const BenchmarkRunInfo& info);

bool Selected(const BenchmarkRunInfo& info, const char* key) {
  return std::find(info.percentile_metrics.begin(), info.percentile_metrics.end(), key) !=
         info.percentile_metrics.end();
}

std::vector<const MetricName*> SelectedMetrics(const BenchmarkRunInfo& info) {
  std::vector<const MetricName*> selected;
  for (const MetricName& name : kMetricNames) {
    if (Selected(info, name.key)) selected.push_back(&name);
  }
  if (info.max_concurrency.has_value() && Selected(info, kQueueMetric.key)) {
    selected.push_back(&kQueueMetric);
  }
  return selected;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return values[lower] + (values[upper] - values[lower]) * fraction;
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  double sum = 0.0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double StdDev(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const double mean = Mean(values);
  double sum_sq = 0.0;
  for (double v : values) sum_sq += (v - mean) * (v - mean);
  return std::sqrt(sum_sq / static_cast<double>(values.size()));
}

MetricSummary Summarize(const std::vector<double>& values, const std::vector<double>& percentiles) {
  MetricSummary summary;
  summary.mean_ms = Mean(values) * 1000.0;
  summary.median_ms = Percentile(values, 50.0) * 1000.0;
  summary.std_ms = StdDev(values) * 1000.0;
  for (double p : percentiles) {
    summary.percentiles_ms.emplace_back(p, Percentile(values, p) * 1000.0);
  }
  return summary;
}

namespace {

// vLLM's per-second buckets over the successful requests: output tokens (first token at
// start + ttft, then one per ITL gap) and requests in flight; keeps the maxima.
void PeakPerSecond(const std::vector<RequestOutput>& outputs, BenchmarkMetrics& metrics) {
  double min_start = std::numeric_limits<double>::infinity();
  double max_end = -std::numeric_limits<double>::infinity();
  for (const RequestOutput& output : outputs) {
    if (!output.success) continue;
    min_start = std::min(min_start, output.start_time);
    max_end = std::max(max_end, output.start_time + output.latency);
  }
  if (std::isinf(min_start)) return;
  const size_t buckets = static_cast<size_t>(std::ceil(max_end - min_start)) + 1;
  std::vector<double> tokens(buckets, 0.0);
  std::vector<int64_t> concurrent(buckets, 0);
  for (const RequestOutput& output : outputs) {
    if (!output.success) continue;
    double time = output.start_time + output.ttft;
    const auto add_token = [&](double t) {
      const double bucket = std::trunc(t - min_start);
      if (bucket >= 0 && bucket < static_cast<double>(buckets)) {
        tokens[static_cast<size_t>(bucket)] += 1;
      }
    };
    add_token(time);
    for (double gap : output.itl) add_token(time += gap);
    const auto first = static_cast<size_t>(std::trunc(output.start_time - min_start));
    const auto last =
        static_cast<size_t>(std::trunc(output.start_time + output.latency - min_start));
    for (size_t second = first; second <= last && second < buckets; ++second) ++concurrent[second];
  }
  metrics.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  metrics.max_concurrent_requests = *std::max_element(concurrent.begin(), concurrent.end());
}

}  // namespace

BenchmarkMetrics CalculateMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                  const std::vector<double>& percentiles,
                                  const GoodputSlos& goodput) {
  BenchmarkMetrics metrics;
  std::vector<double> ttfts, tpots, itls, e2els, queue_times;
  int64_t good = 0;
  for (const RequestOutput& output : outputs) {
    if (!output.success) {
      metrics.output_lens.push_back(0);
      ++metrics.failed;
      continue;
    }
    metrics.output_lens.push_back(output.output_tokens);
    metrics.total_input += output.prompt_len;
    metrics.total_output += output.output_tokens;
    double tpot = 0.0;  // vLLM: 0 for goodput when there is one output token
    if (output.output_tokens > 1) {
      tpot = (output.latency - output.ttft) / static_cast<double>(output.output_tokens - 1);
      tpots.push_back(tpot);
    }
    bool is_good = true;
    for (const auto& [name, slo_ms] : goodput) {
      const double value = name == "ttft" ? output.ttft : name == "tpot" ? tpot : output.latency;
      is_good = is_good && value <= slo_ms / 1000.0;
    }
    if (is_good) ++good;
    itls.insert(itls.end(), output.itl.begin(), output.itl.end());
    ttfts.push_back(output.ttft);
    e2els.push_back(output.latency);
    queue_times.push_back(output.client_queue_time);
    ++metrics.completed;
  }
  metrics.request_throughput = static_cast<double>(metrics.completed) / duration_s;
  if (!goodput.empty()) metrics.request_goodput = static_cast<double>(good) / duration_s;
  metrics.output_throughput = static_cast<double>(metrics.total_output) / duration_s;
  metrics.total_token_throughput =
      static_cast<double>(metrics.total_input + metrics.total_output) / duration_s;
  metrics.ttft = Summarize(ttfts, percentiles);
  metrics.tpot = Summarize(tpots, percentiles);
  metrics.itl = Summarize(itls, percentiles);
  metrics.e2el = Summarize(e2els, percentiles);
  metrics.client_queue_time = Summarize(queue_times, percentiles);
  PeakPerSecond(outputs, metrics);
  return metrics;
}

StructuredOutputSummary SummarizeStructuredOutputs(const std::vector<RequestOutput>& outputs,
                                                   const std::vector<bool>& constrained) {
  StructuredOutputSummary summary;
  for (size_t i = 0; i < outputs.size() && i < constrained.size(); ++i) {
    if (!constrained[i]) continue;
    ++summary.requests;
    const RequestOutput& output = outputs[i];
    if (!output.success) continue;
    ++summary.completed;
    if (nlohmann::json::accept(output.generated_text)) ++summary.valid_json;
    if (output.finish_reason == "length") ++summary.cut_at_max_tokens;
  }
  return summary;
}

std::string FormatResultTable(const BenchmarkRunInfo& info, const BenchmarkMetrics& metrics) {
  std::string out = Center(" Serving Benchmark Result ", '=', 50) + "\n";
  out += Row("Successful requests:", metrics.completed);
  out += Row("Failed requests:", metrics.failed);
  if (info.max_concurrency.has_value()) {
    out += Row("Maximum request concurrency:", static_cast<int64_t>(*info.max_concurrency));
  }
  if (!std::isinf(info.request_rate)) {
    out += Row("Request rate configured (RPS):", info.request_rate);
  }
  out += Row("Benchmark duration (s):", info.duration_s);
  out += Row("Total input tokens:", metrics.total_input);
  out += Row("Total generated tokens:", metrics.total_output);
  out += Row("Request throughput (req/s):", metrics.request_throughput);
  if (metrics.request_goodput.has_value()) {
    out += Row("Request goodput (req/s):", *metrics.request_goodput);
  }
  out += Row("Output token throughput (tok/s):", metrics.output_throughput);
  out += Row("Peak output token throughput (tok/s):", metrics.max_output_tokens_per_s);
  // vLLM formats this integer with {:<10.2f}.
  out += Row("Peak concurrent requests:", static_cast<double>(metrics.max_concurrent_requests));
  out += Row("Total token throughput (tok/s):", metrics.total_token_throughput);
  for (const MetricName* name : SelectedMetrics(info)) {
    const MetricSummary& summary = metrics.*(name->summary);
    out += Center(name->header, '-', 50) + "\n";
    out += Row(absl::StrCat("Mean ", name->label, " (ms):"), summary.mean_ms);
    out += Row(absl::StrCat("Median ", name->label, " (ms):"), summary.median_ms);
    for (const auto& [p, value] : summary.percentiles_ms) {
      out += Row(absl::StrCat("P", PercentileWord(p), " ", name->label, " (ms):"), value);
    }
  }
  if (metrics.structured_output.has_value()) {
    const StructuredOutputSummary& so = *metrics.structured_output;
    out += Center("Structured Outputs", '-', 50) + "\n";
    out += Row("Requests with a JSON schema:", so.requests);
    out += Row("Outputs that parse as JSON:", so.valid_json);
    out += Row("Outputs cut at max_tokens:", so.cut_at_max_tokens);
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::json BuildResultJson(const BenchmarkRunInfo& info, const BenchmarkMetrics& metrics,
                               const std::vector<RequestOutput>& outputs, bool save_detailed) {
  nlohmann::json result;
  result["date"] = info.date;
  result["endpoint_type"] = info.backend;
  result["backend"] = info.backend;
  result["label"] = info.label.empty() ? nlohmann::json(nullptr) : nlohmann::json(info.label);
  result["model_id"] = info.model_id;
  result["tokenizer_id"] = info.tokenizer_id.empty() ? info.model_id : info.tokenizer_id;
  result["num_prompts"] = info.num_prompts;
  for (const auto& [key, value] : info.metadata) result[key] = value;
  if (std::isinf(info.request_rate)) {
    result["request_rate"] = "inf";
  } else {
    result["request_rate"] = info.request_rate;
  }
  result["burstiness"] = info.burstiness;
  result["max_concurrency"] =
      info.max_concurrency.has_value() ? nlohmann::json(*info.max_concurrency) : nullptr;
  if (!info.ramp_up_strategy.empty()) {
    result["ramp_up_strategy"] = info.ramp_up_strategy;
    result["ramp_up_start_rps"] = info.ramp_up_start_rps;
    result["ramp_up_end_rps"] = info.ramp_up_end_rps;
  }
  result["duration"] = info.duration_s;
  result["completed"] = metrics.completed;
  result["failed"] = metrics.failed;
  result["total_input_tokens"] = metrics.total_input;
  result["total_output_tokens"] = metrics.total_output;
  result["request_throughput"] = metrics.request_throughput;
  result["request_goodput"] = metrics.request_goodput.has_value()
                                  ? nlohmann::json(*metrics.request_goodput)
                                  : nlohmann::json(nullptr);
  result["output_throughput"] = metrics.output_throughput;
  result["total_token_throughput"] = metrics.total_token_throughput;
  nlohmann::json latencies = nlohmann::json::array(), queue_times = nlohmann::json::array();
  for (const RequestOutput& output : outputs) {
    latencies.push_back(output.latency);
    queue_times.push_back(output.client_queue_time);
  }
  // vLLM keeps these two lists without --save-detailed too.
  result["latencies"] = std::move(latencies);
  result["queue_times"] = std::move(queue_times);
  if (save_detailed) {
    nlohmann::json input_lens = nlohmann::json::array(), start_times = nlohmann::json::array(),
                   ttfts = nlohmann::json::array(), itls = nlohmann::json::array(),
                   texts = nlohmann::json::array(), errors = nlohmann::json::array();
    for (const RequestOutput& output : outputs) {
      input_lens.push_back(output.prompt_len);
      start_times.push_back(output.start_time);
      ttfts.push_back(output.ttft);
      itls.push_back(output.itl);
      texts.push_back(output.generated_text);
      errors.push_back(output.error);
    }
    result["input_lens"] = std::move(input_lens);
    result["output_lens"] = metrics.output_lens;
    result["start_times"] = std::move(start_times);
    result["ttfts"] = std::move(ttfts);
    result["itls"] = std::move(itls);
    result["generated_texts"] = std::move(texts);
    result["errors"] = std::move(errors);
  }
  result["max_output_tokens_per_s"] = metrics.max_output_tokens_per_s;
  result["max_concurrent_requests"] = metrics.max_concurrent_requests;
  result["rtfx"] = 0.0;  // audio input duration per second; no audio here
  if (metrics.structured_output.has_value()) {
    const StructuredOutputSummary& so = *metrics.structured_output;
    result["structured_output_requests"] = so.requests;
    result["structured_output_completed"] = so.completed;
    result["valid_json_outputs"] = so.valid_json;
    result["cut_at_max_tokens"] = so.cut_at_max_tokens;
    result["correct_rate(%)"] = so.requests == 0 ? 0.0
                                                 : 100.0 * static_cast<double>(so.valid_json) /
                                                       static_cast<double>(so.requests);
  }
  // vLLM saves mean/median/std/p* for every selected metric.
  for (const MetricName* name : SelectedMetrics(info)) {
    const MetricSummary& summary = metrics.*(name->summary);
    result[absl::StrCat("mean_", name->key, "_ms")] = summary.mean_ms;
    result[absl::StrCat("median_", name->key, "_ms")] = summary.median_ms;
    result[absl::StrCat("std_", name->key, "_ms")] = summary.std_ms;
    for (const auto& [p, value] : summary.percentiles_ms) {
      result[absl::StrCat("p", PercentileWord(p), "_", name->key, "_ms")] = value;
    }
  }
  return result;
}

std::string DefaultResultFilename(const BenchmarkRunInfo& info) {
  const std::vector<std::string> parts = absl::StrSplit(info.model_id, '/');
  const std::string concurrency =
      info.max_concurrency.has_value() ? absl::StrCat("-concurrency", *info.max_concurrency) : "";
  const std::string label = info.label.empty() ? info.backend : info.label;
  if (!info.ramp_up_strategy.empty()) {
    return absl::StrCat(label, "-ramp-up-", info.ramp_up_strategy, "-", info.ramp_up_start_rps,
                        "qps-", info.ramp_up_end_rps, "qps", concurrency, "-", parts.back(), "-",
                        info.date, ".json");
  }
  return absl::StrCat(label, "-", PythonFloat(info.request_rate), "qps", concurrency, "-",
                      parts.back(), "-", info.date, ".json");
}

}  // namespace vllm::bench_serve
