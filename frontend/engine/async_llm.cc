#include "frontend/engine/async_llm.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "frontend/engine/engine_client.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {

absl::StatusOr<std::unique_ptr<AsyncLLM>> AsyncLLM::Create(
    std::unique_ptr<EngineCoreClient> client, std::unique_ptr<Tokenizer> tokenizer,
    std::optional<ChatTemplate> chat_template, AsyncLLMConfig config) {
  if (client == nullptr || tokenizer == nullptr) {
    return absl::InvalidArgumentError("AsyncLLM needs an engine client and a tokenizer");
  }
  if (config.max_model_len < 2 || config.vocab_size < 1) {
    return absl::InvalidArgumentError("AsyncLLM needs max_model_len and vocab_size");
  }
  return std::unique_ptr<AsyncLLM>(new AsyncLLM(std::move(client), std::move(tokenizer),
                                                std::move(chat_template), std::move(config)));
}

AsyncLLM::AsyncLLM(std::unique_ptr<EngineCoreClient> client, std::unique_ptr<Tokenizer> tokenizer,
                   std::optional<ChatTemplate> chat_template, AsyncLLMConfig config)
    : client_(std::move(client)),
      tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      config_(std::move(config)) {
  stats_.resize(client_->num_engines());
  const absl::Time now = absl::Now();
  spec_decoding_logging_.assign(client_->num_engines(), SpecDecodingLogging(now));
  next_stats_log_ = now + kStatsLogInterval;
  output_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "vllm-output");  // engine outputs → request callbacks
    OutputLoop();
  });
}

AsyncLLM::~AsyncLLM() {
  stop_.store(true);
  if (output_thread_.joinable()) output_thread_.join();
}

absl::Status AsyncLLM::Generate(GenerateRequest request, OutputCallback on_output) {
  VLLM_RETURN_IF_ERROR(Health());
  core::EngineCoreRequest r;
  r.request_id = request.request_id;
  if (request.prompt_text.has_value()) {
    VLLM_ASSIGN_OR_RETURN(r.prompt_token_ids,
                          tokenizer_->Encode(*request.prompt_text, request.add_special_tokens));
  } else {
    r.prompt_token_ids = std::move(request.prompt_token_ids);
  }
  VLLM_RETURN_IF_ERROR(TruncatePrompt(request, config_.max_model_len, &r.prompt_token_ids));
  VLLM_RETURN_IF_ERROR(CheckTokenConstraints(request.params, config_.vocab_size));
  VLLM_RETURN_IF_ERROR(TokenizeBadWords(*tokenizer_, request.bad_words, &request.params));
  if (r.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError("the prompt is empty: it must hold at least one token");
  }
  for (int32_t id : r.prompt_token_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "prompt token id %d is outside the vocabulary [0, %d)", id, config_.vocab_size));
    }
  }
  const int32_t prompt_len = static_cast<int32_t>(r.prompt_token_ids.size());
  if (prompt_len >= config_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "This model's maximum context length is %d tokens. However, your prompt has %d tokens; "
        "shorten it to at most %d tokens.",
        config_.max_model_len, prompt_len, config_.max_model_len - 1));
  }
  if (request.params.max_tokens.has_value() &&
      prompt_len + *request.params.max_tokens > config_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "This model's maximum context length is %d tokens. However, you requested %d tokens "
        "(%d in the prompt, %d for the completion). Reduce the prompt or max_tokens.",
        config_.max_model_len, prompt_len + *request.params.max_tokens, prompt_len,
        *request.params.max_tokens));
  }
  VLLM_RETURN_IF_ERROR(CheckMaxLogprobs(request.params, config_.vllm.model.max_logprobs));
  if (request.kv_transfer_params.has_value() &&
      (request.kv_transfer_params->do_remote_decode ||
       request.kv_transfer_params->do_remote_prefill) &&
      config_.vllm.kv_transfer.kv_connector.empty()) {
    // vLLM would ignore them; a P/D set-up with a server missing its connector should fail
    // loudly instead of computing everything twice.
    return absl::InvalidArgumentError(
        "kv_transfer_params: this server has no KV connector (start it with "
        "--kv-transfer-config)");
  }
  if (request.params.prompt_logprobs.has_value() && !config_.supports_prompt_logprobs) {
    return InvalidParam("prompt_logprobs",
                        "prompt_logprobs (and echo with logprobs) is not supported by this "
                        "server's model backend");
  }
  r.sampling_params = std::move(request.params);
  if (!config_.eos_token_ids.empty()) {
    r.eos_token_id = config_.eos_token_ids.front();
    if (!r.sampling_params.ignore_eos) {
      std::vector<int32_t>& stop = r.sampling_params.stop_token_ids;
      for (size_t i = 1; i < config_.eos_token_ids.size(); ++i) {
        if (std::find(stop.begin(), stop.end(), config_.eos_token_ids[i]) == stop.end()) {
          stop.push_back(config_.eos_token_ids[i]);
        }
      }
    }
  }
  r.arrival_time = request.arrival_time;
  r.priority = request.priority;
  r.kv_transfer_params = std::move(request.kv_transfer_params);
  r.cache_salt = std::move(request.cache_salt);

  auto state = std::make_shared<RequestState>();
  DetokenizerOptions options;
  options.skip_special_tokens = request.skip_special_tokens;
  options.stop = std::move(request.stop);
  options.include_stop_str_in_output = request.include_stop_str_in_output;
  state->detokenizer =
      std::make_unique<IncrementalDetokenizer>(*tokenizer_, r.prompt_token_ids, options);
  state->on_output = std::move(on_output);
  state->num_prompt_tokens = prompt_len;
  state->want_logprobs = r.sampling_params.logprobs.has_value();
  state->want_prompt_logprobs = r.sampling_params.prompt_logprobs.has_value();
  state->first_prompt_token = r.prompt_token_ids.front();
  if (request.return_prompt_token_ids) state->prompt_token_ids = r.prompt_token_ids;
  state->stop_ids = r.sampling_params.stop_token_ids;
  if (!r.sampling_params.ignore_eos) {
    state->stop_ids.insert(state->stop_ids.end(), config_.eos_token_ids.begin(),
                           config_.eos_token_ids.end());
  }
  // An engine that dies between the pick and the send is not picked again: try the next.
  absl::Status sent;
  for (int32_t attempt = 0; attempt < client_->num_engines(); ++attempt) {
    VLLM_ASSIGN_OR_RETURN(const int32_t engine, client_->PickEngine());
    r.data_parallel_rank = engine;
    state->engine_index = engine;
    {
      absl::MutexLock lock(&mu_);
      if (!requests_.emplace(r.request_id, state).second) {
        return absl::AlreadyExistsError(absl::StrCat("request id ", r.request_id, " is in use"));
      }
    }
    sent = client_->AddRequest(r);
    if (sent.ok()) return sent;
    bool still_pending;
    {
      absl::MutexLock lock(&mu_);
      still_pending = requests_.erase(r.request_id) > 0;
    }
    // The engine died meanwhile and FailEngine already ended the request through its
    // callback: it must not be sent again, nor refused a second time.
    if (!still_pending) return absl::OkStatus();
    if (client_->EngineFailure(engine).ok()) break;  // the engine lives: not a dead-engine race
  }
  return sent;
}

