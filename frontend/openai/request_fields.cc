#include "frontend/openai/request_fields.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/ordered_json.h"
#include "base/status_macros.h"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/beam_search.h"

namespace vllm::frontend {
namespace {

using Body = nlohmann::ordered_json;

const Body* Find(const Body& body, const char* name) { return base::FindField(body, name); }

absl::StatusOr<std::optional<bool>> Bool(const Body& body, const char* name) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return base::WrongTypeParam(name, "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> String(const Body& body, const char* name) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return base::WrongTypeParam(name, "a string", *v);
  return v->get<std::string>();
}

absl::StatusOr<std::optional<int64_t>> Int(const Body& body, const char* name) {
  const Body* v = Find(body, name);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer() && !v->is_number_unsigned()) return v->get<int64_t>();
  if (v->is_number_unsigned() && v->get<uint64_t>() <= uint64_t{INT64_MAX}) {
    return static_cast<int64_t>(v->get<uint64_t>());
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d)) && d > -9.2e18 && d < 9.2e18) {
      return static_cast<int64_t>(d);
    }
  }
  return base::WrongTypeParam(name, "an integer", *v);
}

// A Python repr of a string list, for vLLM's messages (['abc', 'x']).
std::string PyList(const std::vector<std::string>& items, bool quote) {
  std::vector<std::string> parts;
  for (const std::string& s : items) parts.push_back(quote ? absl::StrCat("'", s, "'") : s);
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// Python's int(str) for the key of a logit_bias entry: surrounding whitespace, a sign, digits
// with single underscores between them.
std::optional<int64_t> PythonInt(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '_' || text.back() == '_') return std::nullopt;
  int64_t value = 0;
  bool overflow = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '_') {
      if (text[i - 1] == '_') return std::nullopt;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (value > (INT64_MAX - (c - '0')) / 10) overflow = true;
    if (!overflow) value = value * 10 + (c - '0');
  }
  if (overflow) return negative ? INT64_MIN : INT64_MAX;  // out of any vocabulary all the same
  return negative ? -value : value;
}

