#include "frontend/openai/anthropic_messages.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_util.h"
#include "base/status_macros.h"
#include "base/status_param.h"
#include "frontend/openai/openai_protocol.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

using nlohmann::json;

// The text of a string or a list of text blocks; `field` names it in errors.
absl::StatusOr<std::string> TextOf(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return InvalidParam(field, absl::StrCat(field, " must be a string or a list of blocks"));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
      return InvalidParam(at, absl::StrCat(at, " must be a content block with a type"));
    }
    const std::string type = block["type"].get<std::string>();
    if (type == "text" && block.contains("text") && block["text"].is_string()) {
      text += block["text"].get<std::string>();
    } else if (type == "thinking") {
      continue;  // earlier reasoning: not part of the prompt
    } else {
      return InvalidParam(at, absl::StrCat(at, ": content blocks of type '", type,
                                           "' are not supported by this server's /v1/messages"));
    }
  }
  return text;
}

// vLLM's _to_anthropic_stop_reason for a request without tools.
std::pair<json, json> StopReason(const std::string& finish_reason, const json& stop_reason) {
  if (finish_reason == "length") return {"max_tokens", nullptr};
  if (finish_reason != "stop" && finish_reason != "tool_calls") return {nullptr, nullptr};
  if (stop_reason.is_string()) return {"stop_sequence", stop_reason};
  if (finish_reason == "tool_calls") return {"tool_use", nullptr};
  return {"end_turn", nullptr};
}

// vLLM's _build_anthropic_usage: prompt_tokens_details' cached_tokens and
// created_cache_tokens (with --enable-prompt-tokens-details) become cache_read_input_tokens
// and cache_creation_input_tokens, both out of input_tokens.
json AnthropicUsage(const json& usage) {
  int64_t input = 0, output = 0;
  std::optional<int64_t> cache_read, cache_creation;
  if (usage.is_object()) {
    input = usage.value("prompt_tokens", int64_t{0});
    output = usage.contains("completion_tokens") && usage["completion_tokens"].is_number()
                 ? usage["completion_tokens"].get<int64_t>()
                 : 0;
    const auto details = usage.find("prompt_tokens_details");
    if (details != usage.end() && details->is_object()) {
      const auto cached = details->find("cached_tokens");
      if (cached != details->end() && cached->is_number_integer()) {
        cache_read = cached->get<int64_t>();
        input -= *cache_read;
      }
      const auto created = details->find("created_cache_tokens");
      if (created != details->end() && created->is_number_integer()) {
        cache_creation = created->get<int64_t>();
        input -= *cache_creation;
      }
    }
  }
  json out{{"input_tokens", std::max<int64_t>(input, 0)}, {"output_tokens", output}};
  if (cache_creation.has_value()) out["cache_creation_input_tokens"] = *cache_creation;
  if (cache_read.has_value()) out["cache_read_input_tokens"] = *cache_read;
  return out;
}

std::string Event(const char* name, const json& data) {
  return absl::StrCat("event: ", name, "\ndata: ", DumpJson(data), "\n\n");
}

}  // namespace