void AsyncLLM::Abort(const std::string& request_id) {
  int32_t engine = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = requests_.find(request_id);
    if (it == requests_.end()) return;
    engine = it->second->engine_index;
    requests_.erase(it);
  }
  const std::string ids[1] = {request_id};
  (void)client_->AbortRequests(ids, engine);  // a dead engine has nothing left to abort
}

absl::Status AsyncLLM::Health() const { return client_->failure(); }

absl::StatusOr<std::string> AsyncLLM::RenderChat(const ChatTemplateInput& input) const {
  if (!chat_template_.has_value()) {
    return absl::InvalidArgumentError(
        "the model has no chat template (tokenizer_config.json chat_template); pass "
        "--chat-template or use /v1/completions");
  }
  return RenderChatPrompt(*chat_template_, input, tokenizer_->bos_token(), tokenizer_->eos_token());
}

absl::StatusOr<std::vector<int32_t>> AsyncLLM::TokenizeChat(const ChatTemplateInput& input) const {
  VLLM_ASSIGN_OR_RETURN(std::string prompt, RenderChat(input));
  // As vLLM: the template writes BOS where the model wants it, so a chat is tokenized
  // without the tokenizer's special tokens unless the request asks for them.
  return tokenizer_->Encode(prompt, input.add_special_tokens);
}

absl::StatusOr<std::vector<int32_t>> AsyncLLM::Tokenize(std::string_view text,
                                                        bool add_special_tokens) const {
  return tokenizer_->Encode(text, add_special_tokens);
}

