// A small Prometheus metrics registry (counters, gauges, histograms) rendering the text
// exposition format (version 0.0.4), and the vLLM metric set the API server exports
// (vllm/v1/metrics/loggers.py: PrometheusStatLogger), each labelled model_name.
//
// Thread-safety: every metric and the registry are safe to use from any thread.
#ifndef VLLM_FRONTEND_OPENAI_METRICS_H_
#define VLLM_FRONTEND_OPENAI_METRICS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/engine_core_types.h"
#include "spec_decode/stats.h"
#include "structured_output/stats.h"

namespace vllm::frontend {

// Label pairs attached to one metric (one time series per metric in this registry).
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

// A counter, gauge or histogram. Created only by MetricsRegistry; lives as long as it.
class Metric {
 public:
  Metric(MetricType type, std::string name, std::string help, MetricLabels labels,
         std::vector<double> buckets);

  // Counter: adds `delta` (>= 0). Gauge: adds `delta`.
  void Add(double delta);
  // Gauge, or a counter mirrored from a cumulative source: sets the value.
  void Set(double value);
  // Histogram: records one observation.
  void Observe(double value);
  // Histogram mirrored from a cumulative source (the engine's counts): sets the count of each
  // bucket (one per bound plus +Inf, not cumulative) and the sum. Counts of another length are
  // ignored.
  void SetHistogram(std::span<const int64_t> bucket_counts, double sum);

  double value() const;
  uint64_t count() const;  // histogram observations

  const std::string& name() const { return name_; }

  // Appends this metric's HELP and TYPE lines when `header` (false for a further series of
  // the name just rendered), then its sample lines.
  void Render(std::string* out, bool header = true) const;

 private:
  const MetricType type_;
  const std::string name_;
  const std::string help_;
  const std::string labels_;           // rendered `k="v",...` (escaped), may be empty
  const std::vector<double> buckets_;  // upper bounds, ascending, +Inf implied

  mutable absl::Mutex mu_;
  double value_ ABSL_GUARDED_BY(mu_) = 0.0;  // counter/gauge value, histogram sum
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> bucket_counts_ ABSL_GUARDED_BY(mu_);  // not cumulative
};

// Owns metrics and renders them in registration order. Metrics registered one after another
// under one name with different labels render as one family (one HELP/TYPE header).
class MetricsRegistry {
 public:
  // Each returns a metric owned by the registry, valid for its lifetime. Names should be
  // unique (the registry does not check).
  Metric* AddCounter(std::string name, std::string help, MetricLabels labels);
  Metric* AddGauge(std::string name, std::string help, MetricLabels labels);
  Metric* AddHistogram(std::string name, std::string help, MetricLabels labels,
                       std::vector<double> buckets);

  // The text exposition of every metric.
  std::string Render() const;

 private:
  Metric* Add(std::unique_ptr<Metric> metric);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Metric>> metrics_ ABSL_GUARDED_BY(mu_);
};

// The vLLM metrics of one data-parallel engine; pointers into the registry. Families as vLLM
// 0.33's PrometheusStatLogger registers them by default (v1/metrics/loggers.py), in its order.
struct EngineMetrics {
  // The request_success series for `reason`.
  Metric* RequestSuccess(core::FinishReason reason) const {
    return request_success[static_cast<size_t>(reason)];
  }

