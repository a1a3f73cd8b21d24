#include "frontend/openai/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vllm::frontend {
namespace {

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderLabels(const MetricLabels& labels) {
  std::string out;
  for (const auto& [key, value] : labels) {
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, key, "=\"", EscapeLabelValue(value), "\"");
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  return absl::StrFormat("%.17g", value);
}

// `{labels,extra}` or `{extra}` or `` when both are empty.
std::string Braces(const std::string& labels, const std::string& extra) {
  if (labels.empty() && extra.empty()) return "";
  if (labels.empty()) return absl::StrCat("{", extra, "}");
  if (extra.empty()) return absl::StrCat("{", labels, "}");
  return absl::StrCat("{", labels, ",", extra, "}");
}

// Latency buckets (seconds), as vLLM's.
const std::vector<double>& TtftBuckets() {
  static const auto* b = new std::vector<double>{
      0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return *b;
}
const std::vector<double>& ItlBuckets() {
  static const auto* b =
      new std::vector<double>{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                              0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return *b;
}
const std::vector<double>& E2eBuckets() {
  static const auto* b = new std::vector<double>{0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                 5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return *b;
}

}  // namespace

Metric::Metric(MetricType type, std::string name, std::string help, MetricLabels labels,
               std::vector<double> buckets)
    : type_(type),
      name_(std::move(name)),
      help_(std::move(help)),
      labels_(RenderLabels(labels)),
      buckets_(std::move(buckets)),
      bucket_counts_(buckets_.size() + 1, 0) {}

void Metric::Add(double delta) {
  absl::MutexLock lock(&mu_);
  value_ += delta;
}

void Metric::Set(double value) {
  absl::MutexLock lock(&mu_);
  value_ = value;
}

void Metric::Observe(double value) {
  size_t bucket = std::lower_bound(buckets_.begin(), buckets_.end(), value) - buckets_.begin();
  absl::MutexLock lock(&mu_);
  value_ += value;
  ++count_;
  ++bucket_counts_[bucket];
}

void Metric::SetHistogram(std::span<const int64_t> bucket_counts, double sum) {
  absl::MutexLock lock(&mu_);
  if (bucket_counts.size() != bucket_counts_.size()) return;
  count_ = 0;
  for (size_t i = 0; i < bucket_counts.size(); ++i) {
    bucket_counts_[i] = static_cast<uint64_t>(std::max<int64_t>(bucket_counts[i], 0));
    count_ += bucket_counts_[i];
  }
  value_ = sum;
}

double Metric::value() const {
  absl::MutexLock lock(&mu_);
  return value_;
}

uint64_t Metric::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

void Metric::Render(std::string* out, bool header) const {
  const char* type = type_ == MetricType::kCounter ? "counter"
                     : type_ == MetricType::kGauge ? "gauge"
                                                   : "histogram";
  if (header) {
    absl::StrAppend(out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ", type, "\n");
  }
  absl::MutexLock lock(&mu_);
  if (type_ != MetricType::kHistogram) {
    absl::StrAppend(out, name_, Braces(labels_, ""), " ", FormatValue(value_), "\n");
    return;
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= buckets_.size(); ++i) {
    cumulative += bucket_counts_[i];
    std::string le = i < buckets_.size() ? FormatValue(buckets_[i]) : "+Inf";
    absl::StrAppend(out, name_, "_bucket", Braces(labels_, absl::StrCat("le=\"", le, "\"")), " ",
                    cumulative, "\n");
  }
  absl::StrAppend(out, name_, "_sum", Braces(labels_, ""), " ", FormatValue(value_), "\n");
  absl::StrAppend(out, name_, "_count", Braces(labels_, ""), " ", count_, "\n");
}

Metric* MetricsRegistry::Add(std::unique_ptr<Metric> metric) {
  absl::MutexLock lock(&mu_);
  metrics_.push_back(std::move(metric));
  return metrics_.back().get();
}

Metric* MetricsRegistry::AddCounter(std::string name, std::string help, MetricLabels labels) {
  return Add(std::make_unique<Metric>(MetricType::kCounter, std::move(name), std::move(help),
                                      std::move(labels), std::vector<double>{}));
}

Metric* MetricsRegistry::AddGauge(std::string name, std::string help, MetricLabels labels) {
  return Add(std::make_unique<Metric>(MetricType::kGauge, std::move(name), std::move(help),
                                      std::move(labels), std::vector<double>{}));
}

Metric* MetricsRegistry::AddHistogram(std::string name, std::string help, MetricLabels labels,
                                      std::vector<double> buckets) {
  VLLM_CHECK(std::is_sorted(buckets.begin(), buckets.end())) << name;
  return Add(std::make_unique<Metric>(MetricType::kHistogram, std::move(name), std::move(help),
                                      std::move(labels), std::move(buckets)));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < metrics_.size(); ++i) {
    metrics_[i]->Render(&out, i == 0 || metrics_[i - 1]->name() != metrics_[i]->name());
  }
  return out;
}

ServerMetrics::ServerMetrics(MetricsRegistry* r, const std::string& model_name, int32_t num_engines,
                             int32_t first_rank, int32_t num_spec_tokens)
    : engines_(std::max(num_engines, 1)) {
  const int32_t n = static_cast<int32_t>(engines_.size());
  auto labels = [&](int32_t e) {
    return MetricLabels{{"model_name", model_name}, {"engine", std::to_string(first_rank + e)}};
  };
  // One family at a time, one series per engine.
  auto each = [&](Metric* EngineMetrics::*field, auto make) {
    for (int32_t e = 0; e < n; ++e) engines_[e].*field = make(labels(e));
  };
  each(&EngineMetrics::num_requests_running, [&](MetricLabels l) {
    return r->AddGauge("vllm:num_requests_running",
                       "Number of requests in model execution batches.", std::move(l));
  });
  each(&EngineMetrics::num_requests_waiting, [&](MetricLabels l) {
    return r->AddGauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                       std::move(l));
  });
  each(&EngineMetrics::kv_cache_usage_perc, [&](MetricLabels l) {
    return r->AddGauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                       std::move(l));
  });
  each(&EngineMetrics::prefix_cache_queries, [&](MetricLabels l) {
    return r->AddCounter("vllm:prefix_cache_queries_total",
                         "Prefix cache queries, in terms of number of queried tokens.",
                         std::move(l));
  });
  each(&EngineMetrics::prefix_cache_hits, [&](MetricLabels l) {
    return r->AddCounter("vllm:prefix_cache_hits_total",
                         "Prefix cache hits, in terms of number of cached tokens.", std::move(l));
  });
  each(&EngineMetrics::external_prefix_cache_queries, [&](MetricLabels l) {
    return r->AddCounter("vllm:external_prefix_cache_queries_total",
                         "External prefix cache queries from KV connector cross-instance cache "
                         "sharing, in terms of number of queried tokens.",
                         std::move(l));
  });
  each(&EngineMetrics::external_prefix_cache_hits, [&](MetricLabels l) {
    return r->AddCounter("vllm:external_prefix_cache_hits_total",
                         "External prefix cache hits from KV connector cross-instance cache "
                         "sharing, in terms of number of cached tokens.",
                         std::move(l));
  });
  each(&EngineMetrics::num_preemptions, [&](MetricLabels l) {
    return r->AddCounter("vllm:num_preemptions_total",
                         "Cumulative number of preemption from the engine.", std::move(l));
  });
  each(&EngineMetrics::prompt_tokens, [&](MetricLabels l) {
    return r->AddCounter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
                         std::move(l));
  });
  each(&EngineMetrics::generation_tokens, [&](MetricLabels l) {
    return r->AddCounter("vllm:generation_tokens_total", "Number of generation tokens processed.",
                         std::move(l));
  });
  for (int32_t e = 0; e < n; ++e) {
    for (core::FinishReason reason : {core::FinishReason::kStop, core::FinishReason::kLength,
                                      core::FinishReason::kAbort, core::FinishReason::kError}) {
      MetricLabels with_reason = labels(e);
      with_reason.emplace_back("finished_reason", std::string(core::FinishReasonName(reason)));
      engines_[e].request_success[static_cast<size_t>(reason)] = r->AddCounter(
          "vllm:request_success_total", "Count of successfully processed requests.", with_reason);
    }
  }
  each(&EngineMetrics::time_to_first_token, [&](MetricLabels l) {
    return r->AddHistogram("vllm:time_to_first_token_seconds",
                           "Histogram of time to first token in seconds.", std::move(l),
                           TtftBuckets());
  });
  each(&EngineMetrics::inter_token_latency, [&](MetricLabels l) {
    return r->AddHistogram("vllm:inter_token_latency_seconds",
                           "Histogram of inter-token latency in seconds.", std::move(l),
                           ItlBuckets());
  });
  each(&EngineMetrics::e2e_request_latency, [&](MetricLabels l) {
    return r->AddHistogram("vllm:e2e_request_latency_seconds",
                           "Histogram of e2e request latency in seconds.", std::move(l),
                           E2eBuckets());
  });
  AddStructuredOutputMetrics(r, labels);
  if (num_spec_tokens > 0) AddSpecDecodingMetrics(r, labels, num_spec_tokens);
}