absl::Status AsyncLLM::CheckIds(std::span<const int32_t> ids) const {
  const int32_t vocab = std::max(config_.vocab_size, tokenizer_->vocab_size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token id %d (at index %d) is outside the vocabulary [0, %d)", ids[i], i, vocab));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AsyncLLM::Detokenize(std::span<const int32_t> ids) const {
  VLLM_RETURN_IF_ERROR(CheckIds(ids));
  return tokenizer_->Decode(ids, /*skip_special_tokens=*/false);
}

absl::StatusOr<std::vector<std::string>> AsyncLLM::TokenStrings(
    std::span<const int32_t> ids) const {
  VLLM_RETURN_IF_ERROR(CheckIds(ids));
  std::vector<std::string> out;
  out.reserve(ids.size());
  // An id of the model's (padded) vocabulary that the tokenizer lacks has no string: "".
  for (int32_t id : ids) out.push_back(tokenizer_->IdToToken(id).value_or(""));
  return out;
}

EngineStats AsyncLLM::Stats() const {
  EngineStats sum;
  double kv = 0.0;
  int32_t live = 0;
  for (const EngineStatus& e : Engines()) {
    sum.num_requests_running += e.stats.num_requests_running;
    sum.num_requests_waiting += e.stats.num_requests_waiting;
    sum.prefix_cache_queries += e.stats.prefix_cache_queries;
    sum.prefix_cache_hits += e.stats.prefix_cache_hits;
    sum.num_preemptions += e.stats.num_preemptions;
    sum.connector_prefix_cache_queries += e.stats.connector_prefix_cache_queries;
    sum.connector_prefix_cache_hits += e.stats.connector_prefix_cache_hits;
    sum.structured_output += e.stats.structured_output;
    sum.spec_decoding += e.stats.spec_decoding;
    if (e.health.ok()) {
      kv += e.stats.kv_cache_usage;
      ++live;
    }
  }
  sum.kv_cache_usage = live > 0 ? kv / live : 0.0;  // the mean over the live engines
  return sum;
}

std::vector<EngineStatus> AsyncLLM::Engines() const {
  std::vector<EngineStatus> engines(client_->num_engines());
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < engines.size(); ++i) engines[i].stats = stats_[i];
  }
  for (size_t i = 0; i < engines.size(); ++i) {
    engines[i].index = static_cast<int32_t>(i);
    engines[i].rank = config_.first_engine_rank + static_cast<int32_t>(i);
    engines[i].health = client_->EngineFailure(static_cast<int32_t>(i));
  }
  return engines;
}

TokenLogprob AsyncLLM::Decoded(int32_t id, float logprob, int32_t rank) const {
  return TokenLogprob{id, tokenizer_->DecodeToken(id), logprob, rank};
}

PositionLogprobs AsyncLLM::DecodedPosition(const core::TokenLogprobs& lp) const {
  PositionLogprobs p;
  if (!lp.token_ids.empty()) {
    p.sampled = Decoded(lp.token_ids[0], lp.logprobs[0], lp.sampled_token_rank);
  }
  for (size_t i = 1; i < lp.token_ids.size() && i < lp.logprobs.size(); ++i) {
    p.top.push_back(Decoded(lp.token_ids[i], lp.logprobs[i], static_cast<int32_t>(i)));
  }
  return p;
}

