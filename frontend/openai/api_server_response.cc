#include "frontend/openai/api_server_response.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "frontend/openai/request_fields.h"

namespace vllm::frontend {

std::vector<GenerateRequest> FanOut(const std::vector<Prompt>& prompts,
                                    const GenerationOptions& options,
                                    const std::string& response_id, double arrival_time) {
  std::vector<GenerateRequest> requests;
  requests.reserve(prompts.size() * static_cast<size_t>(options.n));
  for (const Prompt& prompt : prompts) {
    for (int32_t i = 0; i < options.n; ++i) {
      GenerateRequest r;
      r.request_id = absl::StrCat(response_id, "-", requests.size());
      r.prompt_text = prompt.text;
      r.prompt_token_ids = prompt.token_ids;
      r.params = options.params;
      if (r.params.seed.has_value()) *r.params.seed += i;
      r.stop = options.stop;
      r.include_stop_str_in_output = options.include_stop_str_in_output;
      r.skip_special_tokens = options.skip_special_tokens;
      r.priority = options.priority;
      r.arrival_time = arrival_time;
      r.kv_transfer_params = options.kv_transfer_params;
      r.add_special_tokens = options.add_special_tokens;
      r.truncate_prompt_tokens = options.truncate_prompt_tokens;
      r.truncate_left = options.truncate_left;
      r.bad_words = options.bad_words;
      r.return_prompt_token_ids = options.return_token_ids;
      r.cache_salt = options.cache_salt;
      requests.push_back(std::move(r));
    }
  }
  return requests;
}

absl::StatusOr<ParsedGeneration> ParseGeneration(ApiKind kind, std::string_view body,
                                                 const EngineClient& engine,
                                                 const ChatParsers& parsers) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json json, ParseJsonObject(body));
  if (parsers.defaults != nullptr) ApplySamplingDefaults(*parsers.defaults, &json);
  const std::string model_name = engine.ModelName();
  ParsedGeneration parsed;
  parsed.kind = kind;
  if (kind == ApiKind::kCompletion) {
    VLLM_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(json, model_name));
    parsed.prompts = std::move(r.prompts);
    parsed.options = std::move(r.options);
    parsed.logprobs = parsed.options.params.logprobs.has_value();
    parsed.echo_logprobs = r.echo && parsed.logprobs;
    if (r.echo) {
      for (const Prompt& p : parsed.prompts) {
        if (parsed.options.return_token_ids) {
          parsed.echo_texts.emplace_back();  // vLLM echoes no text with return_token_ids
        } else if (p.text.has_value()) {
          parsed.echo_texts.push_back(*p.text);
        } else {
          VLLM_ASSIGN_OR_RETURN(std::string text, engine.Detokenize(p.token_ids));
          parsed.echo_texts.push_back(std::move(text));
        }
      }
    }
    if (parsers.defaults != nullptr) {
      VLLM_RETURN_IF_ERROR(
          ApplyMaxTokensDefault(*parsers.defaults, engine, parsed.prompts, &parsed.options));
      ApplyResponseFlags(*parsers.defaults, true, "", &parsed.options);
    }
    return parsed;
  }
  VLLM_ASSIGN_OR_RETURN(ChatCompletionRequest r, ParseChatCompletionRequest(json, model_name));
  VLLM_ASSIGN_OR_RETURN(ToolRequest tools, ParseToolRequest(json, parsers));
  VLLM_RETURN_IF_ERROR(ApplyToolChoiceGrammar(json, tools, &r.options.params));
  const bool exclude_tools =
      tools.choice == ToolChoice::kNone && parsers.exclude_tools_when_tool_choice_none;
  VLLM_RETURN_IF_ERROR(MoveDocumentsToTemplateKwargs(&json));
  VLLM_ASSIGN_OR_RETURN(
      ChatTemplateInput input,
      TemplateInputFor(json, exclude_tools ? nlohmann::ordered_json() : tools.tools,
                       r.add_generation_prompt, r.continue_final_message, r.add_special_tokens));
  if (parsers.defaults != nullptr) ApplyContentFormat(*parsers.defaults, json, &input.messages);
  // The same ids POST /tokenize returns for these messages.
  VLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, engine.TokenizeChat(input));
  if (r.options.return_prompt_text) {
    VLLM_ASSIGN_OR_RETURN(r.options.prompt_text, engine.RenderChat(input));
  }
  parsed.prompts.push_back(Prompt{std::nullopt, std::move(ids)});
  if (parsers.defaults != nullptr) {
    const std::string last_role = r.messages.empty() ? "" : r.messages.back().role;
    ApplyResponseFlags(*parsers.defaults, r.add_generation_prompt, last_role, &r.options);
    if (r.options.response_role != "assistant") {  // echo compares with the response's role
      VLLM_ASSIGN_OR_RETURN(r.options.chat_echo, ChatEcho(json, r.messages, r.add_generation_prompt,
                                                          parsers.defaults->response_role));
    }
  }
  parsed.options = std::move(r.options);
  if (parsers.defaults != nullptr) {
    VLLM_RETURN_IF_ERROR(
        ApplyMaxTokensDefault(*parsers.defaults, engine, parsed.prompts, &parsed.options));
  }
  parsed.logprobs = r.logprobs;
  if (parsed.options.chat_echo.has_value()) parsed.echo_texts.push_back(*parsed.options.chat_echo);
  VLLM_ASSIGN_OR_RETURN(parsed.chat_output, ChatOutputFor(json, tools, input.kwargs, parsers));
  if (tools.choice != ToolChoice::kNone && parsers.tool_parser != nullptr &&
      parsers.tool_parser->reads_special_tokens()) {
    parsed.options.skip_special_tokens = false;  // vLLM's adjust_request
  }
  return parsed;
}