void ServerMetrics::AddStructuredOutputMetrics(MetricsRegistry* r,
                                               const std::function<MetricLabels(int32_t)>& labels) {
  const int32_t n = static_cast<int32_t>(engines_.size());
  auto each = [&](Metric* EngineMetrics::*field, auto make) {
    for (int32_t e = 0; e < n; ++e) engines_[e].*field = make(labels(e));
  };
  each(&EngineMetrics::structured_output_cache_queries, [&](MetricLabels l) {
    return r->AddCounter("vllm:structured_output_cache_queries_total",
                         "Structured-output requests that looked their grammar up in the "
                         "compile cache.",
                         std::move(l));
  });
  each(&EngineMetrics::structured_output_cache_hits, [&](MetricLabels l) {
    return r->AddCounter("vllm:structured_output_cache_hits_total",
                         "Structured-output requests whose grammar was in the compile cache.",
                         std::move(l));
  });
  auto with_reason = [&](int32_t e, const char* reason) {
    MetricLabels l = labels(e);
    l.emplace_back("reason", reason);
    return l;
  };
  for (int32_t e = 0; e < n; ++e) {
    const char* help = "Structured-output requests failed because their grammar did not compile.";
    engines_[e].structured_output_compile_failed = r->AddCounter(
        "vllm:structured_output_compile_errors_total", help, with_reason(e, "failed"));
    engines_[e].structured_output_compile_timeout = r->AddCounter(
        "vllm:structured_output_compile_errors_total", help, with_reason(e, "timeout"));
  }
  each(&EngineMetrics::structured_output_compile_seconds, [&](MetricLabels l) {
    return r->AddHistogram("vllm:structured_output_compile_seconds",
                           "Histogram of structured-output grammar compile time in seconds.",
                           std::move(l),
                           std::vector<double>(structured_output::kCompileSecondsBuckets.begin(),
                                               structured_output::kCompileSecondsBuckets.end()));
  });
}

