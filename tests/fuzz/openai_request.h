// What the API server does with a POST body, for the http_request and json_request fuzzers:
// ParseJsonObject, then ParseCompletionRequest and ParseChatCompletionRequest (both, whatever
// the path, for coverage), then the server's next steps on success (FanOut; the chat
// template and the tokenizer of the bundled model), or the error body on failure.
#ifndef VLLM_TESTS_FUZZ_OPENAI_REQUEST_H_
#define VLLM_TESTS_FUZZ_OPENAI_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/codec.h"
#include "core/sampling_params.h"
#include "frontend/jinja/chat_template.h"
#include "frontend/openai/api_server_response.h"
#include "frontend/openai/chat_tools.h"
#include "frontend/openai/kv_transfer_params.h"
#include "frontend/openai/openai_protocol.h"
#include "frontend/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_util.h"

namespace vllm::fuzz {

inline constexpr char kServedModel[] = "kjv-llama-tiny";

// The bundled model's tokenizer and chat template, loaded once (LLVMFuzzerInitialize).
struct ServedModel {
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  std::optional<frontend::ChatTemplate> chat_template;
};

inline ServedModel& Served() {
  static ServedModel* model = [] {
    auto* m = new ServedModel;
    auto tokenizer =
        frontend::Tokenizer::Load(std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny");
    FUZZ_CHECK(tokenizer.ok(),
               "cannot load the bundled tokenizer: " + tokenizer.status().ToString());
    m->tokenizer = *std::move(tokenizer);
    auto parsed = frontend::ChatTemplate::Parse(m->tokenizer->chat_template());
    FUZZ_CHECK(parsed.ok(),
               "cannot parse the bundled chat template: " + parsed.status().ToString());
    m->chat_template.emplace(*std::move(parsed));
    return m;
  }();
  return *model;
}

// A failed request must be answered with a 4xx and an error body that serialises to JSON
// (which parses back) naming the problem.
inline void CheckErrorBody(const absl::Status& status) {
  FUZZ_CHECK(!status.ok(), "CheckErrorBody on OK");
  const int http = frontend::HttpStatusFor(status);
  FUZZ_CHECK(http == 400 || http == 404 || http == 413,
             "a bad request maps to HTTP " + std::to_string(http) + ": " + status.ToString());
  const std::string body = frontend::DumpJson(frontend::ErrorBody(status));
  const nlohmann::json back = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!back.is_discarded(), "the error body is not JSON: " + body);
  FUZZ_CHECK(back.contains("error") && back["error"].is_object(), "error body without error");
}

// What a parser promises about an accepted request's options.
inline void CheckOptions(const frontend::GenerationOptions& options) {
  FUZZ_CHECK(options.n >= 1 && options.n <= frontend::GetRequestLimits().max_n, "n out of range");
  FUZZ_CHECK(core::ValidateSamplingParams(options.params).ok(), "accepted invalid sampling params");
  FUZZ_CHECK(
      options.stop.size() <= static_cast<size_t>(frontend::GetRequestLimits().max_stop_strings),
      "too many stop strings");
  for (const std::string& s : options.stop) {
    FUZZ_CHECK(!s.empty() && s.size() <= frontend::kMaxStopStringBytes, "bad stop string");
  }
  FUZZ_CHECK(options.stream || !options.include_usage, "include_usage without stream");
  if (options.kv_transfer_params.has_value()) {
    // Accepted kv_transfer_params reach the engine (its codec's bounds are the API's), and
    // what a response writes of them is accepted again unchanged.
    core::EngineCoreRequest request;
    request.request_id = "cmpl-fuzz-0";
    request.kv_transfer_params = options.kv_transfer_params;
    auto decoded = core::DecodeEngineCoreRequest(core::Encode(request));
    FUZZ_CHECK(decoded.ok() && decoded->kv_transfer_params == options.kv_transfer_params,
               "accepted kv_transfer_params the engine codec refuses or changes");
    nlohmann::ordered_json body;
    body["kv_transfer_params"] = frontend::KvTransferParamsJson(*options.kv_transfer_params);
    auto back = frontend::ParseKvTransferParams(body);
    FUZZ_CHECK(back.ok() && *back == options.kv_transfer_params,
               "kv_transfer_params written in a response do not parse back");
  }
}

inline void Tokenize(const std::string& text) {
  const frontend::Tokenizer& tokenizer = *Served().tokenizer;
  auto ids = tokenizer.Encode(text, /*add_special_tokens=*/true);
  FUZZ_CHECK(ids.ok(), "Encode failed: " + ids.status().ToString());
  for (int32_t id : *ids) {
    FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size(), "Encode returned an id outside the vocab");
  }
}

inline void CheckCompletion(const nlohmann::ordered_json& body) {
  auto request = frontend::ParseCompletionRequest(body, kServedModel);
  if (!request.ok()) return CheckErrorBody(request.status());
  FUZZ_CHECK(request->model == kServedModel, "accepted another model");
  FUZZ_CHECK(
      !request->prompts.empty() &&
          request->prompts.size() <= static_cast<size_t>(frontend::GetRequestLimits().max_prompts),
      "prompt count out of range");
  CheckOptions(request->options);
  const size_t choices = request->prompts.size() * static_cast<size_t>(request->options.n);
  FUZZ_CHECK(choices <= static_cast<size_t>(frontend::kMaxChoicesPerRequest), "too many choices");
  const std::vector<frontend::GenerateRequest> fanned =
      frontend::FanOut(request->prompts, request->options, "cmpl-fuzz", 0.0);
  FUZZ_CHECK(fanned.size() == choices, "FanOut made the wrong number of requests");
  for (const frontend::Prompt& p : request->prompts) {
    FUZZ_CHECK(p.text.has_value() ? !p.text->empty() : !p.token_ids.empty(), "empty prompt");
    if (p.text.has_value()) Tokenize(*p.text);
  }
}

