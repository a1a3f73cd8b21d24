#include "frontend/openai/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_util.h"
#include "base/ordered_json.h"
#include "base/status_macros.h"
#include "frontend/openai/kv_transfer_params.h"
#include "frontend/openai/request_fields.h"
#include "frontend/openai/request_limits.h"
#include "frontend/openai/structured_output_request.h"

namespace vllm::frontend {
namespace {

using nlohmann::json;
// Request bodies keep their keys in the client's order (base/ordered_json.h).
using Body = nlohmann::ordered_json;

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// A short rendering of a JSON value for error messages.
std::string Show(const Body& value) {
  std::string text = value.dump(-1, ' ', false, Body::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

absl::Status WrongType(const char* name, const char* expected, const Body& value) {
  return InvalidParam(name, absl::StrCat(name, " must be ", expected, ", got ", value.type_name(),
                                         " ", Show(value)));
}

// Field readers: a missing field or null yields nullopt (OpenAI: null means default).
const Body* Find(const Body& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> GetNumber(const Body& body, const char* name) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(name, "a number", *v);
  return v->get<double>();
}

// An integer in [lo, hi]; a float with an integral value is accepted (as pydantic does).
absl::StatusOr<int64_t> AsInt(const Body& v, const char* name, int64_t lo, int64_t hi) {
  int64_t out = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      return InvalidParam(name, absl::StrCat(name, " must be in [", lo, ", ", hi, "], got ", u));
    }
    out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(std::trunc(d) == d) || d < -9.2e18 || d > 9.2e18) {
      return WrongType(name, "an integer", v);
    }
    out = static_cast<int64_t>(d);
  } else {
    return WrongType(name, "an integer", v);
  }
  if (out < lo || out > hi) {
    return InvalidParam(name, absl::StrCat(name, " must be in [", lo, ", ", hi, "], got ", out));
  }
  return out;
}

absl::StatusOr<std::optional<int64_t>> GetInt(const Body& body, const char* name, int64_t lo,
                                              int64_t hi) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  VLLM_ASSIGN_OR_RETURN(int64_t out, AsInt(*v, name, lo, hi));
  return out;
}

absl::StatusOr<std::optional<bool>> GetBool(const Body& body, const char* name) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(name, "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> GetString(const Body& body, const char* name) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return WrongType(name, "a string", *v);
  return v->get<std::string>();
}

// Assigns `*out` from an optional result when present.
template <typename T, typename U>
absl::Status Assign(absl::StatusOr<std::optional<U>> value, T* out) {
  if (!value.ok()) return value.status();
  if (value->has_value()) *out = static_cast<T>(**value);
  return absl::OkStatus();
}

