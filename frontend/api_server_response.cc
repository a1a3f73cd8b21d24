#include "frontend/api_server_response.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

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
      requests.push_back(std::move(r));
    }
  }
  return requests;
}

absl::StatusOr<ParsedGeneration> ParseGeneration(ApiKind kind, std::string_view body,
                                                 const EngineClient& engine) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::json json, ParseJsonObject(body));
  const std::string model_name = engine.ModelName();
  ParsedGeneration parsed;
  parsed.kind = kind;
  if (kind == ApiKind::kCompletion) {
    VLLM_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(json, model_name));
    parsed.prompts = std::move(r.prompts);
    parsed.options = std::move(r.options);
    parsed.logprobs = parsed.options.params.logprobs.has_value();
    return parsed;
  }
  VLLM_ASSIGN_OR_RETURN(ChatCompletionRequest r, ParseChatCompletionRequest(json, model_name));
  VLLM_ASSIGN_OR_RETURN(
      std::string prompt,
      engine.ApplyChatTemplate(r.messages, r.add_generation_prompt, r.continue_final_message));
  parsed.prompts.push_back(Prompt{std::move(prompt), {}});
  parsed.options = std::move(r.options);
  parsed.logprobs = r.logprobs;
  return parsed;
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

std::string ResponseAssembler::Start() {
  if (!stream_ || kind_ != ApiKind::kChat) return "";
  std::string out;
  for (const ChoiceState& state : choices_) {
    Choice role;
    role.index = state.choice.index;
    out += SseEvent(BuildChatChunk(meta_, role, /*first=*/true));
  }
  return out;
}

std::string ResponseAssembler::OnOutput(int32_t index, const GenerateOutput& output) {
  VLLM_CHECK(index >= 0 && index < static_cast<int32_t>(choices_.size())) << index;
  ChoiceState& state = choices_[index];
  VLLM_CHECK(!state.finished) << "output after the final one for choice " << index;
  state.prompt_tokens = output.num_prompt_tokens;
  state.output_tokens = output.num_output_tokens;
  if (output.finished()) {
    state.finished = true;
    ++num_finished_;
  }
  Choice& acc = state.choice;
  if (!stream_) {
    acc.text += output.text_delta;
    if (acc.logprobs.has_value()) {
      acc.logprobs->insert(acc.logprobs->end(), output.logprobs.begin(), output.logprobs.end());
    }
    acc.finish_reason = output.finish_reason;
    acc.stop_string = output.stop_string;
    acc.stop_token_id = output.stop_token_id;
    return "";
  }
  if (output.text_delta.empty() && output.logprobs.empty() && !output.finished()) return "";
  Choice delta;
  delta.index = index;
  delta.text = output.text_delta;
  if (logprobs_) delta.logprobs = output.logprobs;
  delta.text_offset = acc.text_offset;
  delta.finish_reason = output.finish_reason;
  delta.stop_string = output.stop_string;
  delta.stop_token_id = output.stop_token_id;
  acc.text_offset += output.text_delta.size();
  return SseEvent(kind_ == ApiKind::kChat ? BuildChatChunk(meta_, delta, /*first=*/false)
                                          : BuildCompletionChunk(meta_, delta));
}

Usage ResponseAssembler::TotalUsage() const {
  Usage usage;
  for (size_t i = 0; i < choices_.size(); ++i) {
    // The prompt is counted once however many choices it has (as vLLM does).
    if (i % static_cast<size_t>(n_) == 0) usage.prompt_tokens += choices_[i].prompt_tokens;
    usage.completion_tokens += choices_[i].output_tokens;
  }
  return usage;
}

std::string ResponseAssembler::Finish() const {
  if (stream_) {
    std::string out;
    if (include_usage_) {
      out += SseEvent(BuildUsageChunk(
          meta_, kind_ == ApiKind::kChat ? "chat.completion.chunk" : "text_completion",
          TotalUsage()));
    }
    out += kSseDone;
    return out;
  }
  std::vector<Choice> choices;
  choices.reserve(choices_.size());
  for (const ChoiceState& state : choices_) choices.push_back(state.choice);
  return DumpJson(kind_ == ApiKind::kChat
                      ? BuildChatCompletionResponse(meta_, choices, TotalUsage())
                      : BuildCompletionResponse(meta_, choices, TotalUsage()));
}

std::string ResponseAssembler::StreamError(const absl::Status& status) {
  return SseEvent(ErrorBody(status)) + std::string(kSseDone);
}

}  // namespace vllm::frontend