inline void CheckChat(const nlohmann::ordered_json& body) {
  auto request = frontend::ParseChatCompletionRequest(body, kServedModel);
  if (!request.ok()) return CheckErrorBody(request.status());
  FUZZ_CHECK(request->model == kServedModel, "accepted another model");
  FUZZ_CHECK(!request->messages.empty() &&
                 request->messages.size() <= static_cast<size_t>(frontend::kMaxChatMessages),
             "message count out of range");
  CheckOptions(request->options);
  FUZZ_CHECK(!(request->add_generation_prompt && request->continue_final_message),
             "accepted add_generation_prompt with continue_final_message");
  // Tool calling (as ParseGeneration, with a server that runs the hermes parser): a choice
  // refused is a 400; one accepted constrains required / named choices by a grammar.
  static const auto* hermes = frontend::parsers::MakeToolParser("hermes")->release();
  const frontend::ChatParsers parsers{hermes, false, nullptr};
  auto tools = frontend::ParseToolRequest(body, parsers);
  if (!tools.ok()) return CheckErrorBody(tools.status());
  core::SamplingParams params = request->options.params;
  if (absl::Status s = frontend::ApplyToolChoiceGrammar(body, *tools, &params); !s.ok()) {
    return CheckErrorBody(s);
  }
  FUZZ_CHECK(params.structured_outputs.has_value() ==
                 (tools->choice == frontend::ToolChoice::kRequired ||
                  tools->choice == frontend::ToolChoice::kNamed ||
                  request->options.params.structured_outputs.has_value()),
             "a forced tool choice without its grammar");
  auto messages = frontend::TemplateMessages(body);
  if (!messages.ok()) return CheckErrorBody(messages.status());
  FUZZ_CHECK(messages->size() == request->messages.size(), "template messages lost or added");
  auto kwargs = frontend::TemplateKwargs(body);
  if (!kwargs.ok()) return CheckErrorBody(kwargs.status());
  if (!frontend::ChatOutputFor(body, *tools, *kwargs, parsers).ok()) return;
  const ServedModel& served = Served();
  auto prompt = served.chat_template->RenderJson(
      *messages, tools->tools, *kwargs, request->add_generation_prompt,
      served.tokenizer->bos_token(), served.tokenizer->eos_token());
  if (!prompt.ok()) {
    // The bundled template raises on role orders it does not support: a 400, never a crash.
    return CheckErrorBody(prompt.status());
  }
  Tokenize(*prompt);
}

// POST /tokenize: the completion form through the tokenizer, the chat form through the chat
// template (as AsyncLLM::TokenizeChat: the same template, then Encode).
inline void CheckTokenize(const nlohmann::ordered_json& body) {
  auto request = frontend::ParseTokenizeRequest(body, kServedModel);
  if (!request.ok()) return CheckErrorBody(request.status());
  FUZZ_CHECK(request->model == kServedModel, "accepted another model");
  if (request->prompt.has_value()) {
    FUZZ_CHECK(request->messages.empty(), "a tokenize request with a prompt and messages");
    return Tokenize(*request->prompt);
  }
  FUZZ_CHECK(!request->messages.empty() &&
                 request->messages.size() <= static_cast<size_t>(frontend::kMaxChatMessages),
             "message count out of range");
  FUZZ_CHECK(!(request->add_generation_prompt && request->continue_final_message),
             "accepted add_generation_prompt with continue_final_message");
  const ServedModel& served = Served();
  auto prompt =
      served.chat_template->Render(request->messages, request->add_generation_prompt,
                                   served.tokenizer->bos_token(), served.tokenizer->eos_token());
  if (!prompt.ok()) return CheckErrorBody(prompt.status());
  Tokenize(*prompt);
}

// POST /detokenize: accepted ids are non-negative; those inside the vocabulary decode to
// valid UTF-8 and have token strings.
inline void CheckDetokenize(const nlohmann::ordered_json& body) {
  auto request = frontend::ParseDetokenizeRequest(body, kServedModel);
  if (!request.ok()) return CheckErrorBody(request.status());
  const frontend::Tokenizer& tokenizer = *Served().tokenizer;
  std::vector<int32_t> in_vocab;
  for (int32_t id : request->tokens) {
    FUZZ_CHECK(id >= 0, "accepted a negative token id");
    if (id < tokenizer.vocab_size()) {
      in_vocab.push_back(id);
      FUZZ_CHECK(tokenizer.IdToToken(id).has_value(), "an id in the vocabulary without a string");
    }
  }
  const std::string text = tokenizer.Decode(in_vocab, /*skip_special_tokens=*/false);
  FUZZ_CHECK(IsWellFormedUtf8(text), "Decode returned invalid UTF-8");
  const std::string response = frontend::DumpJson(frontend::BuildDetokenizeResponse(text));
  FUZZ_CHECK(!nlohmann::json::parse(response, nullptr, false).is_discarded(),
             "the detokenize response is not JSON");
}

// The whole body path. Returns whether the body was a JSON object.
inline bool CheckGenerationBody(std::string_view body) {
  absl::StatusOr<nlohmann::ordered_json> json = frontend::ParseJsonObject(body);
  if (!json.ok()) {
    CheckErrorBody(json.status());
    return false;
  }
  CheckCompletion(*json);
  CheckChat(*json);
  CheckTokenize(*json);
  CheckDetokenize(*json);
  return true;
}

}  // namespace vllm::fuzz

#endif  // VLLM_TESTS_FUZZ_OPENAI_REQUEST_H_