  // Performance estimates (vLLM's PerfMetricsProm; only counted with --enable-mfu-metrics,
  // which we do not have: they stay 0 as in vLLM by default).
  Metric* estimated_flops_per_gpu;        // vllm:estimated_flops_per_gpu_total
  Metric* estimated_read_bytes_per_gpu;   // vllm:estimated_read_bytes_per_gpu_total
  Metric* estimated_write_bytes_per_gpu;  // vllm:estimated_write_bytes_per_gpu_total
  Metric* num_requests_running;           // vllm:num_requests_running (gauge, from the engine)
  Metric* num_requests_waiting;           // vllm:num_requests_waiting
  // vllm:num_requests_waiting_by_reason{reason="capacity"|"deferred"}: our scheduler defers
  // nothing apart from the waiting queue, so every waiting request counts as capacity.
  Metric* num_requests_waiting_capacity;
  Metric* num_requests_waiting_deferred;
  // vllm:engine_sleep_state{sleep_state="awake"|"weights_offloaded"|"discard_all"}
  std::array<Metric*, 3> engine_sleep_state;
  Metric* kv_cache_usage_perc;   // vllm:kv_cache_usage_perc, in [0, 1]
  Metric* prefix_cache_queries;  // vllm:prefix_cache_queries_total (tokens)
  Metric* prefix_cache_hits;     // vllm:prefix_cache_hits_total (tokens)
  // The KV connector's external prefix cache (vLLM registers them with or without a
  // connector): vllm:external_prefix_cache_queries_total / _hits_total (tokens).
  Metric* external_prefix_cache_queries;
  Metric* external_prefix_cache_hits;
  // Multi-modal cache (vllm:mm_cache_queries_total / _hits_total): text-only models here, 0.
  Metric* mm_cache_queries;
  Metric* mm_cache_hits;
  Metric* num_preemptions;  // vllm:num_preemptions_total
  Metric* prompt_tokens;    // vllm:prompt_tokens_total
  // vllm:prompt_tokens_by_source_total{source="local_compute"|"local_cache_hit"|
  // "external_kv_transfer"}
  std::array<Metric*, 3> prompt_tokens_by_source;
  Metric* prompt_tokens_cached;  // vllm:prompt_tokens_cached_total (local + external)
  // vllm:prompt_tokens_cached_by_source_total{source="device"|"host"|"p2p"|"disk"|
  // "external_unspecified"}: device = our prefix-cache hits, external_unspecified = the
  // connector's.
  std::array<Metric*, 5> prompt_tokens_cached_by_source;
  Metric* generation_tokens;  // vllm:generation_tokens_total
  // vllm:request_success_total{finished_reason=...}: finished requests by
  // core::FinishReason (stop, length, abort, error), indexed by its value, then vLLM's
  // "repetition" (which we never produce). A client that disconnects counts as abort; an
  // engine failure as error.
  std::array<Metric*, 5> request_success;
  Metric* request_prompt_tokens;               // vllm:request_prompt_tokens (histogram)
  Metric* request_generation_tokens;           // vllm:request_generation_tokens
  Metric* iteration_tokens;                    // vllm:iteration_tokens_total (per engine step)
  Metric* request_max_num_generation_tokens;   // vllm:request_max_num_generation_tokens
  Metric* request_params_n;                    // vllm:request_params_n
  Metric* request_params_max_tokens;           // vllm:request_params_max_tokens
  Metric* time_to_first_token;                 // vllm:time_to_first_token_seconds
  Metric* inter_token_latency;                 // vllm:inter_token_latency_seconds
  Metric* request_time_per_output_token;       // vllm:request_time_per_output_token_seconds
  Metric* e2e_request_latency;                 // vllm:e2e_request_latency_seconds
  Metric* request_queue_time;                  // vllm:request_queue_time_seconds
  Metric* request_inference_time;              // vllm:request_inference_time_seconds
  Metric* request_prefill_time;                // vllm:request_prefill_time_seconds
  Metric* request_decode_time;                 // vllm:request_decode_time_seconds
  Metric* request_num_preemptions;             // vllm:request_num_preemptions
  Metric* request_prefill_kv_computed_tokens;  // vllm:request_prefill_kv_computed_tokens
  // Structured outputs (ours; vLLM 0.33 has no such metrics), from the engine's
  // StructuredOutputStats.
  Metric* structured_output_cache_queries;  // vllm:structured_output_cache_queries_total
  Metric* structured_output_cache_hits;     // vllm:structured_output_cache_hits_total
  // vllm:structured_output_compile_errors_total{reason="failed"|"timeout"}
  Metric* structured_output_compile_failed;
  Metric* structured_output_compile_timeout;
  Metric* structured_output_compile_seconds;  // vllm:structured_output_compile_seconds

