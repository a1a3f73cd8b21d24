// AsyncLLM: the EngineClient the API server talks to (vLLM's vllm/v1/engine/async_llm.py with
// its Processor and OutputProcessor): tokenizes prompts, applies the chat template, sends
// requests to the engine core through an EngineCoreClient, and turns its token outputs into
// text deltas (incremental detokenization, stop strings) for each request's callback.
//
// Threads: callers (server threads) call Generate/Abort concurrently; one internal thread
// ("vllm-output") takes EngineCoreOutputs off the client and runs the callbacks. A request
// that hits a stop string is finished here and aborted in the engine. With several
// (data-parallel) engines, each request goes to the engine the client picks
// (EngineCoreClient::PickEngine); when an engine fails, the callbacks of its pending requests
// get the error (naming it) and the other engines go on; Health() fails once every engine
// has. An engine output
// that cannot be decoded is never dropped silently: the requests it concerned (every request
// in flight when none can be told) get an InternalError (HTTP 500) and the log says why.
#ifndef VLLM_FRONTEND_ENGINE_ASYNC_LLM_H_
#define VLLM_FRONTEND_ENGINE_ASYNC_LLM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "config/vllm_config.h"
#include "frontend/engine/detokenizer.h"
#include "frontend/engine/engine_client.h"
#include "frontend/engine/engine_core_client.h"
#include "frontend/engine/spec_decode_logging.h"
#include "frontend/jinja/chat_template.h"
#include "frontend/tokenizer/tokenizer.h"

namespace vllm::frontend {

struct AsyncLLMConfig {
  // The engine's settings as the server was given them (what this frontend checks requests
  // against: --max-logprobs, ...).
  config::VllmConfig vllm;
  // What the engines and the model resolved.
  std::string model_name;
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;
  // The model's EOS ids (generation_config.json first): the first is the request's EOS, the
  // others stop like stop_token_ids (as vLLM does).
  std::vector<int32_t> eos_token_ids;
  // The data-parallel rank of engine 0 (hybrid / external load balancing: this frontend
  // serves ranks first_engine_rank ..; /metrics and /health name them so).
  int32_t first_engine_rank = 0;
  // Whether the engines compute prompt_logprobs (both the CPU and the CUDA backend do:
  // worker::ModelBackend::supports_prompt_logprobs); when false, such requests are refused
  // with InvalidArgument naming prompt_logprobs.
  bool supports_prompt_logprobs = true;
};

class AsyncLLM final : public EngineClient {
 public:
  // `chat_template` may be empty (chat requests then fail with InvalidArgument).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AsyncLLM>> Create(
      std::unique_ptr<EngineCoreClient> client, std::unique_ptr<Tokenizer> tokenizer,
      std::optional<ChatTemplate> chat_template, AsyncLLMConfig config);
  ~AsyncLLM() override;

