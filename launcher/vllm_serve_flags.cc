// vLLM 0.33's `vllm serve` flags (names, aliases, kinds, groups only), generated from
// tests/fixtures/vllm_0_33/serve_flags.tsv (itself listed from vllm/engine/arg_utils.py and
// vllm/entrypoints/common/cli_args.py by tests/fixtures/vllm_0_33/extract_serve_flags.py), and
// why vllm-launch refuses the ones it does not implement.
#include "launcher/vllm_serve_flags.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vllm::launcher {
namespace {

constexpr VllmServeFlag kFlags[] = {
    {"--headless", "", VllmFlagKind::kBool, "options"},
    {"--api-server-count", "-asc", VllmFlagKind::kValue, "options"},
    {"--config", "", VllmFlagKind::kValue, "options"},
    {"--grpc", "", VllmFlagKind::kBool, "options"},
    {"--lora-modules", "", VllmFlagKind::kList, "Frontend"},
    {"--chat-template", "", VllmFlagKind::kValue, "Frontend"},
    {"--chat-template-content-format", "", VllmFlagKind::kValue, "Frontend"},
    {"--trust-request-chat-template", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--trust-request-mm-kwargs", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--default-chat-template-kwargs", "", VllmFlagKind::kValue, "Frontend"},
    {"--reasoning-effort-map", "", VllmFlagKind::kValue, "Frontend"},
    {"--response-role", "", VllmFlagKind::kValue, "Frontend"},
    {"--return-tokens-as-token-ids", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-auto-tool-choice", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--exclude-tools-when-tool-choice-none", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--tool-call-parser", "", VllmFlagKind::kValue, "Frontend"},
    {"--tool-parser-plugin", "", VllmFlagKind::kValue, "Frontend"},
    {"--tool-strict-level", "", VllmFlagKind::kValue, "Frontend"},
    {"--tool-server", "", VllmFlagKind::kValue, "Frontend"},
    {"--max-log-len", "", VllmFlagKind::kValue, "Frontend"},
    {"--enable-prompt-tokens-details", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-per-request-metrics", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-server-load-tracking", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-force-include-usage", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--sse-keep-alive-interval", "", VllmFlagKind::kValue, "Frontend"},
    {"--enable-tokenizer-info-endpoint", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-log-outputs", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-log-deltas", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--cohere-is-reasoning-model", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--cohere-format", "", VllmFlagKind::kValue, "Frontend"},
    {"--anthropic-disabled-thinking-effort", "", VllmFlagKind::kValue, "Frontend"},
    {"--log-error-stack", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--tokens-only", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-scale-out", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--fingerprint-mode", "", VllmFlagKind::kValue, "Frontend"},
    {"--fingerprint-value", "", VllmFlagKind::kValue, "Frontend"},
    {"--host", "", VllmFlagKind::kValue, "Frontend"},
    {"--port", "", VllmFlagKind::kValue, "Frontend"},
    {"--grpc-port", "", VllmFlagKind::kValue, "Frontend"},
    {"--data-parallel-supervisor-port", "", VllmFlagKind::kValue, "Frontend"},
    {"--dp-supervisor-probe-interval-s", "", VllmFlagKind::kValue, "Frontend"},
    {"--dp-supervisor-probe-timeout-s", "", VllmFlagKind::kValue, "Frontend"},
    {"--dp-supervisor-probe-failure-threshold", "", VllmFlagKind::kValue, "Frontend"},
    {"--uds", "", VllmFlagKind::kValue, "Frontend"},
    {"--uvicorn-log-level", "", VllmFlagKind::kValue, "Frontend"},
    {"--disable-uvicorn-access-log", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--disable-access-log-for-endpoints", "", VllmFlagKind::kValue, "Frontend"},
    {"--allow-credentials", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--allowed-origins", "", VllmFlagKind::kValue, "Frontend"},
    {"--allowed-methods", "", VllmFlagKind::kValue, "Frontend"},
    {"--allowed-headers", "", VllmFlagKind::kValue, "Frontend"},
    {"--api-key", "", VllmFlagKind::kList, "Frontend"},
    {"--ssl-keyfile", "", VllmFlagKind::kValue, "Frontend"},
    {"--ssl-certfile", "", VllmFlagKind::kValue, "Frontend"},
    {"--ssl-ca-certs", "", VllmFlagKind::kValue, "Frontend"},
    {"--enable-ssl-refresh", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--ssl-cert-reqs", "", VllmFlagKind::kValue, "Frontend"},
    {"--ssl-ciphers", "", VllmFlagKind::kValue, "Frontend"},
    {"--root-path", "", VllmFlagKind::kValue, "Frontend"},
    {"--middleware", "", VllmFlagKind::kList, "Frontend"},
    {"--enable-request-id-headers", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--disable-fastapi-docs", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--h11-max-incomplete-event-size", "", VllmFlagKind::kValue, "Frontend"},
    {"--h11-max-header-count", "", VllmFlagKind::kValue, "Frontend"},
    {"--enable-offline-docs", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--enable-flash-late-interaction", "", VllmFlagKind::kNegatable, "Frontend"},
    {"--runner", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--convert", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--tokenizer", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--tokenizer-mode", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--trust-remote-code", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--dtype", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--seed", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--hf-config-path", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--allowed-local-media-path", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--allowed-media-domains", "", VllmFlagKind::kList, "ModelConfig"},
    {"--revision", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--code-revision", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--tokenizer-revision", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--max-model-len", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--quantization", "-q", VllmFlagKind::kValue, "ModelConfig"},
    {"--quantization-config", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--allow-deprecated-quantization", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--enforce-eager", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--enable-return-routed-experts", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--return-sampling-mask", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--max-logprobs", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--logprobs-mode", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--use-fp64-gumbel", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--enable-trace-replay", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--disable-sliding-window", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--disable-cascade-attn", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--skip-tokenizer-init", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--enable-prompt-embeds", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--served-model-name", "", VllmFlagKind::kList, "ModelConfig"},
    {"--config-format", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--hf-token", "", VllmFlagKind::kOptional, "ModelConfig"},
    {"--hf-overrides", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--model-class-overrides", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--pooler-config", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--generation-config", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--override-generation-config", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--enable-sleep-mode", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--sleep-mode-backend", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--sleep-mode-offload-cudagraph", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--sleep-preserve-parameter-names", "", VllmFlagKind::kList, "ModelConfig"},
    {"--enable-cumem-allocator", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--enable-nccl-comm-suspend", "", VllmFlagKind::kNegatable, "ModelConfig"},
    {"--model-impl", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--logits-processors", "", VllmFlagKind::kList, "ModelConfig"},
    {"--io-processor-plugin", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--renderer-num-workers", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--load-format", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--download-dir", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--safetensors-load-strategy", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--safetensors-prefetch-num-threads", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--safetensors-prefetch-block-size", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--model-loader-extra-config", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--ignore-patterns", "", VllmFlagKind::kList, "LoadConfig"},
    {"--use-tqdm-on-load", "", VllmFlagKind::kNegatable, "LoadConfig"},
    {"--pt-load-map-location", "", VllmFlagKind::kValue, "LoadConfig"},
    {"--attention-backend", "", VllmFlagKind::kValue, "AttentionConfig"},
    {"--mamba-backend", "", VllmFlagKind::kValue, "MambaConfig"},
    {"--mamba-ssu-algorithm", "", VllmFlagKind::kValue, "MambaConfig"},
    {"--enable-mamba-cache-stochastic-rounding", "", VllmFlagKind::kNegatable, "MambaConfig"},
    {"--mamba-cache-philox-rounds", "", VllmFlagKind::kValue, "MambaConfig"},
    {"--reasoning-parser", "", VllmFlagKind::kValue, "StructuredOutputsConfig"},
    {"--reasoning-parser-plugin", "", VllmFlagKind::kValue, "StructuredOutputsConfig"},
    {"--distributed-executor-backend", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--pipeline-parallel-size", "-pp", VllmFlagKind::kValue, "ParallelConfig"},
    {"--master-addr", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--master-port", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--nnodes", "-n", VllmFlagKind::kValue, "ParallelConfig"},
    {"--node-rank", "-r", VllmFlagKind::kValue, "ParallelConfig"},
    {"--distributed-timeout-seconds", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--cpu-distributed-timeout-seconds", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--numa-bind", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--numa-bind-nodes", "", VllmFlagKind::kList, "ParallelConfig"},
    {"--numa-bind-cpus", "", VllmFlagKind::kList, "ParallelConfig"},
    {"--device-ids", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--tensor-parallel-size", "-tp", VllmFlagKind::kValue, "ParallelConfig"},
    {"--decode-context-parallel-size", "-dcp", VllmFlagKind::kValue, "ParallelConfig"},
    {"--dcp-comm-backend", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--dcp-q-replicate", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--dcp-kv-cache-interleave-size", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--cp-kv-cache-interleave-size", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--prefill-context-parallel-size", "-pcp", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-size", "-dp", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-rank", "-dpn", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-start-rank", "-dpr", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-size-local", "-dpl", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-address", "-dpa", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-rpc-port", "-dpp", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-backend", "-dpb", VllmFlagKind::kValue, "ParallelConfig"},
    {"--data-parallel-hybrid-lb", "-dph", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--data-parallel-external-lb", "-dpe", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--data-parallel-multi-port-external-lb", "-dpm", VllmFlagKind::kBool, "ParallelConfig"},
    {"--enable-hc-sp", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--enable-expert-parallel", "-ep", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--enable-batch-sharded-sampling", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--enable-ep-weight-filter", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--all2all-backend", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--enable-dbo", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--enable-shm-tensor-arena", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--ubatch-size", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--enable-elastic-ep", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--elastic-ep-max-dp-size", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--dbo-decode-token-threshold", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--dp-sync-interval", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--dbo-prefill-token-threshold", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--disable-nccl-for-dp-synchronization", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--enable-eplb", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--eplb-config", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--expert-placement-strategy", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--max-parallel-loading-workers", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--ray-workers-use-nsight", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--disable-custom-all-reduce", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--worker-cls", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--worker-extension-cls", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--enable-fault-tolerance", "", VllmFlagKind::kNegatable, "ParallelConfig"},
    {"--fault-tolerance-config", "", VllmFlagKind::kValue, "ParallelConfig"},
    {"--block-size", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--gpu-memory-utilization", "--device-memory-utilization", VllmFlagKind::kValue,
     "CacheConfig"},
    {"--kv-cache-memory-bytes", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--kv-cache-dtype", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--num-gpu-blocks-override", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--enable-prefix-caching", "", VllmFlagKind::kNegatable, "CacheConfig"},
    {"--prefix-caching-hash-algo", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--prefix-cache-retention-interval", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--kv-cache-dtype-skip-layers", "", VllmFlagKind::kList, "CacheConfig"},
    {"--kv-sharing-fast-prefill", "", VllmFlagKind::kNegatable, "CacheConfig"},
    {"--swa-bounded-replay", "", VllmFlagKind::kNegatable, "CacheConfig"},
    {"--mamba-cache-dtype", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--mamba-ssm-cache-dtype", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--mamba-block-size", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--prefix-match-unit", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--mamba-cache-mode", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--enable-mamba-shared-prefix-checkpoint", "", VllmFlagKind::kNegatable, "CacheConfig"},
    {"--replayssm-buffer-len", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--use-replayssm", "", VllmFlagKind::kNegatable, "CacheConfig"},
    {"--kv-offloading-size", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--kv-offloading-backend", "", VllmFlagKind::kValue, "CacheConfig"},
    {"--offload-backend", "", VllmFlagKind::kValue, "OffloadConfig"},
    {"--cpu-offload-gb", "", VllmFlagKind::kValue, "OffloadConfig"},
    {"--cpu-offload-params", "", VllmFlagKind::kList, "OffloadConfig"},
    {"--offload-group-size", "", VllmFlagKind::kValue, "OffloadConfig"},
    {"--offload-num-in-group", "", VllmFlagKind::kValue, "OffloadConfig"},
    {"--offload-prefetch-step", "", VllmFlagKind::kValue, "OffloadConfig"},
    {"--offload-params", "", VllmFlagKind::kList, "OffloadConfig"},
    {"--language-model-only", "", VllmFlagKind::kNegatable, "MultiModalConfig"},
    {"--limit-mm-per-prompt", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--enable-mm-embeds", "", VllmFlagKind::kNegatable, "MultiModalConfig"},
    {"--media-io-kwargs", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-processor-kwargs", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-processor-cache-gb", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-processor-cache-type", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-hasher-algorithm", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-shm-cache-max-object-size-mb", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-encoder-only", "", VllmFlagKind::kNegatable, "MultiModalConfig"},
    {"--mm-encoder-tp-mode", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-encoder-attn-backend", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-encoder-attn-dtype", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-encoder-fp8-scale-path", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-encoder-fp8-scale-save-path", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-encoder-fp8-scale-save-margin", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--interleave-mm-strings", "", VllmFlagKind::kNegatable, "MultiModalConfig"},
    {"--skip-mm-profiling", "", VllmFlagKind::kNegatable, "MultiModalConfig"},
    {"--video-pruning-rate", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--video-pruning-method", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-tensor-ipc", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-processor-device", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-ipc-gpu-memory-gb", "", VllmFlagKind::kValue, "MultiModalConfig"},
    {"--mm-device-do-normalize", "", VllmFlagKind::kNegatable, "MultiModalConfig"},
    {"--enable-lora", "", VllmFlagKind::kNegatable, "LoRAConfig"},
    {"--max-loras", "", VllmFlagKind::kValue, "LoRAConfig"},
    {"--max-lora-rank", "", VllmFlagKind::kValue, "LoRAConfig"},
    {"--lora-dtype", "", VllmFlagKind::kValue, "LoRAConfig"},
    {"--enable-tower-connector-lora", "", VllmFlagKind::kNegatable, "LoRAConfig"},
    {"--max-cpu-loras", "", VllmFlagKind::kValue, "LoRAConfig"},
    {"--fully-sharded-loras", "", VllmFlagKind::kNegatable, "LoRAConfig"},
    {"--lora-target-modules", "", VllmFlagKind::kList, "LoRAConfig"},
    {"--default-mm-loras", "", VllmFlagKind::kValue, "LoRAConfig"},
    {"--specialize-active-lora", "", VllmFlagKind::kNegatable, "LoRAConfig"},
    {"--enable-mixed-moe-lora-format", "", VllmFlagKind::kNegatable, "LoRAConfig"},
    {"--enable-moe-shared-loras", "", VllmFlagKind::kNegatable, "LoRAConfig"},
    {"--max-lora-cls-labels", "", VllmFlagKind::kValue, "LoRAConfig"},
    {"--logging-config", "", VllmFlagKind::kValue, "LoggingConfig"},
    {"--log-level", "", VllmFlagKind::kValue, "LoggingConfig"},
    {"--log-config-file", "", VllmFlagKind::kValue, "LoggingConfig"},
    {"--show-hidden-metrics-for-version", "", VllmFlagKind::kValue, "ObservabilityConfig"},
    {"--otlp-traces-endpoint", "", VllmFlagKind::kValue, "ObservabilityConfig"},
    {"--collect-detailed-traces", "", VllmFlagKind::kList, "ObservabilityConfig"},
    {"--per-request-spec-decode-metrics", "", VllmFlagKind::kValue, "ObservabilityConfig"},
    {"--kv-cache-metrics", "", VllmFlagKind::kNegatable, "ObservabilityConfig"},
    {"--kv-cache-metrics-sample", "", VllmFlagKind::kValue, "ObservabilityConfig"},
    {"--custom-histogram-buckets", "", VllmFlagKind::kList, "ObservabilityConfig"},
    {"--cudagraph-metrics", "", VllmFlagKind::kNegatable, "ObservabilityConfig"},
    {"--enable-layerwise-nvtx-tracing", "", VllmFlagKind::kNegatable, "ObservabilityConfig"},
    {"--enable-mfu-metrics", "", VllmFlagKind::kNegatable, "ObservabilityConfig"},
    {"--enable-logging-iteration-details", "", VllmFlagKind::kNegatable, "ObservabilityConfig"},
    {"--jit-monitor-mode", "", VllmFlagKind::kValue, "ObservabilityConfig"},
    {"--jit-monitor-verbose", "", VllmFlagKind::kNegatable, "ObservabilityConfig"},
    {"--max-num-batched-tokens", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--max-num-scheduled-tokens", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--max-num-seqs", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--max-num-active-seqs", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--max-num-queued-reqs", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--max-num-queued-tokens", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--long-prefill-token-threshold", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--long-prefill-token-threshold-adaptive", "", VllmFlagKind::kNegatable, "SchedulerConfig"},
    {"--scheduling-policy", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--enable-chunked-prefill", "", VllmFlagKind::kNegatable, "SchedulerConfig"},
    {"--disable-chunked-mm-input", "", VllmFlagKind::kNegatable, "SchedulerConfig"},
    {"--scheduler-cls", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--scheduler-reserve-full-isl", "", VllmFlagKind::kNegatable, "SchedulerConfig"},
    {"--watermark", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--prefill-schedule-interval", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--disable-hybrid-kv-cache-manager", "", VllmFlagKind::kNegatable, "SchedulerConfig"},
    {"--async-scheduling", "", VllmFlagKind::kNegatable, "SchedulerConfig"},
    {"--stream-interval", "", VllmFlagKind::kValue, "SchedulerConfig"},
    {"--cudagraph-capture-sizes", "", VllmFlagKind::kList, "CompilationConfig"},
    {"--max-cudagraph-capture-size", "", VllmFlagKind::kValue, "CompilationConfig"},
    {"--ir-op-priority", "", VllmFlagKind::kValue, "KernelConfig"},
    {"--enable-flashinfer-autotune", "", VllmFlagKind::kNegatable, "KernelConfig"},
    {"--monokernel", "", VllmFlagKind::kNegatable, "KernelConfig"},
    {"--moe-backend", "", VllmFlagKind::kValue, "KernelConfig"},
    {"--linear-backend", "", VllmFlagKind::kValue, "KernelConfig"},
    {"--sparse-indexer-topk-backend", "", VllmFlagKind::kValue, "KernelConfig"},
    {"--speculative-config", "-sc", VllmFlagKind::kValue, "VllmConfig"},
    {"--spec-method", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--spec-model", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--spec-tokens", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--watermark-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--diffusion-config", "-dc", VllmFlagKind::kValue, "VllmConfig"},
    {"--kv-transfer-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--kv-events-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--ec-transfer-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--ec-manager-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--compilation-config", "-cc", VllmFlagKind::kValue, "VllmConfig"},
    {"--attention-config", "-ac", VllmFlagKind::kValue, "VllmConfig"},
    {"--engram-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--reasoning-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--kernel-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--additional-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--structured-outputs-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--aux-output-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--profiler-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--watchdog-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--optimization-level", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--performance-mode", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--weight-transfer-config", "", VllmFlagKind::kValue, "VllmConfig"},
    {"--disable-log-stats", "", VllmFlagKind::kBool, "options"},
    {"--aggregate-engine-logging", "", VllmFlagKind::kBool, "options"},
    {"--fail-on-environ-validation", "", VllmFlagKind::kNegatable, "options"},
    {"--shutdown-timeout", "", VllmFlagKind::kValue, "options"},
    {"--gdn-prefill-backend", "", VllmFlagKind::kValue, "options"},
    {"--kda-prefill-backend", "", VllmFlagKind::kValue, "options"},
    {"--kda-decode-backend", "", VllmFlagKind::kValue, "options"},
    {"--model", "", VllmFlagKind::kValue, "ModelConfig"},
    {"--enable-log-requests", "", VllmFlagKind::kNegatable, "options"},
};

}  // namespace

std::span<const VllmServeFlag> VllmServeFlags() { return kFlags; }

const VllmServeFlag* FindVllmServeFlag(std::string_view name) {
  for (const VllmServeFlag& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string VllmFlagRefusalReason(const VllmServeFlag& flag) {
  // Specific reasons first (a flag's name), then a reason for its group.
  static constexpr std::pair<std::string_view, std::string_view> kByName[] = {
      {"--ssl-keyfile", "TLS is not served: put a TLS-terminating proxy in front"},
      {"--ssl-certfile", "TLS is not served: put a TLS-terminating proxy in front"},
      {"--ssl-ca-certs", "TLS is not served: put a TLS-terminating proxy in front"},
      {"--ssl-cert-reqs", "TLS is not served: put a TLS-terminating proxy in front"},
      {"--ssl-ciphers", "TLS is not served: put a TLS-terminating proxy in front"},
      {"--enable-ssl-refresh", "TLS is not served: put a TLS-terminating proxy in front"},
      {"--quantization", "quantized checkpoints are not supported"},
      {"--trust-remote-code", "models with custom Python code are not run (C++ runtime)"},
      {"--grpc", "the gRPC server is not implemented"},
      {"--grpc-port", "the gRPC server is not implemented"},
      {"--kv-cache-dtype", "the KV cache keeps the model's dtype"},
  };
  for (const auto& [name, reason] : kByName) {
    if (flag.name == name) return std::string(reason);
  }
  const std::string_view n = flag.name;  // std::string_view (not absl's, on this Abseil)
  if ((n.find("lora") != std::string_view::npos)) return "LoRA adapters are not supported";
  if (flag.group == "MultiModalConfig" || (n.find("-mm-") != std::string_view::npos) ||
      (n.find("media") != std::string_view::npos)) {
    return "multimodal inputs are not supported (text-only models)";
  }
  if ((n.find("expert") != std::string_view::npos) || (n.find("eplb") != std::string_view::npos) ||
      (n.find("-ep-") != std::string_view::npos)) {
    return "expert parallelism (MoE) is not supported";
  }
  static constexpr std::pair<std::string_view, std::string_view> kByGroup[] = {
      {"CompilationConfig", "there is no torch.compile (C++ runtime)"},
      {"ObservabilityConfig", "tracing and detailed observability options are not implemented"},
      {"LoRAConfig", "LoRA adapters are not supported"},
      {"ParallelConfig", "this parallelism option is not implemented"},
      {"CacheConfig", "this KV-cache option is not implemented"},
      {"SchedulerConfig", "this scheduler option is not implemented"},
      {"ModelConfig", "this model option is not implemented"},
      {"LoadConfig", "weights load from a local directory of safetensors only"},
      {"Frontend", "this server option is not implemented"},
  };
  for (const auto& [group, reason] : kByGroup) {
    if (flag.group == group) return std::string(reason);
  }
  return absl::StrCat("this ", std::string(flag.group), " option is not implemented");
}

namespace {

// Our own multi-letter aliases that vLLM does not have (vLLM's come from the table).
constexpr std::pair<std::string_view, std::string_view> kOwnAliases[] = {
    {"-asc", "--api-server-count"},
};

// `arg` with an alias (`-tp`, `-tp=2`) replaced by its long name.
std::string ExpandAlias(const std::string& arg) {
  auto expand = [&arg](std::string_view alias,
                       std::string_view name) -> std::optional<std::string> {
    if (arg == alias) return std::string(name);
    if (arg.rfind(std::string(alias) + "=", 0) == 0) {
      return std::string(name) + arg.substr(alias.size());
    }
    return std::nullopt;
  };
  for (const auto& [alias, name] : kOwnAliases) {
    if (auto out = expand(alias, name)) return *out;
  }
  for (const VllmServeFlag& f : kFlags) {
    if (f.aliases.empty()) continue;
    const std::vector<std::string> aliases = absl::StrSplit(std::string(f.aliases), ',');
    for (const std::string& alias : aliases) {
      if (auto out = expand(alias, f.name)) return *out;
    }
  }
  return arg;
}

absl::Status Refuse(std::string_view given, const VllmServeFlag& f) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(given),
                   ": vLLM's flag is not supported by vllm-launch: ", VllmFlagRefusalReason(f)));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> NormalizeVllmSpellings(
    const std::vector<std::string>& argv, const std::function<bool(const std::string&)>& known) {
  std::vector<std::string> out;
  bool rest = false;
  for (const std::string& given : argv) {
    if (rest || given == "--") {
      rest = true;
      out.push_back(given);
      continue;
    }
    std::string arg = ExpandAlias(given);
    if (absl::StartsWith(arg, "--")) {  // vLLM takes --max_model_len for --max-model-len
      const size_t end = std::min(arg.find('='), arg.size());
      std::replace(arg.begin(), arg.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
    }
    if (!absl::StartsWith(arg, "--")) {
      out.push_back(std::move(arg));
      continue;
    }
    const std::string name = arg.substr(0, arg.find('='));
    if (known(name)) {
      out.push_back(std::move(arg));
      continue;
    }
    if (absl::StartsWith(name, "--no-")) {
      const std::string base = absl::StrCat("--", name.substr(5));
      const VllmServeFlag* f = FindVllmServeFlag(base);
      if (f != nullptr && f->kind == VllmFlagKind::kNegatable) {
        if (!known(base)) return Refuse(name, *f);
        if (name != arg) {
          return absl::InvalidArgumentError(absl::StrCat(name, ": takes no value"));
        }
        out.push_back(absl::StrCat(base, "=false"));
        continue;
      }
    }
    if (const VllmServeFlag* f = FindVllmServeFlag(name)) return Refuse(name, *f);
    out.push_back(std::move(arg));  // not vLLM's either: the parser names it as unknown
  }
  return out;
}

std::string FilteredHelp(std::string_view keyword, const std::vector<HelpEntry>& ours,
                         const std::string& full_help) {
  std::string key = absl::AsciiStrToLower(std::string(keyword));
  std::replace(key.begin(), key.end(), '_', '-');
  if (key == "all") return full_help;
  bool is_group = false;
  for (const HelpEntry& e : ours) is_group |= absl::AsciiStrToLower(e.group) == key;
  for (const VllmServeFlag& f : kFlags) {
    is_group |= absl::AsciiStrToLower(std::string(f.group)) == key;
  }
  auto matches = [&](const std::string& names, const std::string& group) {
    return is_group ? absl::AsciiStrToLower(group) == key
                    : absl::StrContains(absl::AsciiStrToLower(names), key);
  };
  std::string ours_text, refused_text;
  for (const HelpEntry& e : ours) {
    if (!matches(e.names, e.group)) continue;
    absl::StrAppend(&ours_text, "  ", e.names, "\n      ", e.description, "\n");
  }
  for (const VllmServeFlag& f : kFlags) {
    const std::string name(f.name);
    if (!matches(name, std::string(f.group))) continue;
    bool supported = false;
    for (const HelpEntry& e : ours) {
      const std::vector<std::string> names = absl::StrSplit(e.names, ',');
      for (const std::string& n : names) supported |= n == name;
    }
    if (name == "--config") supported = true;  // read before parsing (serve_config_file.h)
    if (!supported)
      absl::StrAppend(&refused_text, "  ", name, ": ", VllmFlagRefusalReason(f), "\n");
  }
  const std::string what = is_group ? key : absl::StrCat("arguments matching '", key, "'");
  if (ours_text.empty() && refused_text.empty()) {
    return absl::StrCat("No group or arguments matching '", key,
                        "'.\nUse '--help' to see available groups or '--help=all' to see all "
                        "available parameters.\n");
  }
  std::string out = absl::StrCat(what, ":\n", ours_text);
  if (!refused_text.empty()) {
    absl::StrAppend(&out, "\nvLLM 0.33 flags of ", what, " that vllm-launch refuses:\n",
                    refused_text);
  }
  return out;
}

absl::StatusOr<int64_t> ParseHumanReadableInt(std::string_view flag, std::string_view text,
                                              bool allow_auto) {
  const std::string v(absl::StripAsciiWhitespace(std::string(text)));
  if (allow_auto && (v == "-1" || absl::AsciiStrToLower(v) == "auto")) return -1;
  auto bad = [&]() {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(flag), ": '", std::string(text.substr(0, 64)),
                     "' is not an integer (examples: 2048, 1k = 1000, 1K = 1024",
                     allow_auto ? ", auto or -1 for the model's" : "", ")"));
  };
  int64_t plain = 0;
  if (absl::SimpleAtoi(v, &plain)) return plain;
  if (v.size() < 2) return bad();
  const char suffix = v.back();
  const std::string number = v.substr(0, v.size() - 1);
  // The number is digits with at most one decimal point (vLLM's \d+(?:\.\d+)?).
  const size_t dot = number.find('.');
  const bool digits = !number.empty() && number.front() != '.' && number.back() != '.' &&
                      number.find_first_not_of("0123456789.") == std::string::npos &&
                      (dot == std::string::npos || number.find('.', dot + 1) == std::string::npos);
  if (!digits) return bad();
  static constexpr std::pair<char, double> kDecimal[] = {
      {'k', 1e3}, {'m', 1e6}, {'g', 1e9}, {'t', 1e12}};
  static constexpr std::pair<char, int> kBinaryShift[] = {
      {'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}};
  for (const auto& [s, mult] : kDecimal) {
    if (suffix != s) continue;
    double d = 0;
    if (!absl::SimpleAtod(number, &d) || !(d * mult < 9e18)) return bad();
    return static_cast<int64_t>(d * mult);  // vLLM: int(float(number) * mult)
  }
  for (const auto& [s, shift] : kBinaryShift) {
    if (suffix != s) continue;
    int64_t n = 0;
    if (dot != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(flag), ": decimals are not allowed with binary suffixes like ",
                       std::string(1, s), "; did you mean ", number,
                       std::string(1, absl::ascii_tolower(s)), "?"));
    }
    if (!absl::SimpleAtoi(number, &n) || n > (int64_t{1} << (62 - shift))) return bad();
    return n << shift;
  }
  return bad();
}

}  // namespace vllm::launcher