absl::Status CheckModel(const Body& body, absl::string_view served_model, std::string* model) {
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> name, GetString(body, "model"));
  if (!name.has_value() || *name == served_model) {
    *model = std::string(served_model);
    return absl::OkStatus();
  }
  absl::Status status =
      absl::NotFoundError(absl::StrCat("The model `", *name, "` does not exist."));
  status.SetPayload(kParamPayloadUrl, absl::Cord("model"));
  return status;
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const Body& array, const char* name) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const Body& item : array) {
    if (!item.is_number_integer()) {
      return WrongType(name, "a list of token ids (integers)", item);
    }
    VLLM_ASSIGN_OR_RETURN(int64_t id, AsInt(item, name, 0, kInt32Max));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

absl::Status ParseStop(const Body& body, GenerationOptions* options) {
  const Body* v = Find(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    options->stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    VLLM_RETURN_IF_ERROR(CheckStopStringCount(v->size()));
    for (const Body& s : *v) {
      if (!s.is_string()) return WrongType("stop", "a string or a list of strings", s);
      options->stop.push_back(s.get<std::string>());
    }
  } else {
    return WrongType("stop", "a string or a list of strings", *v);
  }
  for (const std::string& s : options->stop) {
    if (s.empty()) return InvalidParam("stop", "stop strings must not be empty");
    if (s.size() > kMaxStopStringBytes) {
      return InvalidParam("stop", absl::StrCat("stop strings must be at most ", kMaxStopStringBytes,
                                               " bytes, got one of ", s.size()));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStreamOptions(const Body& body, GenerationOptions* options) {
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "stream"), &options->stream));
  const Body* so = Find(body, "stream_options");
  if (so == nullptr) return absl::OkStatus();
  if (!so->is_object()) return WrongType("stream_options", "an object", *so);
  if (!options->stream) {
    return InvalidParam("stream_options", "stream_options can only be defined when `stream=True`.");
  }
  return Assign(GetBool(*so, "include_usage"), &options->include_usage);
}

// Sampling fields common to both endpoints (max_tokens and logprobs are endpoint-specific).
absl::Status ParseCommon(const Body& body, GenerationOptions* options) {
  core::SamplingParams& p = options->params;
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> n, GetInt(body, "n", kInt32Min, kInt32Max));
  if (n.has_value()) {
    VLLM_RETURN_IF_ERROR(CheckNumSequences(*n, "n"));
    options->n = static_cast<int32_t>(*n);
  }
  VLLM_RETURN_IF_ERROR(Assign(GetNumber(body, "temperature"), &p.temperature));
  VLLM_RETURN_IF_ERROR(Assign(GetNumber(body, "top_p"), &p.top_p));
  VLLM_RETURN_IF_ERROR(Assign(GetInt(body, "top_k", kInt32Min, kInt32Max), &p.top_k));
  VLLM_RETURN_IF_ERROR(Assign(GetNumber(body, "min_p"), &p.min_p));
  VLLM_RETURN_IF_ERROR(Assign(GetNumber(body, "presence_penalty"), &p.presence_penalty));
  VLLM_RETURN_IF_ERROR(Assign(GetNumber(body, "frequency_penalty"), &p.frequency_penalty));
  VLLM_RETURN_IF_ERROR(Assign(GetNumber(body, "repetition_penalty"), &p.repetition_penalty));
  VLLM_RETURN_IF_ERROR(Assign(GetInt(body, "min_tokens", kInt32Min, kInt32Max), &p.min_tokens));
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "ignore_eos"), &p.ignore_eos));
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> seed,
                        GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max()));
  if (seed.has_value()) p.seed = *seed;
  if (const Body* ids = Find(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return WrongType("stop_token_ids", "a list of integers", *ids);
    VLLM_ASSIGN_OR_RETURN(p.stop_token_ids, ParseTokenIds(*ids, "stop_token_ids"));
  }
  VLLM_RETURN_IF_ERROR(ParseStop(body, options));
  VLLM_RETURN_IF_ERROR(ParseStreamOptions(body, options));
  VLLM_RETURN_IF_ERROR(ParseStructuredOutputs(body, &p));
  VLLM_RETURN_IF_ERROR(
      Assign(GetBool(body, "include_stop_str_in_output"), &options->include_stop_str_in_output));
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "skip_special_tokens"), &options->skip_special_tokens));
  VLLM_RETURN_IF_ERROR(Assign(GetInt(body, "priority", kInt32Min, kInt32Max), &options->priority));
  VLLM_ASSIGN_OR_RETURN(options->user, GetString(body, "user"));
  VLLM_RETURN_IF_ERROR(
      Assign(GetBool(body, "return_tokens_as_token_ids"), &options->return_tokens_as_token_ids));
  VLLM_ASSIGN_OR_RETURN(options->kv_transfer_params, ParseKvTransferParams(body));
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> prompt_logprobs,
                        GetInt(body, "prompt_logprobs", kInt32Min, kInt32Max));
  if (prompt_logprobs.has_value()) {
    // vLLM's check_logprobs: only prompt_logprobs = 0 may stream (the range is checked by
    // ValidateSamplingParams later).
    if (options->stream && (*prompt_logprobs > 0 || *prompt_logprobs == -1)) {
      return InvalidParam("prompt_logprobs",
                          "`prompt_logprobs` are not available when `stream=True`.");
    }
    p.prompt_logprobs = static_cast<int32_t>(*prompt_logprobs);
  }
  return absl::OkStatus();
}

// Runs core::ValidateSamplingParams and attaches the field (the message's first word,
// renamed through `rename` where the request spells it differently).
absl::Status ValidateParams(const core::SamplingParams& params,
                            const std::vector<std::pair<std::string, std::string>>& rename) {
  absl::Status status = core::ValidateSamplingParams(params);
  if (status.ok()) return status;
  std::string message(status.message());
  std::string field = message.substr(0, message.find_first_of(" ("));
  for (const auto& [from, to] : rename) {
    if (field == from) {
      field = to;
      message = absl::StrCat(to, message.substr(from.size()));
    }
  }
  return InvalidParam(field, message);
}

