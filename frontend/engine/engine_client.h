// EngineClient: the seam between the OpenAI-compatible API server and the engine (vLLM's
// EngineClient protocol in vllm/engine/protocol.py). AsyncLLM implements it over an
// EngineCoreClient; tests implement it with scripted doubles.
//
// The server passes text through: the engine client owns the tokenizer, the chat template
// and the incremental detokenizer (stop strings included), and turns engine-core outputs
// into text deltas.
#ifndef VLLM_FRONTEND_ENGINE_ENGINE_CLIENT_H_
#define VLLM_FRONTEND_ENGINE_ENGINE_CLIENT_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/status_param.h"
#include "core/engine_core_types.h"
#include "core/sampling_params.h"
#include "frontend/jinja/chat_template.h"  // ChatMessage
#include "frontend/jinja/chat_template_input.h"
#include "kv_transfer/types.h"
#include "nlohmann/json.hpp"
#include "spec_decode/stats.h"
#include "structured_output/stats.h"

namespace vllm::frontend {

// Errors of EngineClient calls about a request field name it, so that the OpenAI error body's
// "param" can (base/status_param.h).
using base::ErrorParam;
using base::InvalidParam;
using base::kParamPayloadUrl;

// vLLM's Processor._validate_logprobs: a request may ask for at most `max_logprobs`
// (--max-logprobs) log-probabilities per token and per prompt position. InvalidParam naming
// logprobs or prompt_logprobs otherwise.
[[nodiscard]] absl::Status CheckMaxLogprobs(const core::SamplingParams& params,
                                            int32_t max_logprobs);

struct GenerateRequest;
class Tokenizer;

// vLLM's truncate_prompt_tokens (renderers/params.py): keeps request.truncate_prompt_tokens of
// `ids` (-1: max_model_len - 1), the last ones unless !request.truncate_left. InvalidParam
// naming truncate_prompt_tokens when it exceeds max_model_len (vLLM's message).
[[nodiscard]] absl::Status TruncatePrompt(const GenerateRequest& request, int32_t max_model_len,
                                          std::vector<int32_t>* ids);

// vLLM's SamplingParams._validate_logit_bias / _validate_allowed_token_ids: every id in
// [0, vocab_size), else InvalidParam naming the field (vLLM's messages).
[[nodiscard]] absl::Status CheckTokenConstraints(const core::SamplingParams& params,
                                                 int32_t vocab_size);

// vLLM's SamplingParams.update_from_tokenizer: each bad word (leading whitespace stripped)
// tokenized without special tokens as is and with a leading space; the spaced form is kept
// when it starts with another token and has as many tokens. Appends to
// params->bad_words_token_ids; InvalidParam naming bad_words for a word with no tokens or
// more sequences than core::kMaxBadWords.
[[nodiscard]] absl::Status TokenizeBadWords(const Tokenizer& tokenizer,
                                            const std::vector<std::string>& words,
                                            core::SamplingParams* params);

// One engine request (one choice of one prompt; the server fans n > 1 out into n of them).
struct GenerateRequest {
  // Unique among in-flight requests; the server derives it from the response id.
  std::string request_id;
  // Exactly one of the two prompt forms is set: text (tokenized by the engine client) or
  // token ids (prompt_text unset).
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_token_ids;
  // Already checked by core::ValidateSamplingParams; n is 1.
  core::SamplingParams params;
  // Stop strings, detected by the engine client's detokenizer (at most VLLM_MAX_STOP_STRINGS).
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  // Smaller = scheduled earlier under the priority policy.
  int32_t priority = 0;
  // Seconds since the epoch when the server received the HTTP request.
  double arrival_time = 0.0;
  // Disaggregated prefill/decode: the request's kv_transfer_params, passed to the engine
  // (core::EngineCoreRequest::kv_transfer_params).
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
  // A text prompt is tokenized with the tokenizer's special tokens (BOS) when true.
  bool add_special_tokens = true;
  // vLLM's truncate_prompt_tokens: keep this many prompt tokens (-1: max_model_len - 1), the
  // last ones when truncate_left (vLLM's default truncation_side for generation), else the
  // first. InvalidArgument naming truncate_prompt_tokens past max_model_len.
  std::optional<int64_t> truncate_prompt_tokens;
  bool truncate_left = true;
  // vLLM's bad_words: each word tokenized without and with a leading space (vLLM's
  // SamplingParams.update_from_tokenizer) into params.bad_words_token_ids.
  std::vector<std::string> bad_words;
  // The first delta carries prompt_token_ids (vLLM's return_token_ids).
  bool return_prompt_token_ids = false;
  // Salts the prefix cache (core::EngineCoreRequest::cache_salt).
  std::optional<std::string> cache_salt;
};

// A log-probability of one token, decoded by the engine client.
struct TokenLogprob {
  int32_t token_id = 0;
  std::string token;  // the token's text (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
  // 1-based rank among the vocabulary (the sampled or prompt token: its rank; the i-th top
  // alternative: i + 1), as vLLM's Logprob.rank.
  int32_t rank = 0;
};

// Log-probabilities at one position: the sampled token (for a prompt position: the prompt
// token) and the top alternatives.
struct PositionLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;
  // The prompt's first position, which has no logprob: only `sampled.token_id` and
  // `sampled.token` are set (vLLM shows it as null).
  bool no_logprob = false;
};