std::optional<GenerateOutput> AsyncLLM::Process(const core::EngineCoreOutput& out, double timestamp,
                                                OutputCallback* cb, bool* abort_in_engine) {
  std::shared_ptr<RequestState> state;
  {
    absl::MutexLock lock(&mu_);
    auto it = requests_.find(out.request_id);
    if (it == requests_.end()) return std::nullopt;  // aborted meanwhile
    state = it->second;
  }
  GenerateOutput delta;
  delta.prompt_token_ids = std::move(state->prompt_token_ids);  // the first delta only
  state->prompt_token_ids.clear();
  delta.token_ids_delta.assign(out.new_token_ids.begin(), out.new_token_ids.end());
  state->num_output_tokens += static_cast<int32_t>(out.new_token_ids.size());
  // vLLM's stop_terminated: the request ended on a stop token (not a grammar's end, a stop
  // string or a length).
  const bool stop_terminated = out.finished() && out.finish_reason == core::FinishReason::kStop &&
                               !out.new_token_ids.empty() &&
                               std::find(state->stop_ids.begin(), state->stop_ids.end(),
                                         out.new_token_ids.back()) != state->stop_ids.end();
  delta.text_delta = state->detokenizer->Append(delta.token_ids_delta, stop_terminated);
  if (state->want_logprobs) {
    for (const core::TokenLogprobs& lp : out.logprobs)
      delta.logprobs.push_back(DecodedPosition(lp));
  }
  if (state->want_prompt_logprobs) {
    // The engine sends them with the first token; position 0 has none (vLLM's None).
    state->want_prompt_logprobs = false;
    std::vector<PositionLogprobs>& prompt = delta.prompt_logprobs.emplace();
    prompt.reserve(out.prompt_logprobs.size() + 1);
    PositionLogprobs& first = prompt.emplace_back();
    first.sampled = Decoded(state->first_prompt_token, 0.0f);
    first.no_logprob = true;
    for (const core::TokenLogprobs& lp : out.prompt_logprobs) {
      prompt.push_back(DecodedPosition(lp));
    }
  }
  if (state->detokenizer->stopped()) {
    // A stop string: the request ends here; the engine stops it on the abort.
    delta.finish_reason = core::FinishReason::kStop;
    delta.stop_string = state->detokenizer->stop_reason();
    *abort_in_engine = !out.finished();
  } else if (out.finished()) {
    delta.text_delta += state->detokenizer->Flush();
    delta.finish_reason = out.finish_reason;
    delta.stop_token_id = out.stop_reason;
  }
  delta.num_prompt_tokens = state->num_prompt_tokens;
  delta.num_output_tokens = state->num_output_tokens;
  delta.num_cached_tokens = out.num_cached_tokens;
  delta.num_cache_creation_tokens = out.num_cache_creation_tokens;
  delta.engine_index = state->engine_index;
  // Only a finishing engine output carries them (a request a stop string ended here has none,
  // as in vLLM).
  delta.kv_transfer_params = out.kv_transfer_params;
  for (const core::EngineCoreEvent& e : out.events) {
    if (e.type == core::EngineCoreEventType::kQueued) {
      state->queued_ts = e.timestamp;
    } else if (e.type == core::EngineCoreEventType::kScheduled) {
      if (state->scheduled_ts == 0.0) state->scheduled_ts = e.timestamp;  // the first (vLLM)
    } else {
      ++state->num_preemptions;
    }
  }
  if (!out.new_token_ids.empty()) {
    if (state->first_token_ts == 0.0) state->first_token_ts = timestamp;
    state->last_token_ts = timestamp;
  }
  delta.queued_ts = state->queued_ts;
  delta.scheduled_ts = state->scheduled_ts;
  delta.first_token_ts = state->first_token_ts;
  delta.last_token_ts = state->last_token_ts;
  delta.num_preemptions = state->num_preemptions;
  if (delta.finished()) {
    absl::MutexLock lock(&mu_);
    requests_.erase(out.request_id);
  }
  *cb = state->on_output;
  return delta;
}

void AsyncLLM::FailAll(const absl::Status& status) {
  absl::flat_hash_map<std::string, std::shared_ptr<RequestState>> failed;
  {
    absl::MutexLock lock(&mu_);
    failed.swap(requests_);
  }
  for (auto& [id, state] : failed) state->on_output(status);
}

std::vector<std::pair<std::string, int32_t>> AsyncLLM::FailRequests(
    const std::vector<std::string>& request_ids, const absl::Status& status) {
  std::vector<std::shared_ptr<RequestState>> failed;
  std::vector<std::pair<std::string, int32_t>> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : request_ids) {
      if (auto it = requests_.find(id); it != requests_.end()) {
        ids.emplace_back(id, it->second->engine_index);
        failed.push_back(std::move(it->second));
        requests_.erase(it);
      }
    }
  }
  for (auto& state : failed) state->on_output(status);
  return ids;
}

void AsyncLLM::FailEngine(int32_t engine, const absl::Status& status) {
  std::vector<std::shared_ptr<RequestState>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = requests_.begin(); it != requests_.end();) {
      if (it->second->engine_index == engine) {
        failed.push_back(std::move(it->second));
        requests_.erase(it++);
      } else {
        ++it;
      }
    }
    if (engine >= 0 && engine < client_->num_engines()) {
      // A dead engine runs nothing; its cumulative counters stay.
      stats_[engine].num_requests_running = 0;
      stats_[engine].num_requests_waiting = 0;
      stats_[engine].kv_cache_usage = 0.0;
    }
  }
  if (!failed.empty()) {
    spdlog::warn("failing the {} request(s) in flight on engine {}", failed.size(), engine);
  }
  for (auto& state : failed) state->on_output(status);
}

void AsyncLLM::AbortInEngines(const std::vector<std::pair<std::string, int32_t>>& ids) {
  absl::flat_hash_map<int32_t, std::vector<std::string>> by_engine;
  for (const auto& [id, engine] : ids) by_engine[engine].push_back(id);
  for (const auto& [engine, list] : by_engine) (void)client_->AbortRequests(list, engine);
}

