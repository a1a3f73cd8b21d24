// LLMEngine: the in-process engine (vLLM's vllm/v1/engine/llm_engine.py with the offline
// `LLM` class's generate loop): one EngineCore stepped in the caller's thread, built by
// executor::BuildEngineCore with the executor the config picks (UniProcExecutor, the worker
// in this process; or MultiprocExecutor, vllm-launch worker processes, e.g. for tensor
// parallelism). Add requests, step until done, collect each request's tokens. Token ids in
// and out: text (tokenizer, chat template, detokenizer) is AsyncLLM's (async_llm.h). The
// reference tests and the CPU benchmarks use it.
//
// Thread-safety: none; use from one thread.
#ifndef VLLM_FRONTEND_ENGINE_LLM_ENGINE_H_
#define VLLM_FRONTEND_ENGINE_LLM_ENGINE_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/engine_args.h"
#include "core/engine_core.h"
#include "executor/engine_factory.h"
#include "kv_transfer/types.h"
#include "spec_decode/stats.h"

namespace vllm::frontend {

// A request's result so far (vLLM's RequestOutput with token ids only).
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  std::vector<core::TokenLogprobs> logprobs;
  // prompt_logprobs: positions 1 .. P-1 (position 0 has none), from the first output on.
  std::vector<core::TokenLogprobs> prompt_logprobs;
  std::optional<core::FinishReason> finish_reason;
  std::optional<int32_t> stop_reason;
  int32_t num_cached_tokens = 0;
  int32_t num_cache_creation_tokens = 0;
  // The KV connector's kv_transfer_params from the finishing output (vLLM's
  // RequestOutput.kv_transfer_params), when it gave any.
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
  bool finished() const { return finish_reason.has_value(); }
};

class LLMEngine {
 public:
  // Loads the model and sizes the KV cache (args.CreateEngineConfig(), then
  // executor::BuildEngineCore). Errors name the flag, file or tensor at fault.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LLMEngine>> Create(
      const config::EngineArgs& args);

  // Queues a request; the model's EOS is filled in when the request has none.
  // InvalidArgument for a bad request, AlreadyExists for a duplicate id.
  [[nodiscard]] absl::Status AddRequest(core::EngineCoreRequest request);
  void AbortRequests(const std::vector<std::string>& request_ids);

  // One engine step; returns the requests that progressed (finished ones last time they
  // appear). An error (e.g. a worker died) means the engine is unusable: every pending request
  // is lost with it, and every later call returns the same error.
  [[nodiscard]] absl::StatusOr<std::vector<RequestOutput>> Step();
  bool HasUnfinishedRequests() const;

  // Adds `requests`, steps until all of them finish and returns their outputs in the same
  // order.
  [[nodiscard]] absl::StatusOr<std::vector<RequestOutput>> Generate(
      std::vector<core::EngineCoreRequest> requests);

  // Totals over the engine's life, from the scheduler stats of every step.
  struct Totals {
    int64_t num_preemptions = 0;
    int64_t prefix_cache_queries = 0;
    int64_t prefix_cache_hits = 0;
    // Tokens the KV connector was asked for and loaded (vLLM's external prefix cache).
    int64_t connector_prefix_cache_queries = 0;
    int64_t connector_prefix_cache_hits = 0;
    int64_t num_steps = 0;
    structured_output::StructuredOutputStats structured_output;
    spec_decode::SpecDecodingStats spec_decoding;
  };
  const Totals& totals() const { return totals_; }

  // The model's Hugging Face config and the engine's config as resolved.
  const worker::HfConfig& model_config() const { return built_.model_config; }
  const config::VllmConfig& vllm_config() const { return built_.config; }
  core::EngineCore& engine_core() { return *built_.core; }
  int32_t max_model_len() const { return built_.config.model.max_model_len; }
  // Bytes of model weights the in-process worker holds (0 with worker processes).
  int64_t weight_bytes() const { return built_.weight_bytes; }

 private:
  explicit LLMEngine(executor::BuiltEngine built) : built_(std::move(built)) {}

  executor::BuiltEngine built_;
  absl::flat_hash_map<std::string, RequestOutput> outputs_;
  Totals totals_;
  absl::Status failed_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_LLM_ENGINE_H_