absl::StatusOr<nlohmann::json> HandleTokenize(std::string_view body, const EngineClient& engine) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json json, ParseJsonObject(body));
  VLLM_ASSIGN_OR_RETURN(TokenizeRequest r, ParseTokenizeRequest(json, engine.ModelName()));
  std::vector<int32_t> ids;
  if (r.prompt.has_value()) {
    VLLM_ASSIGN_OR_RETURN(ids, engine.Tokenize(*r.prompt, r.add_special_tokens));
  } else {
    nlohmann::ordered_json tools;
    if (const auto t = json.find("tools"); t != json.end() && t->is_array() && !t->empty()) {
      tools = *t;
    }
    VLLM_ASSIGN_OR_RETURN(ChatTemplateInput input,
                          TemplateInputFor(json, std::move(tools), r.add_generation_prompt,
                                           r.continue_final_message, r.add_special_tokens));
    VLLM_ASSIGN_OR_RETURN(ids, engine.TokenizeChat(input));
  }
  std::optional<std::vector<std::string>> token_strs;
  if (r.return_token_strs) {
    VLLM_ASSIGN_OR_RETURN(token_strs, engine.TokenStrings(ids));
  }
  return BuildTokenizeResponse(ids, engine.MaxModelLen(), token_strs);
}

absl::StatusOr<nlohmann::json> HandleDetokenize(std::string_view body, const EngineClient& engine) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json json, ParseJsonObject(body));
  VLLM_ASSIGN_OR_RETURN(DetokenizeRequest r, ParseDetokenizeRequest(json, engine.ModelName()));
  VLLM_ASSIGN_OR_RETURN(std::string prompt, engine.Detokenize(r.tokens));
  return BuildDetokenizeResponse(prompt);
}

ResponseAssembler::ResponseAssembler(ApiKind kind, ResponseMeta meta, int32_t num_choices,
                                     int32_t n, bool stream, bool include_usage, bool logprobs)
    : kind_(kind),
      meta_(std::move(meta)),
      n_(n),
      stream_(stream),
      include_usage_(include_usage),
      logprobs_(logprobs),
      choices_(num_choices) {
  for (int32_t i = 0; i < num_choices; ++i) {
    choices_[i].choice.index = i;
    if (logprobs_) choices_[i].choice.logprobs.emplace();
  }
}

void ResponseAssembler::SetChatOutput(ChatOutputOptions options) {
  chat_output_ = std::move(options);
  if (kind_ != ApiKind::kChat || !chat_output_.active() || !stream_) return;
  for (ChoiceState& state : choices_) {
    state.parser = std::make_unique<ChatOutputStream>(chat_output_);
  }
}

void ResponseAssembler::ParseDelta(ChoiceState& state, const GenerateOutput& output,
                                   Choice* delta) {
  ChatMessageParts parts = state.parser->Feed(delta->text);
  if (output.finished()) {
    parts.Append(state.parser->Finish());
    delta->tool_calls_finish = state.parser->tools_called() && !chat_output_.named;
  }
  delta->chat = std::move(parts);
}