void AsyncLLM::MaybeLogStats(absl::Time now) {
  if (now < next_stats_log_) return;
  next_stats_log_ = now + kStatsLogInterval;
  for (SpecDecodingLogging& logging : spec_decoding_logging_) {
    if (std::string line = logging.Take(now); !line.empty()) spdlog::info("{}", line);
  }
}

void AsyncLLM::OutputLoop() {
  while (!stop_.load()) {
    MaybeLogStats(absl::Now());
    absl::StatusOr<EngineCoreClient::ReceivedOutputs> received =
        client_->GetOutputs(absl::Now() + absl::Milliseconds(100));
    if (absl::IsDeadlineExceeded(received.status())) continue;
    if (!received.ok()) {
      FailAll(received.status());
      if (stop_.load()) return;
      // Every engine is dead; keep failing requests that raced in until shutdown.
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    if (received->dead_engine.has_value()) {
      FailEngine(*received->dead_engine, received->engine_failure);
      continue;
    }
    if (!received->decode_error.ok()) {
      // An output was lost: its requests cannot continue correctly. Fail them (the engine
      // stops them on the abort); with no id recovered, every request in flight.
      std::vector<std::string> ids = received->failed_request_ids;
      if (ids.empty()) {
        absl::MutexLock lock(&mu_);
        for (const auto& [id, state] : requests_) ids.push_back(id);
      }
      AbortInEngines(FailRequests(ids, received->decode_error));
      continue;
    }
    const core::EngineCoreOutputs& outs = received->outputs;
    if (outs.scheduler_stats.has_value() && outs.engine_index >= 0 &&
        outs.engine_index < client_->num_engines()) {
      absl::MutexLock lock(&mu_);
      const core::SchedulerStats& s = *outs.scheduler_stats;
      EngineStats& e = stats_[outs.engine_index];
      e.num_requests_running = s.num_running_reqs;
      e.num_requests_waiting = s.num_waiting_reqs;
      e.kv_cache_usage = s.kv_cache_usage;
      e.prefix_cache_queries += s.prefix_cache_stats.queries;
      e.prefix_cache_hits += s.prefix_cache_stats.hits;
      e.num_preemptions += s.num_preemptions;
      e.connector_prefix_cache_queries += s.connector_prefix_cache_stats.queries;
      e.connector_prefix_cache_hits += s.connector_prefix_cache_stats.hits;
      e.structured_output += s.structured_output_stats;
      e.spec_decoding += s.spec_decoding_stats;
      if (!s.spec_decoding_stats.empty()) {
        spec_decoding_logging_[outs.engine_index].Observe(s.spec_decoding_stats);
      }
    }
    std::vector<std::string> to_abort;
    int64_t iteration_tokens = 0;
    for (const core::EngineCoreOutput& o : outs.outputs) {
      OutputCallback cb;
      bool abort_in_engine = false;
      std::optional<GenerateOutput> delta = Process(o, outs.timestamp, &cb, &abort_in_engine);
      if (!delta.has_value()) continue;
      const auto n = static_cast<int32_t>(o.new_token_ids.size());
      iteration_tokens += n;
      if (n > 0 && delta->num_output_tokens == n) {  // its first tokens: the prompt computed
        iteration_tokens += std::max(delta->num_prompt_tokens - delta->num_cached_tokens, 0);
      }
      if (abort_in_engine) to_abort.push_back(o.request_id);
      cb(std::move(*delta));
    }
    if (!outs.outputs.empty()) ObserveIterationTokens(outs.engine_index, iteration_tokens);
    if (!to_abort.empty()) (void)client_->AbortRequests(to_abort, outs.engine_index);
  }
}

void AsyncLLM::ObserveIterationTokens(int32_t engine, int64_t tokens) {
  if (engine < 0 || engine >= client_->num_engines()) return;
  const auto value = static_cast<double>(tokens);
  const size_t bucket =
      std::lower_bound(kIterationTokensBuckets.begin(), kIterationTokensBuckets.end(), value) -
      kIterationTokensBuckets.begin();
  absl::MutexLock lock(&mu_);
  EngineStats& e = stats_[engine];
  e.iteration_tokens_counts.resize(kIterationTokensBuckets.size() + 1, 0);
  ++e.iteration_tokens_counts[bucket];
  e.iteration_tokens_sum += value;
}

}  // namespace vllm::frontend