void EngineMetrics::SetStructuredOutput(const structured_output::StructuredOutputStats& s) const {
  structured_output_cache_queries->Set(static_cast<double>(s.cache_hits + s.cache_misses));
  structured_output_cache_hits->Set(static_cast<double>(s.cache_hits));
  structured_output_compile_failed->Set(static_cast<double>(s.compile_failures));
  structured_output_compile_timeout->Set(static_cast<double>(s.compile_timeouts));
  structured_output_compile_seconds->SetHistogram(s.compile_seconds_counts, s.compile_seconds_sum);
}

void ServerMetrics::AddSpecDecodingMetrics(MetricsRegistry* r,
                                           const std::function<MetricLabels(int32_t)>& labels,
                                           int32_t num_spec_tokens) {
  const int32_t n = static_cast<int32_t>(engines_.size());
  auto each = [&](Metric* EngineMetrics::*field, const char* name, const char* help) {
    for (int32_t e = 0; e < n; ++e) engines_[e].*field = r->AddCounter(name, help, labels(e));
  };
  each(&EngineMetrics::spec_decode_num_drafts, "vllm:spec_decode_num_drafts_total",
       "Number of spec decoding drafts.");
  each(&EngineMetrics::spec_decode_num_draft_tokens, "vllm:spec_decode_num_draft_tokens_total",
       "Number of draft tokens.");
  each(&EngineMetrics::spec_decode_num_accepted_tokens,
       "vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.");
  for (int32_t e = 0; e < n; ++e) {
    for (int32_t pos = 0; pos < num_spec_tokens; ++pos) {
      MetricLabels l = labels(e);
      l.emplace_back("position", std::to_string(pos));
      engines_[e].spec_decode_num_accepted_tokens_per_pos.push_back(
          r->AddCounter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                        "Accepted tokens per draft position.", std::move(l)));
    }
  }
}

void EngineMetrics::SetSpecDecoding(const spec_decode::SpecDecodingStats& s) const {
  if (spec_decode_num_drafts == nullptr) return;
  spec_decode_num_drafts->Set(static_cast<double>(s.num_drafts));
  spec_decode_num_draft_tokens->Set(static_cast<double>(s.num_draft_tokens));
  spec_decode_num_accepted_tokens->Set(static_cast<double>(s.num_accepted_tokens));
  for (size_t pos = 0; pos < spec_decode_num_accepted_tokens_per_pos.size(); ++pos) {
    const int64_t n =
        pos < s.num_accepted_tokens_per_pos.size() ? s.num_accepted_tokens_per_pos[pos] : 0;
    spec_decode_num_accepted_tokens_per_pos[pos]->Set(static_cast<double>(n));
  }
}

const EngineMetrics& ServerMetrics::engine(int32_t index) const {
  return engines_[std::clamp<int32_t>(index, 0, static_cast<int32_t>(engines_.size()) - 1)];
}

}  // namespace vllm::frontend