  // Speculative decoding (vLLM's SpecDecodingProm), registered only when it is configured
  // (null and empty otherwise).
  Metric* spec_decode_num_drafts = nullptr;           // vllm:spec_decode_num_drafts_total
  Metric* spec_decode_num_draft_tokens = nullptr;     // vllm:spec_decode_num_draft_tokens_total
  Metric* spec_decode_num_accepted_tokens = nullptr;  // vllm:spec_decode_num_accepted_tokens_total
  // vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}
  std::vector<Metric*> spec_decode_num_accepted_tokens_per_pos;

  // Mirrors the engine's cumulative structured-output counters into the series above.
  void SetStructuredOutput(const structured_output::StructuredOutputStats& stats) const;
  // The same for the speculative-decoding counters (nothing when they are not registered; a
  // position past the engine's list reads 0).
  void SetSpecDecoding(const spec_decode::SpecDecodingStats& stats) const;
  // vllm:engine_sleep_state: awake, or asleep at `level` (vLLM's record_sleep_state).
  void SetSleepState(bool sleeping, int32_t level) const;
};

// vLLM's histogram buckets (v1/metrics/buckets.py), for the families above.
const std::vector<double>& RequestLatencyBuckets();
const std::vector<double>& TimeToFirstTokenBuckets();
const std::vector<double>& InterTokenLatencyBuckets();
// The 1-2-5 series up to `max_value` (vLLM's build_1_2_5_buckets: request token counts).
std::vector<double> OneTwoFiveBuckets(int64_t max_value);

// What ServerMetrics needs to know of the server besides its engines.
struct ServerMetricsOptions {
  // Caps the request-token histograms' buckets (vLLM's request_tokens family); 0: 1 << 20.
  int32_t max_model_len = 0;
  // vllm:cache_config_info's labels besides engine (vLLM: every CacheConfig field).
  MetricLabels cache_config_info;
};

// The vLLM metrics the server maintains. As vLLM's PrometheusStatLogger, every series is
// labelled model_name and engine (the data-parallel rank), in that order; the series of one
// name are registered together so each family renders under one header.
class ServerMetrics {
 public:
  // Builds the set for `num_engines` (>= 1) engines in `registry`.
  // Engine e's series carry engine="<first_rank + e>" (its data-parallel rank). With
  // `num_spec_tokens` (k) > 0, the vllm:spec_decode_* families too, with k positions.
  ServerMetrics(MetricsRegistry* registry, const std::string& model_name, int32_t num_engines,
                int32_t first_rank = 0, int32_t num_spec_tokens = 0,
                const ServerMetricsOptions& options = {});

  // Engine `index`'s series (an index out of range is clamped: never a crash on a stray one).
  const EngineMetrics& engine(int32_t index) const;
  int32_t num_engines() const { return static_cast<int32_t>(engines_.size()); }

 private:
  using LabelsFn = std::function<MetricLabels(int32_t)>;
  // The families from vllm:num_requests_running to vllm:request_success_total.
  void AddEngineStateMetrics(MetricsRegistry* registry, const LabelsFn& labels);
  // vllm:admission_rejections_total and the histograms.
  void AddRequestHistograms(MetricsRegistry* registry, const LabelsFn& labels,
                            const std::string& model_name, int32_t max_model_len);
  // The vllm:structured_output_* families, one series per engine.
  void AddStructuredOutputMetrics(MetricsRegistry* registry, const LabelsFn& labels);
  // The vllm:spec_decode_* families (vLLM's SpecDecodingProm), one series per engine and,
  // per position, `num_spec_tokens` more.
  void AddSpecDecodingMetrics(MetricsRegistry* registry, const LabelsFn& labels,
                              int32_t num_spec_tokens);

  std::vector<EngineMetrics> engines_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_METRICS_H_