void ResponseAssembler::SetOptions(const GenerationOptions& options) {
  return_token_ids_ = options.return_token_ids;
  continuous_usage_ = options.continuous_usage_stats && stream_;
  if (kind_ == ApiKind::kChat) prompt_text_ = options.prompt_text;
  if (kind_ == ApiKind::kChat) meta_.role = options.response_role;
  prompt_tokens_details_ = options.prompt_tokens_details;
  per_request_metrics_ = options.per_request_metrics;
  log_outputs_ = options.log_outputs;
  log_deltas_ = options.log_deltas;
  log_max_len_ = options.log_max_len;
  lazy_role_ = stream_ && kind_ == ApiKind::kChat && (return_token_ids_ || continuous_usage_);
  if (options.request_id.has_value()) {
    meta_.id = absl::StrCat(kind_ == ApiKind::kChat ? "chatcmpl-" : "cmpl-", *options.request_id);
  }
}

void ResponseAssembler::SetEcho(std::vector<std::string> prompt_texts) {
  echo_ = kind_ == ApiKind::kCompletion && !prompt_texts.empty();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const size_t prompt = i / static_cast<size_t>(n_);
    if (prompt < prompt_texts.size()) choices_[i].echo = prompt_texts[prompt];
  }
}

std::string ResponseAssembler::Start() {
  if (!stream_ || kind_ != ApiKind::kChat || lazy_role_) return "";
  std::string out;
  for (const ChoiceState& state : choices_) {
    Choice role;
    role.index = state.choice.index;
    nlohmann::json chunk = BuildChatChunk(meta_, role, /*first=*/true);
    if (prompt_text_.has_value()) chunk["prompt_text"] = *prompt_text_;
    out += SseEvent(chunk);
  }
  return out;
}

namespace {

// `next` appended to `held` (deltas concatenated; the totals, finish and final fields are
// next's; the first-delta fields stay held's when it has them).
void MergeDelta(GenerateOutput&& next, GenerateOutput* held) {
  held->text_delta += next.text_delta;
  held->token_ids_delta.insert(held->token_ids_delta.end(), next.token_ids_delta.begin(),
                               next.token_ids_delta.end());
  held->logprobs.insert(held->logprobs.end(), std::make_move_iterator(next.logprobs.begin()),
                        std::make_move_iterator(next.logprobs.end()));
  if (!held->prompt_logprobs.has_value()) held->prompt_logprobs = std::move(next.prompt_logprobs);
  if (held->prompt_token_ids.empty()) held->prompt_token_ids = std::move(next.prompt_token_ids);
  held->finish_reason = next.finish_reason;
  held->stop_string = std::move(next.stop_string);
  held->stop_token_id = next.stop_token_id;
  held->num_prompt_tokens = next.num_prompt_tokens;
  held->num_output_tokens = next.num_output_tokens;
  held->num_cached_tokens = next.num_cached_tokens;
  held->num_cache_creation_tokens = next.num_cache_creation_tokens;
  held->engine_index = next.engine_index;
  if (next.kv_transfer_params.has_value()) {
    held->kv_transfer_params = std::move(next.kv_transfer_params);
  }
  held->last_token_ts = next.last_token_ts;
  held->num_preemptions = next.num_preemptions;
}

}  // namespace

std::string ResponseAssembler::OnOutput(int32_t index, const GenerateOutput& output) {
  VLLM_CHECK(index >= 0 && index < static_cast<int32_t>(choices_.size())) << index;
  if (!stream_ || stream_interval_ <= 1) return Apply(index, output);
  // vLLM's output processor: send when finished, when nothing was sent yet, or when
  // stream_interval tokens have come since the last chunk.
  ChoiceState& state = choices_[index];
  if (state.held.has_value()) {
    MergeDelta(GenerateOutput(output), &*state.held);
  } else {
    state.held = output;
  }
  if (!(output.finished() || state.sent_tokens < 0 ||
        state.held->num_output_tokens - state.sent_tokens >= stream_interval_)) {
    return "";
  }
  GenerateOutput merged = std::move(*state.held);
  state.held.reset();
  state.sent_tokens = merged.num_output_tokens;
  return Apply(index, merged);
}

