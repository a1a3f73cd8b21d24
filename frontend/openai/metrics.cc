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

void EngineMetrics::SetStructuredOutput(const structured_output::StructuredOutputStats& s) const {
  structured_output_cache_queries->Set(static_cast<double>(s.cache_hits + s.cache_misses));
  structured_output_cache_hits->Set(static_cast<double>(s.cache_hits));
  structured_output_compile_failed->Set(static_cast<double>(s.compile_failures));
  structured_output_compile_timeout->Set(static_cast<double>(s.compile_timeouts));
  structured_output_compile_seconds->SetHistogram(s.compile_seconds_counts, s.compile_seconds_sum);
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

void EngineMetrics::SetSleepState(bool sleeping, int32_t level) const {
  engine_sleep_state[0]->Set(sleeping ? 0 : 1);
  engine_sleep_state[1]->Set(sleeping && level == 1 ? 1 : 0);
  engine_sleep_state[2]->Set(sleeping && level == 2 ? 1 : 0);
}

}  // namespace vllm::frontend
