// Session's SageMaker, dev-mode and per-request-metrics side (vLLM's
// entrypoints/serve/sagemaker, serve/dev/cache, serve/dev/sleep routers and its
// FinishedRequestStats): POST /invocations, /reset_prefix_cache, /sleep, /wake_up,
// GET /is_sleeping. See http_session.h.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_util.h"
#include "base/status_macros.h"
#include "frontend/openai/http_session.h"

namespace vllm::frontend::api_server_internal {
namespace {

// The value of query parameter `key` ("" when absent).
std::string QueryParam(const std::string& query, const std::string& key) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::vector<absl::string_view> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.size() == 2 && kv[0] == key) {
      return std::string(kv[1]);
    }
  }
  return "";
}

// Every value of query parameter `key`, in order (FastAPI's query_params.getlist).
std::vector<std::string> QueryParams(const std::string& query, const std::string& key) {
  std::vector<std::string> values;
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::vector<absl::string_view> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.size() == 2 && kv[0] == key) values.emplace_back(kv[1]);
  }
  return values;
}

// FastAPI's bool query parsing: true/false/1/0/yes/no/on/off (any case).
absl::StatusOr<bool> BoolParam(const std::string& query, const std::string& key) {
  std::string v = QueryParam(query, key);
  if (v.empty()) return false;
  bool value = false;
  if (!absl::SimpleAtob(v, &value)) {
    return InvalidParam(key, absl::StrCat(key, ": '", v, "' is not a valid boolean"));
  }
  return value;
}

}  // namespace

void Session::SendGenerationError(const absl::Status& status, bool anthropic) {
  if (!anthropic) return SendError(status);
  SendJson(static_cast<http::status>(HttpStatusFor(status)), AnthropicErrorJson(status));
}

void Session::HandleInvocations() {
  absl::StatusOr<nlohmann::json> body =
      base::ParseJson(request_.body(), "Invalid JSON in request body");
  if (!body.ok()) {
    return SendError(
        absl::InvalidArgumentError(absl::StrCat("JSON decode error: ", body.status().message())));
  }
  // vLLM tries ChatCompletionRequest, then CompletionRequest (their required fields).
  if (body->is_object() && body->contains("messages")) return HandleGenerate(ApiKind::kChat);
  if (body->is_object() && body->contains("prompt")) return HandleGenerate(ApiKind::kCompletion);
  SendError(absl::InvalidArgumentError(
      "Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest', "
      "'CompletionRequest']"));
}

void Session::HandleDevRoute(const std::string& path, const std::string& query) {
  EngineClient* engine = ctx_->engine;
  // Utility calls block until every engine answered (at most a step): the preprocessing pool.
  if (path == "/reset_prefix_cache") {
    for (const char* flag : {"reset_running_requests", "reset_external"}) {
      absl::StatusOr<bool> set = BoolParam(query, flag);
      if (!set.ok()) return SendError(set.status());
      if (*set) {
        return SendError(InvalidParam(
            flag, absl::StrCat(flag,
                               "=true is not supported: this server resets only an idle "
                               "local prefix cache")));
      }
    }
    return AnswerFromPrepPool([engine]() -> absl::StatusOr<nlohmann::json> {
      VLLM_ASSIGN_OR_RETURN(bool success, engine->ResetPrefixCache());
      return nlohmann::json{{"success", success}};
    });
  }
  if (path == "/is_sleeping") {
    return AnswerFromPrepPool([engine]() -> absl::StatusOr<nlohmann::json> {
      VLLM_ASSIGN_OR_RETURN(bool sleeping, engine->IsSleeping());
      return nlohmann::json{{"is_sleeping", sleeping}};
    });
  }
  ServerMetrics* metrics = &ctx_->metrics;
  if (path == "/wake_up") {
    // ?tags=weights&tags=kv_cache wakes those only (vLLM: none given wakes everything, and the
    // answer's tags is then null).
    std::vector<std::string> tags = QueryParams(query, "tags");
    if (tags.size() > 8) return SendError(InvalidParam("tags", "tags: at most 8 values"));
    return AnswerFromPrepPool([engine, metrics, tags]() -> absl::StatusOr<nlohmann::json> {
      VLLM_ASSIGN_OR_RETURN(bool awake, engine->WakeUp(tags));
      if (awake) {
        for (int32_t e = 0; e < metrics->num_engines(); ++e) {
          metrics->engine(e).SetSleepState(false, 0);
        }
      }
      return nlohmann::json{
          {"status", awake ? "awake" : "sleeping"},
          {"tags", tags.empty() ? nlohmann::json(nullptr) : nlohmann::json(tags)}};
    });
  }
  // /sleep?level=0..2&mode=abort|wait|keep (vLLM: 422 outside those).
  int32_t level = 1;
  const std::string level_text = QueryParam(query, "level");
  if (!level_text.empty() && (!absl::SimpleAtoi(level_text, &level) || level < 0 || level > 2)) {
    return SendJson(
        http::status::unprocessable_entity,
        ErrorJson(422, "BadRequestError", "level: Input should be an integer between 0 and 2"));
  }
  std::string mode = QueryParam(query, "mode");
  if (mode.empty()) mode = "abort";  // vLLM's default: requests in flight are aborted
  if (mode != "abort" && mode != "wait" && mode != "keep") {
    return SendJson(
        http::status::unprocessable_entity,
        ErrorJson(422, "BadRequestError", "mode: Input should be 'abort', 'wait' or 'keep'"));
  }
  AnswerFromPrepPool([engine, metrics, level, mode]() -> absl::StatusOr<nlohmann::json> {
    if (absl::Status s = engine->Sleep(level, mode); !s.ok()) {
      // The engines' refusal of a level is the request's fault: 400, not 500.
      if (absl::IsFailedPrecondition(s)) return InvalidParam("level", s.message());
      return s;
    }
    for (int32_t e = 0; e < metrics->num_engines(); ++e) {
      metrics->engine(e).SetSleepState(true, level);
    }
    return nlohmann::json{{"status", "sleeping"}, {"level", level}};
  });
}

void Session::RecordFinished(const EngineMetrics& m, const GenerateOutput& out) {
  const int32_t generated = out.num_output_tokens;
  m.request_prompt_tokens->Observe(out.num_prompt_tokens);
  m.request_generation_tokens->Observe(generated);
  m.request_num_preemptions->Observe(out.num_preemptions);
  m.request_prefill_kv_computed_tokens->Observe(out.num_prompt_tokens -
                                                std::max(out.num_cached_tokens, 0));
  if (gen_->max_tokens.has_value() && *gen_->max_tokens > 0) {
    m.request_params_max_tokens->Observe(*gen_->max_tokens);
  }
  // The phases need the engine's timestamps: a request that never got a token (aborted or
  // failed while waiting) has none.
  if (out.scheduled_ts <= 0.0 || out.first_token_ts <= 0.0) return;
  const double decode = out.last_token_ts - out.first_token_ts;
  m.request_queue_time->Observe(out.scheduled_ts - out.queued_ts);
  m.request_prefill_time->Observe(out.first_token_ts - out.scheduled_ts);
  m.request_decode_time->Observe(decode);
  m.request_inference_time->Observe(out.last_token_ts - out.scheduled_ts);
  m.request_time_per_output_token->Observe(generated > 1 ? decode / (generated - 1) : 0.0);
}

}  // namespace vllm::frontend::api_server_internal
