#include "bench/serve/protocol.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {
namespace {

constexpr size_t kMaxQuotedBytes = 200;

std::string Quote(absl::string_view text) { return std::string(text.substr(0, kMaxQuotedBytes)); }

}  // namespace

std::string BuildRequestBody(BenchBackend backend, const RequestSettings& settings,
                             const SampleRequest& request) {
  nlohmann::json body;
  body["model"] = settings.model;
  if (backend == BenchBackend::kOpenAIChat) {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", request.prompt}}});
    body["max_completion_tokens"] = request.expected_output_len;
  } else {
    if (request.prompt_token_ids.empty()) {
      body["prompt"] = request.prompt;
    } else {
      body["prompt"] = request.prompt_token_ids;
    }
    body["max_tokens"] = request.expected_output_len;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (settings.ignore_eos) body["ignore_eos"] = true;
  if (request.json_schema != nullptr) body["structured_outputs"] = {{"json", *request.json_schema}};
  // As vLLM: the sampling flags and --extra-body go last and override what is above.
  if (settings.temperature.has_value()) body["temperature"] = *settings.temperature;
  for (const auto& [key, value] : settings.extra_body.items()) body[key] = value;
  return body.dump();
}

SseResponseParser::SseResponseParser(BenchBackend backend, int64_t prompt_len) : backend_(backend) {
  output_.prompt_len = prompt_len;
}

void SseResponseParser::Feed(absl::string_view bytes, double now_s) {
  pending_.append(bytes.data(), bytes.size());
  size_t start = 0;
  for (size_t newline = pending_.find('\n'); newline != std::string::npos && !failed();
       newline = pending_.find('\n', start)) {
    HandleLine(absl::string_view(pending_).substr(start, newline - start), now_s);
    start = newline + 1;
  }
  pending_.erase(0, failed() ? pending_.size() : start);
}

void SseResponseParser::HandleLine(absl::string_view raw_line, double now_s) {
  const absl::string_view line = absl::StripAsciiWhitespace(raw_line);
  if (line.empty() || absl::StartsWith(line, ":")) return;
  absl::string_view payload = line;
  if (!absl::ConsumePrefix(&payload, "data:")) {
    output_.error = absl::StrCat("malformed SSE line (no \"data:\"): ", Quote(line));
    return;
  }
  payload = absl::StripLeadingAsciiWhitespace(payload);
  if (payload == "[DONE]") return;
  const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    output_.error = absl::StrCat("malformed SSE chunk (not a JSON object): ", Quote(payload));
    return;
  }
  if (chunk.contains("error")) {
    output_.error = absl::StrCat("server error in stream: ", Quote(chunk["error"].dump()));
    return;
  }
  const auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
    if (!first_token_seen_) {
      first_token_seen_ = true;
      output_.ttft = now_s;
    } else {
      output_.itl.push_back(now_s - last_token_s_);
    }
    last_token_s_ = now_s;
    ++token_chunks_;
    const nlohmann::json& choice = (*choices)[0];
    const nlohmann::json* text = nullptr;
    if (backend_ == BenchBackend::kOpenAIChat) {
      if (choice.contains("delta") && choice["delta"].is_object() &&
          choice["delta"].contains("content")) {
        text = &choice["delta"]["content"];
      }
    } else if (choice.contains("text")) {
      text = &choice["text"];
    }
    if (text != nullptr && text->is_string()) output_.generated_text += text->get<std::string>();
    const auto finish_reason = choice.find("finish_reason");
    if (finish_reason != choice.end() && finish_reason->is_string()) {
      output_.finish_reason = finish_reason->get<std::string>();
    }
    return;
  }
  const auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    if (usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number()) {
      output_.output_tokens = (*usage)["completion_tokens"].get<int64_t>();
      usage_seen_ = true;
    }
    if (output_.prompt_len == 0 && usage->contains("prompt_tokens") &&
        (*usage)["prompt_tokens"].is_number()) {
      output_.prompt_len = (*usage)["prompt_tokens"].get<int64_t>();
    }
  }
}

RequestOutput SseResponseParser::Finish(double now_s) {
  if (!failed() && !pending_.empty()) {
    const std::string last = std::move(pending_);
    pending_.clear();
    HandleLine(last, now_s);
  }
  if (!failed() && !first_token_seen_) {
    output_.error =
        "Never received a valid chunk to calculate TTFT. This response will be marked as failed!";
  }
  output_.success = !failed();
  if (output_.success) {
    output_.latency = last_token_s_;
    if (!usage_seen_) output_.output_tokens = token_chunks_;
  } else {
    output_.ttft = 0.0;
    output_.itl.clear();
  }
  return std::move(output_);
}

}  // namespace vllm::bench_serve