absl::StatusOr<std::vector<Prompt>> ParsePrompts(const Body& body) {
  const Body* v = Find(body, "prompt");
  if (v == nullptr) return InvalidParam("prompt", "prompt is required");
  std::vector<Prompt> prompts;
  if (v->is_string()) {
    prompts.push_back(Prompt{v->get<std::string>(), {}});
  } else if (v->is_array() && !v->empty() && v->front().is_number()) {
    VLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseTokenIds(*v, "prompt"));
    prompts.push_back(Prompt{std::nullopt, std::move(ids)});
  } else if (v->is_array() && !v->empty()) {
    VLLM_RETURN_IF_ERROR(CheckPromptCount(v->size()));
    for (const Body& item : *v) {
      if (item.is_string()) {
        prompts.push_back(Prompt{item.get<std::string>(), {}});
      } else if (item.is_array()) {
        VLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseTokenIds(item, "prompt"));
        prompts.push_back(Prompt{std::nullopt, std::move(ids)});
      } else {
        return WrongType("prompt", "a string, a list of strings or a list of token-id lists", item);
      }
    }
  } else if (v->is_array()) {
    return InvalidParam("prompt", "prompt must not be empty");
  } else {
    return WrongType("prompt", "a string, a list of strings or a list of token ids", *v);
  }
  for (const Prompt& prompt : prompts) {
    if (prompt.text.has_value() ? prompt.text->empty() : prompt.token_ids.empty()) {
      return InvalidParam("prompt", "prompt must not be empty");
    }
  }
  return prompts;
}

absl::Status RejectUnsupportedCompletionFields(const Body& body) {
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> best_of,
                        GetInt(body, "best_of", 1, GetRequestLimits().max_n));
  if (best_of.value_or(1) != 1) {
    return InvalidParam("best_of", absl::StrCat("best_of must be 1, got ", *best_of));
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> suffix, GetString(body, "suffix"));
  if (suffix.has_value() && !suffix->empty()) {
    return InvalidParam("suffix", "suffix is not supported by this server");
  }
  return absl::OkStatus();
}

absl::Status CheckChoiceCount(size_t num_prompts, int32_t n) {
  const size_t max = static_cast<size_t>(std::max(kMaxChoicesPerRequest, GetRequestLimits().max_n));
  if (num_prompts * static_cast<size_t>(n) > max) {
    return InvalidParam("n", absl::StrCat("the number of prompts (", num_prompts, ") times n (", n,
                                          ") must be at most ", max));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParseContent(const Body& message, const std::string& role) {
  const Body* content = Find(message, "content");
  if (content == nullptr) {
    if (role == "assistant") return std::string();
    return InvalidParam("messages", absl::StrCat("a ", role, " message needs a content"));
  }
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    return WrongType("messages", "content as a string or a list of text parts", *content);
  }
  std::vector<std::string> texts;
  for (const Body& part : *content) {
    if (!part.is_object()) return WrongType("messages", "a content part object", part);
    auto type = part.find("type");
    if (type == part.end() || *type != "text") {
      return InvalidParam("messages",
                          absl::StrCat("only content parts of type \"text\" are supported, got ",
                                       type == part.end() ? "none" : Show(*type)));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return InvalidParam("messages", "a text content part needs a string \"text\"");
    }
    texts.push_back(text->get<std::string>());
  }
  return absl::StrJoin(texts, "\n");
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const Body& body) {
  const Body* v = Find(body, "messages");
  if (v == nullptr) return InvalidParam("messages", "messages is required");
  if (!v->is_array()) return WrongType("messages", "a list of messages", *v);
  if (v->empty()) return InvalidParam("messages", "messages must not be empty");
  if (v->size() > static_cast<size_t>(kMaxChatMessages)) {
    return InvalidParam("messages", absl::StrCat("messages has ", v->size(), " entries; at most ",
                                                 kMaxChatMessages, " are allowed"));
  }
  std::vector<ChatMessage> messages;
  for (const Body& m : *v) {
    if (!m.is_object()) return WrongType("messages", "a list of message objects", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return InvalidParam("messages", "every message needs a string \"role\"");
    }
    std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return InvalidParam("messages",
                          absl::StrCat("unknown message role \"", r,
                                       "\"; expected system, developer, user, assistant or tool"));
    }
    VLLM_ASSIGN_OR_RETURN(std::string content, ParseContent(m, r));
    messages.push_back(ChatMessage{std::move(r), std::move(content)});
  }
  return messages;
}