// One delta of one request, delivered in order; the last has finish_reason set.
struct GenerateOutput {
  // New text since the previous delta (stop strings already applied).
  std::string text_delta;
  std::vector<int32_t> token_ids_delta;
  std::optional<core::FinishReason> finish_reason;
  // What ended a request with FinishReason::kStop, when it was not EOS: the stop string
  // (OpenAI's stop_reason as a string) or the stop token id (as an integer).
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  // Totals so far.
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  // Prompt tokens served from the prefix cache (set from the first delta on).
  int32_t num_cached_tokens = 0;
  // Prompt tokens the request wrote to the prefix cache (vLLM's num_cache_creation_tokens;
  // set from the first delta on).
  int32_t num_cache_creation_tokens = 0;
  // One entry per token in token_ids_delta when the request asked for logprobs.
  std::vector<PositionLogprobs> logprobs;
  // Set on the first delta when the request asked for prompt_logprobs: one entry per prompt
  // token, the first with no_logprob.
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  // The data-parallel engine (rank) serving the request.
  int32_t engine_index = 0;
  // On the final delta: the engine's kv_transfer_params for the client (vLLM's
  // RequestOutput.kv_transfer_params), when its KV connector gave any.
  std::optional<kv_transfer::KVTransferParams> kv_transfer_params;
  // On the first delta when the request set return_prompt_token_ids: the prompt as the engine
  // got it (after truncation).
  std::vector<int32_t> prompt_token_ids;
  // The request's life in the engine so far (vLLM's RequestStateStats), on the engine's clock
  // (seconds since the epoch; 0: not yet): taken (queued), first scheduled, first and latest
  // token (the timestamps of the engine outputs carrying them); and its preemptions. The
  // /metrics queue, prefill, decode and inference times are differences of these.
  double queued_ts = 0.0;
  double scheduled_ts = 0.0;
  double first_token_ts = 0.0;
  double last_token_ts = 0.0;
  int32_t num_preemptions = 0;

  bool finished() const { return finish_reason.has_value(); }
};

// vLLM 0.33's buckets of vllm:iteration_tokens_total (tokens per engine step).
inline constexpr std::array<double, 13> kIterationTokensBuckets = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

// Engine-wide gauges and cumulative counters read when /metrics is scraped.
struct EngineStats {
  int32_t num_requests_running = 0;
  int32_t num_requests_waiting = 0;
  double kv_cache_usage = 0.0;       // in [0, 1]
  int64_t prefix_cache_queries = 0;  // tokens looked up since start
  int64_t prefix_cache_hits = 0;     // tokens found since start
  int64_t num_preemptions = 0;       // requests preempted since start
  // The KV connector's external prefix cache since start (vLLM's connector_prefix_cache_stats;
  // zero without a connector): prompt tokens looked up, and found.
  int64_t connector_prefix_cache_queries = 0;
  int64_t connector_prefix_cache_hits = 0;
  // Grammar compiles and compile-cache lookups since start.
  structured_output::StructuredOutputStats structured_output;
  // Speculative decoding's drafts and accepted tokens since start (all zero without it).
  spec_decode::SpecDecodingStats spec_decoding;
  // Tokens per engine step (prompt tokens computed + tokens generated, per output batch, as
  // vLLM's IterationStats): count per bucket of kIterationTokensBuckets plus +Inf (not
  // cumulative), and the sum. Empty until the first step.
  std::vector<int64_t> iteration_tokens_counts;
  double iteration_tokens_sum = 0.0;
};

// One data-parallel engine as /health and /metrics report it.
struct EngineStatus {
  int32_t index = 0;    // its index in this frontend (0 .. engines - 1)
  int32_t rank = 0;     // its data-parallel rank (index + the frontend's first rank)
  absl::Status health;  // OK while it serves; why it died otherwise
  EngineStats stats;
};

// Callback receiving a request's deltas; see EngineClient::Generate.
using OutputCallback = std::function<void(absl::StatusOr<GenerateOutput>)>;