absl::StatusOr<std::string> AnthropicToChatRequest(std::string_view body) {
  VLLM_ASSIGN_OR_RETURN(json in, base::ParseJson(body, "Invalid JSON in request body"));
  if (!in.is_object()) return absl::InvalidArgumentError("the request body must be an object");
  for (const char* field : {"tools", "tool_choice", "thinking", "output_config"}) {
    if (in.contains(field) && !in[field].is_null()) {
      return InvalidParam(field, absl::StrCat(field,
                                              " is not supported by this server's "
                                              "/v1/messages yet"));
    }
  }
  if (!in.contains("model") || !in["model"].is_string()) {
    return InvalidParam("model", "model is required (a string)");
  }
  if (!in.contains("max_tokens") || !in["max_tokens"].is_number_integer()) {
    return InvalidParam("max_tokens", "max_tokens is required (an integer)");
  }
  if (!in.contains("messages") || !in["messages"].is_array()) {
    return InvalidParam("messages", "messages is required (a list)");
  }
  json messages = json::array();
  if (in.contains("system") && !in["system"].is_null()) {
    VLLM_ASSIGN_OR_RETURN(std::string system, TextOf(in["system"], "system"));
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  }
  for (size_t i = 0; i < in["messages"].size(); ++i) {
    const json& m = in["messages"][i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content")) {
      return InvalidParam(at, absl::StrCat(at, " needs a role and content"));
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant" && role != "system") {
      return InvalidParam(at + ".role", absl::StrCat("unknown role '", role, "'"));
    }
    VLLM_ASSIGN_OR_RETURN(std::string text, TextOf(m["content"], at + ".content"));
    if (role == "system" && text.empty()) continue;
    messages.push_back({{"role", role}, {"content", std::move(text)}});
  }
  json out{{"model", in["model"]},
           {"messages", std::move(messages)},
           {"max_tokens", in["max_tokens"]},
           {"max_completion_tokens", in["max_tokens"]}};
  if (in.contains("stop_sequences") && !in["stop_sequences"].is_null()) {
    out["stop"] = in["stop_sequences"];
  }
  for (const char* field : {"temperature", "top_p", "top_k"}) {
    if (in.contains(field) && !in[field].is_null()) out[field] = in[field];
  }
  if (in.contains("stream") && in["stream"].is_boolean() && in["stream"].get<bool>()) {
    out["stream"] = true;
    out["stream_options"] = {{"include_usage", true}};
  }
  return DumpJson(out);
}

std::string AnthropicMessageFromChat(const std::string& chat_json) {
  absl::StatusOr<json> chat = base::ParseJson(chat_json, "chat completion");
  if (!chat.ok() || !chat->is_object() || !chat->contains("choices") ||
      (*chat)["choices"].empty()) {
    return AnthropicErrorJson(absl::InternalError("malformed chat completion"));
  }
  const json& choice = (*chat)["choices"][0];
  const json& message = choice.value("message", json::object());
  json content = json::array();
  if (message.contains("reasoning") && message["reasoning"].is_string() &&
      !message["reasoning"].get<std::string>().empty()) {
    content.push_back(
        {{"type", "thinking"}, {"thinking", message["reasoning"]}, {"signature", (*chat)["id"]}});
  }
  if (message.contains("content") && message["content"].is_string() &&
      !message["content"].get<std::string>().empty()) {
    content.push_back({{"type", "text"}, {"text", message["content"]}});
  }
  if (content.empty()) content.push_back({{"type", "text"}, {"text", ""}});
  const std::string finish = choice.contains("finish_reason") && choice["finish_reason"].is_string()
                                 ? choice["finish_reason"].get<std::string>()
                                 : "";
  auto [stop_reason, stop_sequence] = StopReason(finish, choice.value("stop_reason", json()));
  return DumpJson(json{{"id", (*chat)["id"]},
                       {"type", "message"},
                       {"role", "assistant"},
                       {"content", std::move(content)},
                       {"model", (*chat)["model"]},
                       {"stop_reason", stop_reason},
                       {"stop_sequence", stop_sequence},
                       {"usage", AnthropicUsage(chat->value("usage", json()))}});
}

std::string AnthropicErrorJson(const absl::Status& status) {
  const int code = HttpStatusFor(status);
  const char* type = code == 400   ? "invalid_request_error"
                     : code == 401 ? "authentication_error"
                     : code == 403 ? "permission_error"
                     : code == 404 ? "not_found_error"
                     : code == 413 ? "request_too_large"
                     : code == 429 ? "rate_limit_error"
                     : code == 503 ? "overloaded_error"
                     : code >= 500 ? "api_error"
                                   : "invalid_request_error";
  return DumpJson(json{{"type", "error"},
                       {"error", {{"type", type}, {"message", std::string(status.message())}}}});
}