absl::Status ParseTokenIdList(const Body& body, const char* name, std::vector<int32_t>* out) {
  const Body* v = Find(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return base::WrongTypeParam(name, "a list of integers", *v);
  if (v->empty()) {
    return InvalidParam(name, absl::StrCat(name, " is not None and empty!"));
  }
  for (const Body& item : *v) {
    if (!item.is_number_integer()) return base::WrongTypeParam(name, "a list of integers", item);
    const int64_t id = item.is_number_unsigned() && item.get<uint64_t>() > uint64_t{INT64_MAX}
                           ? INT64_MAX
                           : item.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return InvalidParam(name, absl::StrCat(name, " contains out-of-vocab token id!"));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

absl::Status ParseBadWords(const Body& body, GenerationOptions* options) {
  const Body* v = Find(body, "bad_words");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return base::WrongTypeParam("bad_words", "a list of strings", *v);
  std::vector<std::string> words;
  for (const Body& item : *v) {
    if (!item.is_string()) return base::WrongTypeParam("bad_words", "a list of strings", item);
    words.push_back(item.get<std::string>());
  }
  for (const std::string& w : words) {
    if (w.empty()) {
      return InvalidParam("bad_words",
                          absl::StrCat("bad_words cannot contain an empty string. Got bad_words=",
                                       PyList(words, true)));
    }
  }
  for (std::string& w : words) {  // vLLM: list(dict.fromkeys(bad_words))
    if (std::find(options->bad_words.begin(), options->bad_words.end(), w) ==
        options->bad_words.end()) {
      options->bad_words.push_back(std::move(w));
    }
  }
  if (options->bad_words.size() > static_cast<size_t>(core::kMaxBadWords)) {
    return InvalidParam("bad_words", absl::StrCat("Too many bad words: ", options->bad_words.size(),
                                                  ". The max number is ", core::kMaxBadWords, "."));
  }
  return absl::OkStatus();
}

absl::Status ParseTruncation(const Body& body, GenerationOptions* options) {
  VLLM_ASSIGN_OR_RETURN(options->truncate_prompt_tokens, Int(body, "truncate_prompt_tokens"));
  if (options->truncate_prompt_tokens.has_value() && *options->truncate_prompt_tokens < -1) {
    return InvalidParam("truncate_prompt_tokens",
                        absl::StrCat("truncate_prompt_tokens must be >= -1, got ",
                                     *options->truncate_prompt_tokens));
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> side, String(body, "truncation_side"));
  if (side.has_value()) {
    if (*side != "left" && *side != "right") {
      return InvalidParam("truncation_side", "`truncation_side` must be either 'left' or 'right'.");
    }
    options->truncate_left = *side == "left";
  }
  return absl::OkStatus();
}

absl::Status CheckCacheSalt(const Body& body, GenerationOptions* options) {
  const auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  const std::string bad = "Parameter 'cache_salt' must be a non-empty string if provided.";
  if (!it->is_string() || it->get<std::string>().empty()) return InvalidParam("cache_salt", bad);
  const std::string salt = it->get<std::string>();
  if (salt.size() > 128 || salt.find_first_of(std::string("@/\\\0", 4)) != std::string::npos) {
    return InvalidParam("cache_salt",
                        "Parameter 'cache_salt' must be at most 128 characters and must not "
                        "contain '@', '/', '\\\\', or NUL.");
  }
  options->cache_salt = salt;
  return absl::OkStatus();
}

// A field this server does not implement: refused when set to anything but its neutral value.
absl::Status Refuse(const char* field, const char* why) {
  return InvalidParam(field, absl::StrCat(field, " is not supported by this server: ", why));
}

absl::Status RefuseUnimplemented(const Body& body, bool chat) {
  auto set = [&body](const char* field) {
    const Body* v = Find(body, field);
    return v != nullptr && !(v->is_array() && v->empty()) && !(v->is_object() && v->empty());
  };
  if (set("logprob_token_ids")) return Refuse("logprob_token_ids", "not implemented");
  if (set("prompt_embeds")) return Refuse("prompt_embeds", "prompt embeddings are not accepted");
  if (set("ec_transfer_params")) {
    return Refuse("ec_transfer_params", "there is no encoder cache (text-only models)");
  }
  if (set("repetition_detection")) return Refuse("repetition_detection", "not implemented");
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> budget, Int(body, "thinking_token_budget"));
  if (budget.has_value() && *budget != -1) {
    return Refuse("thinking_token_budget", "not implemented");
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<bool> versions, Bool(body, "return_weight_versions"));
  if (versions.value_or(false)) {
    return Refuse("return_weight_versions", "weights are never updated in place here");
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<bool> spaces, Bool(body, "spaces_between_special_tokens"));
  if (!spaces.value_or(true)) {
    return Refuse("spaces_between_special_tokens",
                  "the detokenizer always joins them as vLLM's "
                  "default (true) does");
  }
  if (!chat) return absl::OkStatus();
  for (const char* field : {"media_io_kwargs", "mm_processor_kwargs"}) {
    if (set(field)) return Refuse(field, "multimodal inputs are not supported (text-only models)");
  }
  return absl::OkStatus();
}

// Fields vLLM reads but that change nothing on these endpoints (or on a server without the
// feature): their types are checked as vLLM's pydantic model does.
absl::Status CheckIgnoredFields(const Body& body) {
  for (const char* field : {"session_id", "mm_payload"}) {
    VLLM_RETURN_IF_ERROR(String(body, field).status());
  }
  for (const char* field : {"watermarking", "return_token_offsets", "return_mm_kwargs"}) {
    VLLM_RETURN_IF_ERROR(Bool(body, field).status());
  }
  if (const Body* mm = Find(body, "mm_payload");
      mm != nullptr && *mm != "tensors" && *mm != "none") {
    return InvalidParam("mm_payload", "mm_payload must be 'tensors' or 'none'");
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> start, Int(body, "routed_experts_prompt_start"));
  if (start.value_or(0) < 0) {
    return InvalidParam("routed_experts_prompt_start", "routed_experts_prompt_start must be >= 0");
  }
  if (const Body* x = Find(body, "vllm_xargs"); x != nullptr && !x->is_object()) {
    return base::WrongTypeParam("vllm_xargs", "an object", *x);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseLogitBias(const Body& value, core::SamplingParams* params) {
  if (value.is_null()) return absl::OkStatus();
  if (!value.is_object()) return base::WrongTypeParam("logit_bias", "an object", value);
  std::map<int64_t, float> bias;
  std::vector<std::string> invalid;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_number()) return base::WrongTypeParam("logit_bias", "numbers as values", v);
    const std::optional<int64_t> id = PythonInt(key);
    if (!id.has_value()) {
      invalid.push_back(key);
      continue;
    }
    bias[*id] = static_cast<float>(std::clamp(v.get<double>(), -100.0, 100.0));
  }
  if (!invalid.empty()) {
    return InvalidParam("logit_bias", absl::StrCat("logit_bias contains key(s) that cannot be "
                                                   "converted to integer token IDs: ",
                                                   PyList(invalid, true)));
  }
  std::vector<std::string> out_of_range;
  for (const auto& [id, b] : bias) {
    if (id < 0 || id > INT32_MAX) {
      out_of_range.push_back(std::to_string(id));
    } else {
      params->logit_bias.emplace_back(static_cast<int32_t>(id), b);
    }
  }
  if (!out_of_range.empty()) {
    return InvalidParam("logit_bias",
                        absl::StrCat("token_id(s) ", PyList(out_of_range, false),
                                     " in logit_bias contain out-of-vocab token ids."));
  }
  return absl::OkStatus();
}

absl::Status ParseVllmFields(const Body& body, bool chat, GenerationOptions* options) {
  VLLM_RETURN_IF_ERROR(RefuseUnimplemented(body, chat));
  VLLM_RETURN_IF_ERROR(CheckIgnoredFields(body));
  if (const Body* lb = Find(body, "logit_bias"); lb != nullptr) {
    VLLM_RETURN_IF_ERROR(ParseLogitBias(*lb, &options->params));
  }
  VLLM_RETURN_IF_ERROR(
      ParseTokenIdList(body, "allowed_token_ids", &options->params.allowed_token_ids));
  VLLM_RETURN_IF_ERROR(ParseBadWords(body, options));
  VLLM_RETURN_IF_ERROR(ParseTruncation(body, options));
  VLLM_RETURN_IF_ERROR(CheckCacheSalt(body, options));
  VLLM_ASSIGN_OR_RETURN(std::optional<bool> ids, Bool(body, "return_token_ids"));
  options->return_token_ids = ids.value_or(false);
  VLLM_ASSIGN_OR_RETURN(options->request_id, String(body, "request_id"));
  if (chat) {
    VLLM_ASSIGN_OR_RETURN(std::optional<bool> prompt_text, Bool(body, "return_prompt_text"));
    options->return_prompt_text = prompt_text.value_or(false);
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> interval, Int(body, "stream_interval"));
  if (interval.has_value()) {
    if (*interval < 1) {
      return InvalidParam("stream_interval", "stream_interval must be at least 1");
    }
    options->stream_interval = static_cast<int32_t>(std::min<int64_t>(*interval, 1 << 20));
  }
  if (!chat) {
    VLLM_ASSIGN_OR_RETURN(std::optional<bool> special, Bool(body, "add_special_tokens"));
    options->add_special_tokens = special.value_or(true);
  }
  if (const Body* so = Find(body, "stream_options"); so != nullptr && so->is_object()) {
    VLLM_ASSIGN_OR_RETURN(std::optional<bool> continuous, Bool(*so, "continuous_usage_stats"));
    // vLLM's should_include_usage: continuous only together with include_usage.
    options->continuous_usage_stats = continuous.value_or(false) && options->include_usage;
  }
  return ParseBeamSearchFields(body, chat, options);  // use_beam_search, length_penalty
}

absl::StatusOr<std::optional<std::string>> ChatEcho(const Body& body,
                                                    const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt,
                                                    std::string_view response_role) {
  VLLM_ASSIGN_OR_RETURN(std::optional<bool> echo, Bool(body, "echo"));
  if (!echo.value_or(false) || messages.empty()) return std::nullopt;
  const std::string role =
      add_generation_prompt ? std::string(response_role) : messages.back().role;
  if (messages.back().role != role || messages.back().content.empty()) return std::nullopt;
  return messages.back().content;
}

absl::Status MoveDocumentsToTemplateKwargs(Body* body) {
  const Body* docs = Find(*body, "documents");
  if (docs == nullptr) return absl::OkStatus();
  const char* expected = "a list of objects of strings";
  if (!docs->is_array()) return base::WrongTypeParam("documents", expected, *docs);
  for (const Body& doc : *docs) {
    if (!doc.is_object()) return base::WrongTypeParam("documents", expected, doc);
    for (const auto& [key, value] : doc.items()) {
      if (!value.is_string()) return base::WrongTypeParam("documents", expected, value);
    }
  }
  Body& kwargs = (*body)["chat_template_kwargs"];
  if (kwargs.is_null()) kwargs = Body::object();
  if (!kwargs.is_object()) return base::WrongTypeParam("chat_template_kwargs", "an object", kwargs);
  kwargs["documents"] = (*body)["documents"];
  return absl::OkStatus();
}

}  // namespace vllm::frontend
