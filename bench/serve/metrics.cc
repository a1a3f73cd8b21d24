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

bool Selected(const BenchmarkRunInfo& info, const char* key) {
  return std::find(info.percentile_metrics.begin(), info.percentile_metrics.end(), key) !=
         info.percentile_metrics.end();
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

BenchmarkMetrics CalculateMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                  const std::vector<double>& percentiles) {
  BenchmarkMetrics metrics;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestOutput& output : outputs) {
    if (!output.success) {
      metrics.output_lens.push_back(0);
      ++metrics.failed;
      continue;
    }
    metrics.output_lens.push_back(output.output_tokens);
    metrics.total_input += output.prompt_len;
    metrics.total_output += output.output_tokens;
    if (output.output_tokens > 1) {
      tpots.push_back((output.latency - output.ttft) /
                      static_cast<double>(output.output_tokens - 1));
    }
    itls.insert(itls.end(), output.itl.begin(), output.itl.end());
    ttfts.push_back(output.ttft);
    e2els.push_back(output.latency);
    ++metrics.completed;
  }
  metrics.request_throughput = static_cast<double>(metrics.completed) / duration_s;
  metrics.output_throughput = static_cast<double>(metrics.total_output) / duration_s;
  metrics.total_token_throughput =
      static_cast<double>(metrics.total_input + metrics.total_output) / duration_s;
  metrics.ttft = Summarize(ttfts, percentiles);
  metrics.tpot = Summarize(tpots, percentiles);
  metrics.itl = Summarize(itls, percentiles);
  metrics.e2el = Summarize(e2els, percentiles);
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
  out += Row("Output token throughput (tok/s):", metrics.output_throughput);
  out += Row("Total Token throughput (tok/s):", metrics.total_token_throughput);
  for (const MetricName& name : kMetricNames) {
    if (!Selected(info, name.key)) continue;
    const MetricSummary& summary = metrics.*(name.summary);
    out += Center(name.header, '-', 50) + "\n";
    out += Row(absl::StrCat("Mean ", name.label, " (ms):"), summary.mean_ms);
    out += Row(absl::StrCat("Median ", name.label, " (ms):"), summary.median_ms);
    for (const auto& [p, value] : summary.percentiles_ms) {
      out += Row(absl::StrCat("P", PercentileWord(p), " ", name.label, " (ms):"), value);
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
                               const std::vector<RequestOutput>& outputs) {
  nlohmann::json result;
  result["date"] = info.date;
  result["backend"] = info.backend;
  result["model_id"] = info.model_id;
  result["tokenizer_id"] = info.model_id;
  result["num_prompts"] = info.num_prompts;
  if (std::isinf(info.request_rate)) {
    result["request_rate"] = "inf";
  } else {
    result["request_rate"] = info.request_rate;
  }
  result["burstiness"] = info.burstiness;
  result["max_concurrency"] =
      info.max_concurrency.has_value() ? nlohmann::json(*info.max_concurrency) : nullptr;
  result["duration"] = info.duration_s;
  result["completed"] = metrics.completed;
  result["failed"] = metrics.failed;
  result["total_input_tokens"] = metrics.total_input;
  result["total_output_tokens"] = metrics.total_output;
  result["request_throughput"] = metrics.request_throughput;
  result["request_goodput"] = nullptr;
  result["output_throughput"] = metrics.output_throughput;
  result["total_token_throughput"] = metrics.total_token_throughput;
  nlohmann::json input_lens = nlohmann::json::array(), ttfts = nlohmann::json::array(),
                 itls = nlohmann::json::array(), texts = nlohmann::json::array(),
                 errors = nlohmann::json::array();
  for (const RequestOutput& output : outputs) {
    input_lens.push_back(output.prompt_len);
    ttfts.push_back(output.ttft);
    itls.push_back(output.itl);
    texts.push_back(output.generated_text);
    errors.push_back(output.error);
  }
  result["input_lens"] = std::move(input_lens);
  result["output_lens"] = metrics.output_lens;
  result["ttfts"] = std::move(ttfts);
  result["itls"] = std::move(itls);
  result["generated_texts"] = std::move(texts);
  result["errors"] = std::move(errors);
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
  for (const MetricName& name : kMetricNames) {
    if (!Selected(info, name.key)) continue;
    const MetricSummary& summary = metrics.*(name.summary);
    result[absl::StrCat("mean_", name.key, "_ms")] = summary.mean_ms;
    result[absl::StrCat("median_", name.key, "_ms")] = summary.median_ms;
    result[absl::StrCat("std_", name.key, "_ms")] = summary.std_ms;
    for (const auto& [p, value] : summary.percentiles_ms) {
      result[absl::StrCat("p", PercentileWord(p), "_", name.key, "_ms")] = value;
    }
  }
  return result;
}

std::string DefaultResultFilename(const BenchmarkRunInfo& info) {
  const std::vector<std::string> parts = absl::StrSplit(info.model_id, '/');
  const std::string concurrency =
      info.max_concurrency.has_value() ? absl::StrCat("-concurrency", *info.max_concurrency) : "";
  return absl::StrCat(info.backend, "-", PythonFloat(info.request_rate), "qps", concurrency, "-",
                      parts.back(), "-", info.date, ".json");
}

}  // namespace vllm::bench_serve