// vLLM refuses a request's own chat template unless started with
// --trust-request-chat-template (which we do not have).
absl::Status RejectRequestChatTemplate(const Body& body) {
  if (Find(body, "chat_template") == nullptr) return absl::OkStatus();
  return InvalidParam("chat_template",
                      "Chat template is passed with request, but this server renders only the "
                      "model's chat template (vLLM refuses it too without "
                      "--trust-request-chat-template)");
}

// add_generation_prompt / continue_final_message, top-level or in chat_template_kwargs, of a
// chat completion or a chat /tokenize body.
template <typename Request>
absl::Status ParseTemplateFlags(const Body& body, Request* request) {
  VLLM_RETURN_IF_ERROR(RejectRequestChatTemplate(body));
  VLLM_RETURN_IF_ERROR(
      Assign(GetBool(body, "add_generation_prompt"), &request->add_generation_prompt));
  VLLM_RETURN_IF_ERROR(
      Assign(GetBool(body, "continue_final_message"), &request->continue_final_message));
  if (const Body* kwargs = Find(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (!kwargs->is_object()) return WrongType("chat_template_kwargs", "an object", *kwargs);
    VLLM_RETURN_IF_ERROR(
        Assign(GetBool(*kwargs, "add_generation_prompt"), &request->add_generation_prompt));
    VLLM_RETURN_IF_ERROR(
        Assign(GetBool(*kwargs, "continue_final_message"), &request->continue_final_message));
  }
  if (request->add_generation_prompt && request->continue_final_message) {
    return InvalidParam("continue_final_message",
                        "continue_final_message and add_generation_prompt cannot both be true");
  }
  return absl::OkStatus();
}

json TokenIdsJson(const std::vector<int32_t>& ids) {
  json out = json::array();
  for (int32_t id : ids) out.push_back(id);
  return out;
}

json LogprobEntry(const TokenLogprob& t) {
  json bytes = json::array();
  for (unsigned char c : t.token) bytes.push_back(static_cast<int>(c));
  return json{{"token", t.token}, {"logprob", t.logprob}, {"bytes", std::move(bytes)}};
}

json ChatLogprobs(const std::vector<PositionLogprobs>& positions) {
  json content = json::array();
  for (const PositionLogprobs& pos : positions) {
    json entry = LogprobEntry(pos.sampled);
    json top = json::array();
    for (const TokenLogprob& t : pos.top) top.push_back(LogprobEntry(t));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return json{{"content", std::move(content)}};
}

// vLLM's clamp_prompt_logprobs: -inf becomes -9999.0 (JSON has no infinity).
double ClampLogprob(float logprob) { return std::isinf(logprob) ? -9999.0 : logprob; }

// vLLM's prompt_logprobs list: null for the first position, then {"<token id>": {"logprob",
// "rank", "decoded_token"}} holding the prompt token and its top alternatives.
json PromptLogprobsJson(const std::vector<PositionLogprobs>& positions) {
  json out = json::array();
  for (const PositionLogprobs& pos : positions) {
    if (pos.no_logprob) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    auto add = [&entry](const TokenLogprob& t) {
      entry[std::to_string(t.token_id)] =
          json{{"logprob", ClampLogprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.token}};
    };
    add(pos.sampled);
    for (const TokenLogprob& t : pos.top) add(t);
    out.push_back(std::move(entry));
  }
  return out;
}

json CompletionLogprobs(const std::vector<PositionLogprobs>& positions, size_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const PositionLogprobs& pos : positions) {
    tokens.push_back(pos.sampled.token);
    if (pos.no_logprob) {  // echo: the prompt's first token
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      offsets.push_back(offset);
      offset += pos.sampled.token.size();
      continue;
    }
    token_logprobs.push_back(pos.sampled.logprob);
    json alternatives = json::object();
    for (const TokenLogprob& t : pos.top) alternatives[t.token] = t.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += pos.sampled.token.size();
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

json FinishReasonJson(const Choice& choice) {
  if (!choice.finish_reason.has_value()) return nullptr;
  if (choice.tool_calls_finish && *choice.finish_reason == core::FinishReason::kStop) {
    return "tool_calls";
  }
  return std::string(core::FinishReasonName(*choice.finish_reason));
}

json StopReasonJson(const Choice& choice) {
  if (choice.stop_string.has_value()) return *choice.stop_string;
  if (choice.stop_token_id.has_value()) return *choice.stop_token_id;
  return nullptr;
}

json UsageJson(const Usage& usage) {
  json out{{"prompt_tokens", usage.prompt_tokens},
           {"completion_tokens", usage.completion_tokens},
           {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  if (usage.cached_tokens.has_value()) {
    out["prompt_tokens_details"] = json{{"cached_tokens", *usage.cached_tokens}};
    if (usage.created_cache_tokens.has_value()) {
      out["prompt_tokens_details"]["created_cache_tokens"] = *usage.created_cache_tokens;
    }
  }
  return out;
}

json KvTransferJson(const std::optional<kv_transfer::KVTransferParams>& params) {
  return params.has_value() ? KvTransferParamsJson(*params) : json();
}

json Envelope(const ResponseMeta& meta, absl::string_view object) {
  return json{{"id", meta.id},
              {"object", std::string(object)},
              {"created", meta.created},
              {"model", meta.model}};
}

}  // namespace

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

json ErrorBody(const absl::Status& status) {
  int code = HttpStatusFor(status);
  const char* type = "InternalServerError";
  switch (code) {
    case 400:
      type = "BadRequestError";
      break;
    case 401:
      type = "AuthenticationError";
      break;
    case 404:
      type = "NotFoundError";
      break;
    case 413:
      type = "RequestEntityTooLarge";
      break;
    case 503:
      type = "ServiceUnavailableError";
      break;
    default:
      break;
  }
  return ErrorBody(code, type, status.message(), ErrorParam(status));
}

json ErrorBody(int http_code, absl::string_view type, absl::string_view message,
               const std::optional<std::string>& param) {
  return json{{"error",
               {{"message", std::string(message)},
                {"type", std::string(type)},
                {"param", param.has_value() ? json(*param) : json(nullptr)},
                {"code", http_code}}}};
}

std::string DumpJson(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<nlohmann::ordered_json> ParseJsonObject(std::string_view body) {
  VLLM_ASSIGN_OR_RETURN(Body value, base::ParseOrderedJson(body, "Invalid JSON in request body"));
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("The request body must be a JSON object, got ", value.type_name()));
  }
  return value;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(const Body& body,
                                                         absl::string_view served_model) {
  CompletionRequest request;
  VLLM_RETURN_IF_ERROR(CheckModel(body, served_model, &request.model));
  VLLM_ASSIGN_OR_RETURN(request.prompts, ParsePrompts(body));
  VLLM_RETURN_IF_ERROR(RejectUnsupportedCompletionFields(body));
  VLLM_RETURN_IF_ERROR(RejectUnhonouredFields(body, /*chat=*/false));
  GenerationOptions& options = request.options;
  VLLM_RETURN_IF_ERROR(ParseCommon(body, &options));
  VLLM_RETURN_IF_ERROR(ParseVllmFields(body, /*chat=*/false, &options));
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                        GetInt(body, "max_tokens", kInt32Min, kInt32Max));
  // OpenAI's completions default is 16 tokens; vLLM's is "up to max_model_len" (unset).
  if (max_tokens.has_value()) options.params.max_tokens = static_cast<int32_t>(*max_tokens);
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs,
                        GetInt(body, "logprobs", kInt32Min, kInt32Max));
  if (logprobs.has_value()) options.params.logprobs = static_cast<int32_t>(*logprobs);
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "echo"), &request.echo));
  // vLLM answers echo with logprobs with the prompt tokens' logprobs too: prompt_logprobs
  // defaults to logprobs then.
  if (request.echo && options.params.logprobs.has_value() &&
      !options.params.prompt_logprobs.has_value()) {
    options.params.prompt_logprobs = options.params.logprobs;
  }
  VLLM_RETURN_IF_ERROR(ValidateParams(options.params, {}));
  VLLM_RETURN_IF_ERROR(CheckChoiceCount(request.prompts.size(), options.n));
  return request;
}

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(const Body& body,
                                                                 absl::string_view served_model) {
  ChatCompletionRequest request;
  VLLM_RETURN_IF_ERROR(CheckModel(body, served_model, &request.model));
  VLLM_ASSIGN_OR_RETURN(request.messages, ParseMessages(body));
  VLLM_RETURN_IF_ERROR(RejectUnhonouredFields(body, /*chat=*/true));
  GenerationOptions& options = request.options;
  VLLM_RETURN_IF_ERROR(ParseCommon(body, &options));
  VLLM_RETURN_IF_ERROR(ParseVllmFields(body, /*chat=*/true, &options));
  VLLM_RETURN_IF_ERROR(ParseTemplateFlags(body, &request));
  VLLM_ASSIGN_OR_RETURN(options.chat_echo,
                        ChatEcho(body, request.messages, request.add_generation_prompt));
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "add_special_tokens"), &request.add_special_tokens));
  // max_completion_tokens supersedes the deprecated max_tokens.
  const char* max_tokens_field =
      Find(body, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                        GetInt(body, max_tokens_field, kInt32Min, kInt32Max));
  if (max_tokens.has_value()) options.params.max_tokens = static_cast<int32_t>(*max_tokens);
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "logprobs"), &request.logprobs));
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> top_logprobs,
                        GetInt(body, "top_logprobs", kInt32Min, kInt32Max));
  if (top_logprobs.has_value() && !request.logprobs) {
    return InvalidParam("top_logprobs", "top_logprobs requires logprobs to be true");
  }
  if (request.logprobs) options.params.logprobs = static_cast<int32_t>(top_logprobs.value_or(0));
  VLLM_RETURN_IF_ERROR(ValidateParams(
      options.params, {{"logprobs", "top_logprobs"}, {"max_tokens", max_tokens_field}}));
  VLLM_RETURN_IF_ERROR(CheckChoiceCount(1, options.n));
  return request;
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(const Body& body,
                                                     absl::string_view served_model) {
  TokenizeRequest request;
  VLLM_RETURN_IF_ERROR(CheckModel(body, served_model, &request.model));
  if (body.contains("messages")) {
    VLLM_ASSIGN_OR_RETURN(request.messages, ParseMessages(body));
    VLLM_RETURN_IF_ERROR(ParseTemplateFlags(body, &request));
    request.add_special_tokens = false;
  } else {
    const Body* prompt = Find(body, "prompt");
    if (prompt == nullptr) {
      return InvalidParam("prompt", "prompt (a string) or messages (a chat) is required");
    }
    if (!prompt->is_string()) return WrongType("prompt", "a string", *prompt);
    request.prompt = prompt->get<std::string>();
  }
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "add_special_tokens"), &request.add_special_tokens));
  VLLM_RETURN_IF_ERROR(Assign(GetBool(body, "return_token_strs"), &request.return_token_strs));
  return request;
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(const Body& body,
                                                         absl::string_view served_model) {
  DetokenizeRequest request;
  VLLM_RETURN_IF_ERROR(CheckModel(body, served_model, &request.model));
  const Body* tokens = Find(body, "tokens");
  if (tokens == nullptr) return InvalidParam("tokens", "tokens (a list of token ids) is required");
  if (!tokens->is_array()) return WrongType("tokens", "a list of token ids (integers)", *tokens);
  VLLM_ASSIGN_OR_RETURN(request.tokens, ParseTokenIds(*tokens, "tokens"));
  return request;
}