std::string AnthropicStream::StopBlock() {
  if (!block_open_) return "";
  block_open_ = false;
  return Event("content_block_stop",
               json{{"type", "content_block_stop"}, {"index", block_index_++}});
}

std::string AnthropicStream::MessageDelta(const json& usage) {
  delta_sent_ = true;
  auto [stop_reason, stop_sequence] =
      StopReason(finish_reason_.empty() ? "stop" : finish_reason_,
                 stop_sequence_.has_value() ? json(*stop_sequence_) : json());
  return StopBlock() +
         Event("message_delta",
               json{{"type", "message_delta"},
                    {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}},
                    {"usage", usage}});
}

std::string AnthropicStream::OnChunk(const std::string& data) {
  if (data == "[DONE]") {
    std::string out = delta_sent_ ? "" : MessageDelta(AnthropicUsage(json()));
    return out + Event("message_stop", json{{"type", "message_stop"}});
  }
  absl::StatusOr<json> chunk = base::ParseJson(data, "chat chunk");
  if (!chunk.ok() || !chunk->is_object()) return "";
  if (chunk->contains("error")) {
    const json& e = (*chunk)["error"];
    const int code = e.value("code", 500);
    absl::Status status(code == 400   ? absl::StatusCode::kInvalidArgument
                        : code == 503 ? absl::StatusCode::kUnavailable
                                      : absl::StatusCode::kInternal,
                        e.value("message", std::string("error")));
    delta_sent_ = true;  // an error ends the message
    return StopBlock() + absl::StrCat("event: error\ndata: ", AnthropicErrorJson(status), "\n\n");
  }
  std::string out;
  if (!started_) {
    started_ = true;
    out += Event("message_start", json{{"type", "message_start"},
                                       {"message",
                                        {{"id", chunk->value("id", std::string())},
                                         {"type", "message"},
                                         {"role", "assistant"},
                                         {"content", json::array()},
                                         {"model", chunk->value("model", std::string())},
                                         {"stop_reason", nullptr},
                                         {"stop_sequence", nullptr},
                                         {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}}}});
  }
  const json& choices = chunk->value("choices", json::array());
  if (choices.empty()) {  // the usage chunk, last
    if (chunk->contains("usage") && !delta_sent_) {
      out += MessageDelta(AnthropicUsage((*chunk)["usage"]));
    }
    return out;
  }
  const json& choice = choices[0];
  const json& delta = choice.value("delta", json::object());
  if (delta.contains("content") && delta["content"].is_string() &&
      !delta["content"].get<std::string>().empty()) {
    if (!block_open_) {
      block_open_ = true;
      out +=
          Event("content_block_start", json{{"type", "content_block_start"},
                                            {"index", block_index_},
                                            {"content_block", {{"type", "text"}, {"text", ""}}}});
    }
    out += Event("content_block_delta",
                 json{{"type", "content_block_delta"},
                      {"index", block_index_},
                      {"delta", {{"type", "text_delta"}, {"text", delta["content"]}}}});
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    finish_reason_ = choice["finish_reason"].get<std::string>();
    if (choice.contains("stop_reason") && choice["stop_reason"].is_string()) {
      stop_sequence_ = choice["stop_reason"].get<std::string>();
    }
  }
  return out;
}

std::string AnthropicStream::Convert(std::string_view openai_sse) {
  std::string out;
  size_t pos = 0;
  while (pos < openai_sse.size()) {
    size_t end = openai_sse.find('\n', pos);
    if (end == std::string_view::npos) end = openai_sse.size();
    std::string_view line = openai_sse.substr(pos, end - pos);
    pos = end + 1;
    if (absl::StartsWith(absl::string_view(line.data(), line.size()), "data: "))
      out += OnChunk(std::string(line.substr(6)));
  }
  return out;
}

}  // namespace vllm::frontend