std::string ResponseAssembler::Apply(int32_t index, const GenerateOutput& output) {
  ChoiceState& state = choices_[index];
  VLLM_CHECK(!state.finished) << "output after the final one for choice " << index;
  state.prompt_tokens = output.num_prompt_tokens;
  state.output_tokens = output.num_output_tokens;
  if (!output.prompt_token_ids.empty()) state.prompt_token_ids = output.prompt_token_ids;
  state.cached_tokens = output.num_cached_tokens;
  state.created_cache_tokens = output.num_cache_creation_tokens;
  if (output.queued_ts > 0) state.queued_ts = output.queued_ts;
  if (output.scheduled_ts > 0) state.scheduled_ts = output.scheduled_ts;
  if (output.first_token_ts > 0) state.first_token_ts = output.first_token_ts;
  if (output.last_token_ts > 0) state.last_token_ts = output.last_token_ts;
  if (log_outputs_) state.log_text += output.text_delta;
  if ((return_token_ids_ || log_outputs_) && !stream_) {
    state.token_ids.insert(state.token_ids.end(), output.token_ids_delta.begin(),
                           output.token_ids_delta.end());
  }
  if (output.finished()) {
    state.finished = true;
    ++num_finished_;
  }
  Choice& acc = state.choice;
  std::vector<PositionLogprobs> logprobs;
  if (echo_logprobs_top_ >= 0 && output.prompt_logprobs.has_value()) {
    // echo: the prompt tokens' logprobs come first (vLLM shows `logprobs` alternatives).
    logprobs = *output.prompt_logprobs;
    for (PositionLogprobs& pos : logprobs) {
      if (pos.top.size() > static_cast<size_t>(echo_logprobs_top_))
        pos.top.resize(echo_logprobs_top_);
    }
  }
  logprobs.insert(logprobs.end(), output.logprobs.begin(), output.logprobs.end());
  if (tokens_as_ids_) {
    for (PositionLogprobs& pos : logprobs) {
      pos.sampled.token = TokenIdString(pos.sampled.token_id);
      for (TokenLogprob& t : pos.top) t.token = TokenIdString(t.token_id);
    }
  }
  // echo: the prompt's text goes before the choice's first text.
  std::string text = std::move(state.echo);
  state.echo.clear();
  text += output.text_delta;
  if (!stream_) {
    if (output.prompt_logprobs.has_value()) acc.prompt_logprobs = output.prompt_logprobs;
    acc.text += text;
    if (acc.logprobs.has_value()) {
      acc.logprobs->insert(acc.logprobs->end(), logprobs.begin(), logprobs.end());
    }
    acc.finish_reason = output.finish_reason;
    acc.stop_string = output.stop_string;
    acc.stop_token_id = output.stop_token_id;
    if (output.kv_transfer_params.has_value()) acc.kv_transfer_params = output.kv_transfer_params;
    if (output.finished() && kind_ == ApiKind::kChat && chat_output_.active()) {
      acc.chat = ParseChatOutput(chat_output_, acc.text);
      acc.tool_calls_finish = !acc.chat->tool_calls.empty() && !chat_output_.named;
    }
    return "";
  }
  const bool parsed = state.parser != nullptr;
  if (text.empty() && logprobs.empty() && !output.finished() &&
      !output.prompt_logprobs.has_value() &&
      !(return_token_ids_ && !output.token_ids_delta.empty())) {
    return "";
  }
  Choice delta;
  delta.index = index;
  delta.prompt_logprobs = output.prompt_logprobs;
  delta.text = std::move(text);
  if (logprobs_) delta.logprobs = std::move(logprobs);
  delta.text_offset = acc.text_offset;
  delta.finish_reason = output.finish_reason;
  delta.stop_string = output.stop_string;
  delta.stop_token_id = output.stop_token_id;
  delta.kv_transfer_params = output.kv_transfer_params;
  acc.text_offset += delta.text.size();
  if (parsed) ParseDelta(state, output, &delta);
  if (log_outputs_ && log_deltas_) LogDelta(delta, output);
  if (parsed) {
    // Text held back by the parsers (a possible tag) waits for the next step.
    if (delta.chat->empty() && logprobs_ == false && !output.finished() &&
        !output.prompt_logprobs.has_value() &&
        !(return_token_ids_ && !output.token_ids_delta.empty())) {
      return "";
    }
  }
  const bool first_chunk = !state.started;
  state.started = true;
  return StreamChunk(state, delta, output, first_chunk);
}