json BuildTokenizeResponse(const std::vector<int32_t>& tokens, int32_t max_model_len,
                           const std::optional<std::vector<std::string>>& token_strs) {
  return json{{"count", tokens.size()},
              {"max_model_len", max_model_len},
              {"tokens", TokenIdsJson(tokens)},
              {"token_strs", token_strs.has_value() ? json(*token_strs) : json(nullptr)}};
}

json BuildDetokenizeResponse(const std::string& prompt) { return json{{"prompt", prompt}}; }

std::string TokenIdString(int32_t token_id) { return absl::StrCat("token_id:", token_id); }

json BuildCompletionResponse(const ResponseMeta& meta, const std::vector<Choice>& choices,
                             const Usage& usage) {
  json out = Envelope(meta, "text_completion");
  json list = json::array();
  for (const Choice& c : choices) {
    list.push_back(BuildCompletionChunk(meta, c)["choices"][0]);
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  out["kv_transfer_params"] =
      KvTransferJson(choices.empty() ? std::nullopt : choices.front().kv_transfer_params);
  return out;
}

namespace {

// reasoning under vLLM 0.33's name and the older reasoning_content (the same text).
void AddReasoning(const ChatMessageParts& parts, json* message) {
  if (!parts.reasoning.has_value()) return;
  (*message)["reasoning"] = *parts.reasoning;
  (*message)["reasoning_content"] = *parts.reasoning;
}

json ChatMessageJson(const Choice& c, const std::string& role) {
  if (!c.chat.has_value()) return json{{"role", role}, {"content", c.text}};
  const ChatMessageParts& parts = *c.chat;
  json message{{"role", role},
               {"content", parts.content.has_value() ? json(*parts.content) : json()}};
  AddReasoning(parts, &message);
  if (!parts.tool_calls.empty()) {
    json calls = json::array();
    for (const parsers::ToolCall& call : parts.tool_calls) {
      calls.push_back(json{{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

// A stream step's delta: each field only when it has something.
void AddChatParts(const ChatMessageParts& parts, json* delta) {
  if (parts.content.has_value()) (*delta)["content"] = *parts.content;
  AddReasoning(parts, delta);
  if (parts.tool_call_deltas.empty()) return;
  json calls = json::array();
  for (const parsers::ToolCallDelta& d : parts.tool_call_deltas) {
    json call{{"index", d.index}};
    json function = json::object();
    if (d.id.has_value()) {
      call["id"] = *d.id;
      call["type"] = "function";
    }
    if (d.name.has_value()) function["name"] = *d.name;
    function["arguments"] = d.arguments;
    call["function"] = std::move(function);
    calls.push_back(std::move(call));
  }
  (*delta)["tool_calls"] = std::move(calls);
}

}  // namespace

json BuildChatCompletionResponse(const ResponseMeta& meta, const std::vector<Choice>& choices,
                                 const Usage& usage) {
  json out = Envelope(meta, "chat.completion");
  json list = json::array();
  for (const Choice& c : choices) {
    list.push_back(json{{"index", c.index},
                        {"message", ChatMessageJson(c, meta.role)},
                        {"logprobs", c.logprobs.has_value() ? ChatLogprobs(*c.logprobs) : json()},
                        {"finish_reason", FinishReasonJson(c)},
                        {"stop_reason", StopReasonJson(c)}});
  }
  out["choices"] = std::move(list);
  // vLLM returns the (single) prompt's logprobs at the top level of a chat response.
  if (!choices.empty() && choices.front().prompt_logprobs.has_value()) {
    out["prompt_logprobs"] = PromptLogprobsJson(*choices.front().prompt_logprobs);
  }
  out["usage"] = UsageJson(usage);
  out["kv_transfer_params"] =
      KvTransferJson(choices.empty() ? std::nullopt : choices.front().kv_transfer_params);
  return out;
}

json BuildCompletionChunk(const ResponseMeta& meta, const Choice& c) {
  json out = Envelope(meta, "text_completion");
  out["choices"] = json::array(
      {json{{"index", c.index},
            {"text", c.text},
            {"logprobs",
             c.logprobs.has_value() ? CompletionLogprobs(*c.logprobs, c.text_offset) : json()},
            {"finish_reason", FinishReasonJson(c)},
            {"stop_reason", StopReasonJson(c)}}});
  if (c.prompt_logprobs.has_value()) {
    out["choices"][0]["prompt_logprobs"] = PromptLogprobsJson(*c.prompt_logprobs);
  }
  out["kv_transfer_params"] = KvTransferJson(c.kv_transfer_params);
  return out;
}

json BuildChatChunk(const ResponseMeta& meta, const Choice& c, bool first) {
  json out = Envelope(meta, "chat.completion.chunk");
  json delta = json::object();
  if (first) delta["role"] = meta.role;
  if (c.chat.has_value() && !first) {
    AddChatParts(*c.chat, &delta);
  } else if (first || !c.text.empty()) {
    delta["content"] = c.text;
  }
  json choice{{"index", c.index},
              {"delta", std::move(delta)},
              {"logprobs", c.logprobs.has_value() ? ChatLogprobs(*c.logprobs) : json()},
              {"finish_reason", FinishReasonJson(c)}};
  if (c.finish_reason.has_value()) choice["stop_reason"] = StopReasonJson(c);
  out["choices"] = json::array({std::move(choice)});
  if (c.prompt_logprobs.has_value())
    out["prompt_logprobs"] = PromptLogprobsJson(*c.prompt_logprobs);
  if (!first) out["kv_transfer_params"] = KvTransferJson(c.kv_transfer_params);
  return out;
}

json BuildUsageChunk(const ResponseMeta& meta, absl::string_view object, const Usage& usage) {
  json out = Envelope(meta, object);
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

std::string SseEvent(const json& value) { return absl::StrCat("data: ", DumpJson(value), "\n\n"); }

}  // namespace vllm::frontend