  absl::Status Generate(GenerateRequest request, OutputCallback on_output) override;
  void Abort(const std::string& request_id) override;
  absl::Status Health() const override;
  std::string ModelName() const override { return config_.model_name; }
  int32_t MaxModelLen() const override { return config_.max_model_len; }
  absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ChatTemplateInput& input) const override;
  absl::StatusOr<std::string> RenderChat(const ChatTemplateInput& input) const override;
  absl::StatusOr<std::vector<int32_t>> Tokenize(std::string_view text,
                                                bool add_special_tokens) const override;
  absl::StatusOr<std::string> Detokenize(std::span<const int32_t> ids) const override;
  absl::StatusOr<std::vector<std::string>> TokenStrings(
      std::span<const int32_t> ids) const override;
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                     bool skip_special_tokens) const override {
    return tokenizer_->Decode(ids, skip_special_tokens);
  }
  std::vector<int32_t> EosTokenIds() const override { return config_.eos_token_ids; }
  EngineStats Stats() const override;
  std::vector<EngineStatus> Engines() const override;
  int32_t NumSpeculativeTokens() const override {
    return config_.vllm.speculative.enabled() ? config_.vllm.speculative.num_speculative_tokens : 0;
  }
  // Utility calls to every engine (core/engine_core_proc.h).
  absl::StatusOr<bool> ResetPrefixCache() override;
  absl::Status Sleep(int32_t level, const std::string& mode) override;
  absl::StatusOr<bool> WakeUp(const std::vector<std::string>& tags) override;
  absl::StatusOr<bool> IsSleeping() override;
  std::vector<std::pair<std::string, std::string>> CacheConfigInfo() const override;

  EngineCoreClient& client() { return *client_; }

 private:
  struct RequestState {
    std::unique_ptr<IncrementalDetokenizer> detokenizer;
    OutputCallback on_output;
    int32_t num_prompt_tokens = 0;
    int32_t num_output_tokens = 0;
    bool want_logprobs = false;
    // Until the first delta: the request asked for prompt_logprobs (its first prompt token
    // leads them, with no logprob).
    bool want_prompt_logprobs = false;
    int32_t first_prompt_token = 0;
    // return_prompt_token_ids: the prompt, until the first delta carries it.
    std::vector<int32_t> prompt_token_ids;
    int32_t engine_index = 0;  // the engine it was sent to
    // The ids whose sampling stops the request (EOS ids, stop_token_ids): their text is not
    // part of the output (IncrementalDetokenizer::Append's stop_terminated).
    std::vector<int32_t> stop_ids;
    // The engine's events and output timestamps so far (GenerateOutput::queued_ts, ...).
    double queued_ts = 0.0, scheduled_ts = 0.0, first_token_ts = 0.0, last_token_ts = 0.0;
    int32_t num_preemptions = 0;
  };

  AsyncLLM(std::unique_ptr<EngineCoreClient> client, std::unique_ptr<Tokenizer> tokenizer,
           std::optional<ChatTemplate> chat_template, AsyncLLMConfig config);
  void OutputLoop();
  // Every kStatsLogInterval: each engine's speculative-decoding line, when it verified drafts
  // in the interval. Runs on the output thread.
  void MaybeLogStats(absl::Time now);
  // Applies one engine output to its request; returns the delta to deliver, and whether the
  // request is over (then its state was removed). Runs on the output thread.
  // `timestamp`: the engine's, of the batch carrying `out`.
  std::optional<GenerateOutput> Process(const core::EngineCoreOutput& out, double timestamp,
                                        OutputCallback* cb, bool* abort_in_engine);
  // Runs utility `method` (msgpack `args`) on every live engine; the AND of their bools.
  absl::StatusOr<bool> CallEveryEngine(const char* method, const std::string& args,
                                       absl::Duration timeout = absl::Seconds(30));
  // Records one output batch's tokens in engine `engine`'s vllm:iteration_tokens_total.
  void ObserveIterationTokens(int32_t engine, int64_t tokens);
  void FailAll(const absl::Status& status);
  // Ends the listed requests (those still pending) with `status`; returns them with the
  // engine each was on.
  std::vector<std::pair<std::string, int32_t>> FailRequests(
      const std::vector<std::string>& request_ids, const absl::Status& status);
  // Ends every pending request of engine `engine` with `status`.
  void FailEngine(int32_t engine, const absl::Status& status);
  // Aborts `ids` in the engines they are on.
  void AbortInEngines(const std::vector<std::pair<std::string, int32_t>>& ids);
  TokenLogprob Decoded(int32_t id, float logprob, int32_t rank = 0) const;
  // One position's logprobs decoded: the sampled (or prompt) token, then the alternatives.
  PositionLogprobs DecodedPosition(const core::TokenLogprobs& lp) const;
  // InvalidArgument naming the first id outside [0, vocab_size).
  absl::Status CheckIds(std::span<const int32_t> ids) const;

  std::unique_ptr<EngineCoreClient> client_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  const AsyncLLMConfig config_;
  std::thread output_thread_;
  std::atomic<bool> stop_{false};
  // Per engine; the output thread's own.
  std::vector<SpecDecodingLogging> spec_decoding_logging_;
  absl::Time next_stats_log_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<RequestState>> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<EngineStats> stats_ ABSL_GUARDED_BY(mu_);  // per engine
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_ASYNC_LLM_H_
