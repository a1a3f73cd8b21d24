// ServerMetrics: vLLM 0.33's default metric families (v1/metrics/loggers.py,
// PrometheusStatLogger; perf.py, PerfMetricsProm) with its names, types, labels and buckets
// (v1/metrics/buckets.py), one series per engine, plus our structured-output families and,
// when configured, speculative decoding's.
#include <algorithm>
#include <string>

#include "frontend/engine/engine_client.h"
#include "frontend/openai/metrics.h"

namespace vllm::frontend {

const std::vector<double>& RequestLatencyBuckets() {
  static const auto* b = new std::vector<double>{0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                 5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return *b;
}

const std::vector<double>& TimeToFirstTokenBuckets() {
  static const auto* b = new std::vector<double>{
      0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return *b;
}

const std::vector<double>& InterTokenLatencyBuckets() {
  static const auto* b =
      new std::vector<double>{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                              0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return *b;
}

std::vector<double> OneTwoFiveBuckets(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1; scale <= max_value; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(static_cast<double>(m * scale));
    }
  }
  return out;
}

ServerMetrics::ServerMetrics(MetricsRegistry* r, const std::string& model_name, int32_t num_engines,
                             int32_t first_rank, int32_t num_spec_tokens,
                             const ServerMetricsOptions& options)
    : engines_(std::max(num_engines, 1)) {
  const int32_t n = static_cast<int32_t>(engines_.size());
  LabelsFn labels = [&](int32_t e) {
    return MetricLabels{{"model_name", model_name}, {"engine", std::to_string(first_rank + e)}};
  };
  auto each = [&](Metric* EngineMetrics::*field, const char* name, const char* help) {
    for (int32_t e = 0; e < n; ++e) engines_[e].*field = r->AddCounter(name, help, labels(e));
  };
  each(&EngineMetrics::estimated_flops_per_gpu, "vllm:estimated_flops_per_gpu_total",
       "Estimated number of floating point operations per GPU (for Model Flops Utilization "
       "calculations).");
  each(&EngineMetrics::estimated_read_bytes_per_gpu, "vllm:estimated_read_bytes_per_gpu_total",
       "Estimated number of bytes read from memory per GPU (for Model Flops Utilization "
       "calculations).");
  each(&EngineMetrics::estimated_write_bytes_per_gpu, "vllm:estimated_write_bytes_per_gpu_total",
       "Estimated number of bytes written to memory per GPU (for Model Flops Utilization "
       "calculations).");
  AddEngineStateMetrics(r, labels);
  AddRequestHistograms(r, labels, model_name,
                       options.max_model_len > 0 ? options.max_model_len : 1 << 20);
  for (int32_t e = 0; e < n; ++e) {
    MetricLabels info = options.cache_config_info;
    info.emplace_back("engine", std::to_string(first_rank + e));
    r->AddGauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                std::move(info))
        ->Set(1);
  }
  AddStructuredOutputMetrics(r, labels);
  if (num_spec_tokens > 0) AddSpecDecodingMetrics(r, labels, num_spec_tokens);
}

void ServerMetrics::AddEngineStateMetrics(MetricsRegistry* r, const LabelsFn& labels) {
  const int32_t n = static_cast<int32_t>(engines_.size());
  auto gauge = [&](Metric* EngineMetrics::*field, const char* name, const char* help) {
    for (int32_t e = 0; e < n; ++e) engines_[e].*field = r->AddGauge(name, help, labels(e));
  };
  auto counter = [&](Metric* EngineMetrics::*field, const char* name, const char* help) {
    for (int32_t e = 0; e < n; ++e) engines_[e].*field = r->AddCounter(name, help, labels(e));
  };
  // One family whose series differ by `label`: values[i] goes to (engine.*field)[i].
  auto labelled = [&](auto field, bool is_gauge, const char* name, const char* help,
                      const char* label, std::initializer_list<const char*> values) {
    for (int32_t e = 0; e < n; ++e) {
      size_t i = 0;
      for (const char* v : values) {
        MetricLabels l = labels(e);
        l.emplace_back(label, v);
        (engines_[e].*field)[i++] = is_gauge ? r->AddGauge(name, help, std::move(l))
                                             : r->AddCounter(name, help, std::move(l));
      }
    }
  };
  gauge(&EngineMetrics::num_requests_running, "vllm:num_requests_running",
        "Number of requests in model execution batches.");
  gauge(&EngineMetrics::num_requests_waiting, "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.");
  for (int32_t e = 0; e < n; ++e) {
    const char* help =
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
        "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
        "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.";
    MetricLabels capacity = labels(e), deferred = labels(e);
    capacity.emplace_back("reason", "capacity");
    deferred.emplace_back("reason", "deferred");
    engines_[e].num_requests_waiting_capacity =
        r->AddGauge("vllm:num_requests_waiting_by_reason", help, std::move(capacity));
    engines_[e].num_requests_waiting_deferred =
        r->AddGauge("vllm:num_requests_waiting_by_reason", help, std::move(deferred));
  }
  labelled(&EngineMetrics::engine_sleep_state, true, "vllm:engine_sleep_state",
           "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
           "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
           "sleep_state", {"awake", "weights_offloaded", "discard_all"});
  for (const EngineMetrics& m : engines_) m.SetSleepState(false, 0);
  gauge(&EngineMetrics::kv_cache_usage_perc, "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.");
  counter(&EngineMetrics::prefix_cache_queries, "vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.");
  counter(&EngineMetrics::prefix_cache_hits, "vllm:prefix_cache_hits_total",
          "Prefix cache hits, in terms of number of cached tokens.");
  counter(&EngineMetrics::external_prefix_cache_queries, "vllm:external_prefix_cache_queries_total",
          "External prefix cache queries from KV connector cross-instance cache sharing, in "
          "terms of number of queried tokens.");
  counter(&EngineMetrics::external_prefix_cache_hits, "vllm:external_prefix_cache_hits_total",
          "External prefix cache hits from KV connector cross-instance cache sharing, in terms "
          "of number of cached tokens.");
  counter(&EngineMetrics::mm_cache_queries, "vllm:mm_cache_queries_total",
          "Multi-modal cache queries, in terms of number of queried items.");
  counter(&EngineMetrics::mm_cache_hits, "vllm:mm_cache_hits_total",
          "Multi-modal cache hits, in terms of number of cached items.");
  counter(&EngineMetrics::num_preemptions, "vllm:num_preemptions_total",
          "Cumulative number of preemption from the engine.");
  counter(&EngineMetrics::prompt_tokens, "vllm:prompt_tokens_total",
          "Number of prefill tokens processed.");
  labelled(&EngineMetrics::prompt_tokens_by_source, false, "vllm:prompt_tokens_by_source_total",
           "Number of prompt tokens by source.", "source",
           {"local_compute", "local_cache_hit", "external_kv_transfer"});
  counter(&EngineMetrics::prompt_tokens_cached, "vllm:prompt_tokens_cached_total",
          "Number of cached prompt tokens (local + external).");
  labelled(&EngineMetrics::prompt_tokens_cached_by_source, false,
           "vllm:prompt_tokens_cached_by_source_total",
           "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
           "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
           "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
           "vllm:external_prefix_cache_hits.",
           "source", {"device", "host", "p2p", "disk", "external_unspecified"});
  counter(&EngineMetrics::generation_tokens, "vllm:generation_tokens_total",
          "Number of generation tokens processed.");
  labelled(&EngineMetrics::request_success, false, "vllm:request_success_total",
           "Count of successfully processed requests.", "finished_reason",
           {"stop", "length", "abort", "error", "repetition"});
}

void ServerMetrics::AddRequestHistograms(MetricsRegistry* r, const LabelsFn& labels,
                                         const std::string& model_name, int32_t max_model_len) {
  for (const char* reason : {"max_num_queued_reqs", "max_num_queued_tokens"}) {
    // We have no admission queue limits (vLLM's --max-num-queued-*): never counted.
    r->AddCounter("vllm:admission_rejections_total",
                  "Number of admission attempts rejected by a queue limit, by reason.",
                  {{"model_name", model_name}, {"reason", reason}});
  }
  const int32_t n = static_cast<int32_t>(engines_.size());
  auto hist = [&](Metric* EngineMetrics::*field, const char* name, const char* help,
                  const std::vector<double>& buckets) {
    for (int32_t e = 0; e < n; ++e) {
      engines_[e].*field = r->AddHistogram(name, help, labels(e), buckets);
    }
  };
  const std::vector<double> tokens = OneTwoFiveBuckets(max_model_len);
  hist(&EngineMetrics::request_prompt_tokens, "vllm:request_prompt_tokens",
       "Number of prefill tokens processed.", tokens);
  hist(&EngineMetrics::request_generation_tokens, "vllm:request_generation_tokens",
       "Number of generation tokens processed.", tokens);
  hist(&EngineMetrics::iteration_tokens, "vllm:iteration_tokens_total",
       "Histogram of number of tokens per engine_step.",
       std::vector<double>(kIterationTokensBuckets.begin(), kIterationTokensBuckets.end()));
  hist(&EngineMetrics::request_max_num_generation_tokens, "vllm:request_max_num_generation_tokens",
       "Histogram of maximum number of requested generation tokens.", tokens);
  hist(&EngineMetrics::request_params_n, "vllm:request_params_n",
       "Histogram of the n request parameter.", {1, 2, 5, 10, 20});
  hist(&EngineMetrics::request_params_max_tokens, "vllm:request_params_max_tokens",
       "Histogram of the max_tokens request parameter.", tokens);
  hist(&EngineMetrics::time_to_first_token, "vllm:time_to_first_token_seconds",
       "Histogram of time to first token in seconds.", TimeToFirstTokenBuckets());
  hist(&EngineMetrics::inter_token_latency, "vllm:inter_token_latency_seconds",
       "Histogram of inter-token latency in seconds.", InterTokenLatencyBuckets());
  hist(&EngineMetrics::request_time_per_output_token, "vllm:request_time_per_output_token_seconds",
       "Histogram of time_per_output_token_seconds per request.", InterTokenLatencyBuckets());
  hist(&EngineMetrics::e2e_request_latency, "vllm:e2e_request_latency_seconds",
       "Histogram of e2e request latency in seconds.", RequestLatencyBuckets());
  hist(&EngineMetrics::request_queue_time, "vllm:request_queue_time_seconds",
       "Histogram of time spent in WAITING phase for request.", RequestLatencyBuckets());
  hist(&EngineMetrics::request_inference_time, "vllm:request_inference_time_seconds",
       "Histogram of time spent in RUNNING phase for request.", RequestLatencyBuckets());
  hist(&EngineMetrics::request_prefill_time, "vllm:request_prefill_time_seconds",
       "Histogram of time spent in PREFILL phase for request.", RequestLatencyBuckets());
  hist(&EngineMetrics::request_decode_time, "vllm:request_decode_time_seconds",
       "Histogram of time spent in DECODE phase for request.", RequestLatencyBuckets());
  hist(&EngineMetrics::request_num_preemptions, "vllm:request_num_preemptions",
       "Histogram of the number of times a request was preempted.", {1, 2, 3, 4, 5, 10, 20});
  hist(&EngineMetrics::request_prefill_kv_computed_tokens,
       "vllm:request_prefill_kv_computed_tokens",
       "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens);
}

void ServerMetrics::AddStructuredOutputMetrics(MetricsRegistry* r, const LabelsFn& labels) {
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

void ServerMetrics::AddSpecDecodingMetrics(MetricsRegistry* r, const LabelsFn& labels,
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

const EngineMetrics& ServerMetrics::engine(int32_t index) const {
  return engines_[std::clamp<int32_t>(index, 0, static_cast<int32_t>(engines_.size()) - 1)];
}

}  // namespace vllm::frontend