// The engine as the API server sees it. Implementations are thread-safe: every method may
// be called from any server thread concurrently.
class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // Starts a request. Returns InvalidArgument (HTTP 400) for a request it cannot accept
  // (a prompt that does not tokenize, out-of-vocabulary ids, a prompt plus max_tokens longer
  // than MaxModelLen(); the message names the problem), Unavailable (HTTP 503) when the
  // engine is dead; `on_output` is then never called. Otherwise `on_output` is called from
  // an engine thread, in order, once per delta until one that is finished() or an error
  // status, after which it is never called again. After Abort(), the client delivers a
  // final delta with FinishReason::kAbort or nothing at all; `on_output` must tolerate
  // being called after Abort() returned.
  [[nodiscard]] virtual absl::Status Generate(GenerateRequest request,
                                              OutputCallback on_output) = 0;

  // Cancels a request (the HTTP client went away). Unknown or finished ids are ignored.
  virtual void Abort(const std::string& request_id) = 0;

  // OK while the engine (with data parallelism: at least one engine) can serve; otherwise the
  // reason (GET /health answers 503).
  [[nodiscard]] virtual absl::Status Health() const = 0;

  // The served model's name (requests naming another model get 404).
  virtual std::string ModelName() const = 0;
  virtual int32_t MaxModelLen() const = 0;

  // The prompt token ids of a chat: `input` rendered with the model's chat template (which
  // writes BOS itself where the model wants it), then tokenized, with the tokenizer's special
  // tokens (BOS) added only when input.add_special_tokens (vLLM's default for chat: false). A
  // chat completion sends exactly these ids, and POST /tokenize returns them. InvalidArgument
  // (HTTP 400) for messages the template rejects or a model without a chat template.
  [[nodiscard]] virtual absl::StatusOr<std::vector<int32_t>> TokenizeChat(
      const ChatTemplateInput& input) const = 0;

  // The prompt text of a chat as TokenizeChat renders it (chat's return_prompt_text).
  [[nodiscard]] virtual absl::StatusOr<std::string> RenderChat(
      const ChatTemplateInput& input) const {
    (void)input;
    return absl::UnimplementedError("this engine client cannot render chat prompts");
  }

  // The token ids of `text` as a completion with a text prompt sends them
  // (`add_special_tokens`: true there). Internal only on a tokenizer failure.
  [[nodiscard]] virtual absl::StatusOr<std::vector<int32_t>> Tokenize(
      std::string_view text, bool add_special_tokens) const = 0;

  // The text of `ids` (special tokens kept, as vLLM's /detokenize). InvalidArgument naming
  // the first id outside the vocabulary [0, vocab size).
  [[nodiscard]] virtual absl::StatusOr<std::string> Detokenize(
      std::span<const int32_t> ids) const = 0;

  // The text of generated `ids`, special tokens dropped when skip_special_tokens (beam search
  // decodes its beams so). Defaults to Detokenize.
  [[nodiscard]] virtual absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                                           bool skip_special_tokens) const {
    (void)skip_special_tokens;
    return Detokenize(ids);
  }
  // The ids that end generation (the model's EOS ids); beam search completes a beam on them.
  virtual std::vector<int32_t> EosTokenIds() const { return {}; }

  // The vocabulary's string of each id (HF's convert_ids_to_tokens: byte-level form, e.g.
  // "Ġthe"). InvalidArgument naming the first id outside the vocabulary.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::string>> TokenStrings(
      std::span<const int32_t> ids) const = 0;

  // Current engine gauges and cumulative prefix-cache counters (summed over the engines).
  virtual EngineStats Stats() const = 0;

  // Each data-parallel engine, in rank order (at least one).
  virtual std::vector<EngineStatus> Engines() const { return {{0, 0, Health(), Stats()}}; }

  // --speculative-config's num_speculative_tokens (k), 0 without speculative decoding (then
  // /metrics has no vllm:spec_decode_* families, as in vLLM).
  virtual int32_t NumSpeculativeTokens() const { return 0; }

  // POST /reset_prefix_cache (vLLM's reset_prefix_cache, a utility call to every engine): true
  // when every engine dropped its cached blocks, false when one could not (blocks in use by
  // requests). Blocks until the engines answered.
  [[nodiscard]] virtual absl::StatusOr<bool> ResetPrefixCache() {
    return absl::UnimplementedError("this engine client cannot reset the prefix cache");
  }
  // The dev-mode sleep family (vLLM's sleep / wake_up / is_sleeping): `mode` (abort, wait or
  // keep) says what becomes of the requests in the engines, then level 0 pauses scheduling;
  // level 1 also drops the prefix cache and frees the KV cache, level 2 the weights too
  // (re-created by WakeUp; core/engine_core_proc.h). FailedPrecondition (HTTP 400) naming why
  // where an engine cannot.
  [[nodiscard]] virtual absl::Status Sleep(int32_t level, const std::string& mode) {
    (void)level;
    (void)mode;
    return absl::UnimplementedError("this engine client cannot sleep");
  }
  // Wakes every engine (`tags` empty: everything; else "weights", "kv_cache", "scheduling");
  // true when all are fully awake.
  [[nodiscard]] virtual absl::StatusOr<bool> WakeUp(const std::vector<std::string>& tags) {
    (void)tags;
    return absl::UnimplementedError("this engine client cannot wake up");
  }
  [[nodiscard]] virtual absl::StatusOr<bool> IsSleeping() { return false; }

  // vllm:cache_config_info's labels (besides engine): the cache settings as vLLM's
  // CacheConfig.metrics_info() writes them (Python's str of each value).
  virtual std::vector<std::pair<std::string, std::string>> CacheConfigInfo() const { return {}; }
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_ENGINE_CLIENT_H_