namespace {

nlohmann::json UsageOf(int64_t prompt_tokens, int64_t completion_tokens) {
  return nlohmann::json{{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

std::string ResponseAssembler::StreamChunk(const ChoiceState& state, const Choice& delta,
                                           const GenerateOutput& output, bool first_chunk) const {
  std::string out;
  if (lazy_role_ && first_chunk) {
    Choice role;
    role.index = delta.index;
    nlohmann::json chunk = BuildChatChunk(meta_, role, /*first=*/true);
    if (return_token_ids_) chunk["prompt_token_ids"] = state.prompt_token_ids;
    if (continuous_usage_) chunk["usage"] = UsageOf(state.prompt_tokens, 0);
    if (prompt_text_.has_value()) chunk["prompt_text"] = *prompt_text_;
    out += SseEvent(chunk);
  }
  nlohmann::json chunk = kind_ == ApiKind::kChat ? BuildChatChunk(meta_, delta, /*first=*/false)
                                                 : BuildCompletionChunk(meta_, delta);
  if (return_token_ids_) {
    nlohmann::json& choice = chunk["choices"][0];
    std::vector<int32_t> ids;
    if (kind_ == ApiKind::kCompletion && first_chunk) {
      // vLLM: the prompt's ids on a choice's first chunk (and, with echo, first in token_ids).
      choice["prompt_token_ids"] = state.prompt_token_ids;
      if (echo_) ids = state.prompt_token_ids;
    }
    ids.insert(ids.end(), output.token_ids_delta.begin(), output.token_ids_delta.end());
    choice["token_ids"] = std::move(ids);
  }
  if (continuous_usage_) chunk["usage"] = UsageOf(state.prompt_tokens, state.output_tokens);
  return out + SseEvent(chunk);
}

void ResponseAssembler::AddTokenIds(nlohmann::json* body) const {
  if (!return_token_ids_) return;
  nlohmann::json& list = (*body)["choices"];
  for (size_t i = 0; i < choices_.size() && i < list.size(); ++i) {
    const ChoiceState& state = choices_[i];
    std::vector<int32_t> ids;
    if (echo_) ids = state.prompt_token_ids;
    ids.insert(ids.end(), state.token_ids.begin(), state.token_ids.end());
    list[i]["token_ids"] = std::move(ids);
    if (kind_ == ApiKind::kCompletion) list[i]["prompt_token_ids"] = state.prompt_token_ids;
  }
  if (kind_ == ApiKind::kChat && !choices_.empty()) {
    (*body)["prompt_token_ids"] = choices_.front().prompt_token_ids;
  }
}

Usage ResponseAssembler::TotalUsage() const {
  Usage usage;
  for (size_t i = 0; i < choices_.size(); ++i) {
    // The prompt is counted once however many choices it has (as vLLM does).
    if (i % static_cast<size_t>(n_) == 0) usage.prompt_tokens += choices_[i].prompt_tokens;
    usage.completion_tokens += choices_[i].output_tokens;
  }
  if (prompt_tokens_details_ && !choices_.empty()) {
    // vLLM: the first output's count (a completion body: the last prompt's).
    usage.cached_tokens = (kind_ == ApiKind::kCompletion && !stream_)
                              ? choices_.back().cached_tokens
                              : choices_.front().cached_tokens;
    // Only chat reports the prompt tokens written to the prefix cache (vLLM's completions
    // leave created_cache_tokens unset).
    if (kind_ == ApiKind::kChat) usage.created_cache_tokens = choices_.front().created_cache_tokens;
  }
  return usage;
}

std::string ResponseAssembler::Finish() const {
  if (stream_) {
    std::string out;
    if (log_outputs_) LogFinished();
    if (include_usage_) {
      nlohmann::json chunk = BuildUsageChunk(
          meta_, kind_ == ApiKind::kChat ? "chat.completion.chunk" : "text_completion",
          TotalUsage());
      // vLLM: metrics ride on the usage chunk, for a single stream only.
      if (per_request_metrics_ && choices_.size() == 1) chunk["metrics"] = MetricsJson(true);
      out += SseEvent(chunk);
    }
    out += kSseDone;
    return out;
  }
  if (log_outputs_) LogFinished();
  std::vector<Choice> choices;
  choices.reserve(choices_.size());
  for (const ChoiceState& state : choices_) choices.push_back(state.choice);
  nlohmann::json body = kind_ == ApiKind::kChat
                            ? BuildChatCompletionResponse(meta_, choices, TotalUsage())
                            : BuildCompletionResponse(meta_, choices, TotalUsage());
  AddTokenIds(&body);
  if (prompt_text_.has_value()) body["prompt_text"] = *prompt_text_;
  if (per_request_metrics_ && choices_.size() == 1) body["metrics"] = MetricsJson(false);
  return DumpJson(body);
}

std::string ResponseAssembler::StreamError(const absl::Status& status) {
  return SseEvent(ErrorBody(status)) + std::string(kSseDone);
}

}  // namespace vllm::frontend
