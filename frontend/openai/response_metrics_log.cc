// ResponseAssembler's per-request metrics (--enable-per-request-metrics) and output log lines
// (--enable-log-outputs, --enable-log-deltas), as vLLM 0.33's build_per_request_timing_metrics
// and RequestLogger.log_outputs.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/openai/api_server_response.h"
#include "frontend/openai/http_middleware.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

// Python's s[:n] of a UTF-8 string (code points).
std::string FirstChars(const std::string& s, std::optional<int64_t> n) {
  if (!n.has_value()) return s;
  int64_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // continuation byte
    if (seen == *n) return s.substr(0, i);
    ++seen;
  }
  return s;
}

// Python's repr of list(ids)[:n], or None.
std::string IdsRepr(const std::vector<int32_t>* ids, std::optional<int64_t> n) {
  if (ids == nullptr) return "None";
  size_t keep = ids->size();
  if (n.has_value()) keep = std::min(keep, static_cast<size_t>(std::max<int64_t>(*n, 0)));
  return absl::StrCat("[", absl::StrJoin(ids->begin(), ids->begin() + keep, ", "), "]");
}

void LogOutputs(const std::string& id, const std::string& text,
                const std::vector<int32_t>* token_ids, const std::string& finish_reason,
                const char* stream_info, std::optional<int64_t> max_len) {
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("Generated response {}{} details: output_token_ids: {}", id, stream_info,
                  IdsRepr(token_ids, max_len));
  }
  spdlog::info("Generated response {}{}: output: {}, finish_reason: {}", id, stream_info,
               PythonStrRepr(FirstChars(text, max_len)), finish_reason);
}

std::string FinishName(const Choice& c) {
  if (!c.finish_reason.has_value()) return "None";
  if (c.tool_calls_finish && *c.finish_reason == core::FinishReason::kStop) return "tool_calls";
  return std::string(core::FinishReasonName(*c.finish_reason));
}

}  // namespace

nlohmann::json ResponseAssembler::MetricsJson(bool drop_null) const {
  const ChoiceState& s = choices_.front();
  const int64_t tokens = s.output_tokens;
  nlohmann::json out = nlohmann::json::object();
  auto set = [&](const char* name, bool known, double value) {
    if (known) {
      out[name] = value;
    } else if (!drop_null) {
      out[name] = nullptr;
    }
  };
  set("time_to_first_token_ms", s.scheduled_ts > 0 && s.first_token_ts > 0,
      (s.first_token_ts - s.scheduled_ts) * 1000);
  set("generation_time_ms", s.first_token_ts > 0 && s.last_token_ts > 0,
      (s.last_token_ts - s.first_token_ts) * 1000);
  set("queue_time_ms", s.queued_ts > 0 && s.scheduled_ts > 0,
      (s.scheduled_ts - s.queued_ts) * 1000);
  set("mean_itl_ms", s.first_token_ts > 0 && s.last_token_ts > 0 && tokens > 1,
      (s.last_token_ts - s.first_token_ts) / static_cast<double>(tokens - 1) * 1000);
  const double inference_ms = (s.last_token_ts - s.scheduled_ts) * 1000;
  set("tokens_per_second", s.scheduled_ts > 0 && s.last_token_ts > 0 && inference_ms > 0,
      static_cast<double>(tokens) / inference_ms * 1000);
  if (!drop_null) out["speculative_decoding"] = nullptr;  // per-request spec stats: none kept
  return out;
}

void ResponseAssembler::LogDelta(const Choice& delta, const GenerateOutput& output) const {
  std::string text;
  if (kind_ == ApiKind::kChat && delta.chat.has_value()) {
    std::vector<std::string> parts;
    const ChatMessageParts& m = *delta.chat;
    if (m.content.has_value() && !m.content->empty()) parts.push_back(*m.content);
    if (m.reasoning.has_value() && !m.reasoning->empty()) {
      parts.push_back(absl::StrCat("[reasoning: ", *m.reasoning, "]"));
    }
    std::string args;
    for (const parsers::ToolCallDelta& d : m.tool_call_deltas) args += d.arguments;
    if (!args.empty()) parts.push_back(absl::StrCat("[tool_calls: ", args, "]"));
    text = absl::StrJoin(parts, " ");
  } else {
    text = output.text_delta;
  }
  if (text.empty()) return;
  Choice finish;
  finish.finish_reason = output.finish_reason;
  LogOutputs(meta_.id, text, &output.token_ids_delta, FinishName(finish), " (streaming delta)",
             log_max_len_);
}

void ResponseAssembler::LogFinished() const {
  for (const ChoiceState& state : choices_) {
    if (stream_) {
      LogOutputs(meta_.id, state.log_text, nullptr, "streaming_complete", " (streaming complete)",
                 log_max_len_);
      continue;
    }
    const Choice& c = state.choice;
    std::string text = state.log_text;
    if (kind_ == ApiKind::kChat) {
      text = c.chat.has_value() ? c.chat->content.value_or("") : c.text;
      if (text.empty() && c.chat.has_value() && !c.chat->tool_calls.empty()) {
        std::vector<std::string> calls;
        for (const parsers::ToolCall& call : c.chat->tool_calls) {
          calls.push_back(absl::StrCat(call.name, "(", call.arguments, ")"));
        }
        text = absl::StrCat("[tool_calls: ", absl::StrJoin(calls, ", "), "]");
      }
      if (text.empty()) continue;  // vLLM logs a chat choice only with some output
    }
    LogOutputs(meta_.id, text, &state.token_ids, FinishName(c), "", log_max_len_);
  }
}

}  // namespace vllm::frontend
