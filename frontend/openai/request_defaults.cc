#include "frontend/openai/request_defaults.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/ordered_json.h"
#include "base/python_repr.h"
#include "base/status_macros.h"
#include "base/status_param.h"
#include "frontend/jinja/content_format.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

using nlohmann::ordered_json;

// vLLM 0.33's available_params of get_diff_sampling_param (vllm/config/model.py), in its order,
// with the JSON type each must have here.
enum class FieldType { kNumber, kInteger, kBool };
constexpr std::pair<std::string_view, FieldType> kSamplingFields[] = {
    {"repetition_penalty", FieldType::kNumber},
    {"presence_penalty", FieldType::kNumber},
    {"frequency_penalty", FieldType::kNumber},
    {"temperature", FieldType::kNumber},
    {"top_k", FieldType::kInteger},
    {"top_p", FieldType::kNumber},
    {"min_p", FieldType::kNumber},
    {"max_new_tokens", FieldType::kInteger},
    {"skip_special_tokens", FieldType::kBool},
};

absl::StatusOr<std::optional<ordered_json>> ReadJsonObject(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::string text;
  text.resize(kMaxGenerationConfigBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": unreadable"));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxGenerationConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": over ", kMaxGenerationConfigBytes, " bytes"));
  }
  VLLM_ASSIGN_OR_RETURN(ordered_json j, base::ParseOrderedJson(text, path.string()));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
  }
  return j;
}

// transformers' GenerationConfig.from_pretrained(dir), or, without generation_config.json,
// GenerationConfig.from_model_config(config.json): its top-level fields, then the decoder's
// (text_config, ...) for the ones still unset. Only the sampling fields matter here.
absl::StatusOr<ordered_json> LoadGenerationConfig(const std::filesystem::path& dir) {
  VLLM_ASSIGN_OR_RETURN(std::optional<ordered_json> gen,
                        ReadJsonObject(dir / "generation_config.json"));
  if (gen.has_value()) return *std::move(gen);
  VLLM_ASSIGN_OR_RETURN(std::optional<ordered_json> config, ReadJsonObject(dir / "config.json"));
  if (!config.has_value()) return ordered_json::object();
  ordered_json out = ordered_json::object();
  for (const auto& [name, type] : kSamplingFields) {
    const std::string key(name);
    if (const ordered_json* v = base::FindField(*config, key.c_str()); v != nullptr) out[key] = *v;
  }
  for (const char* sub : {"decoder", "generator", "text_config"}) {
    const ordered_json* text = base::FindField(*config, sub);
    if (text == nullptr || !text->is_object()) continue;
    for (const auto& [name, type] : kSamplingFields) {
      const std::string key(name);
      const ordered_json* v = base::FindField(*text, key.c_str());
      if (v != nullptr && !out.contains(key)) out[key] = *v;
    }
    break;
  }
  return out;
}

absl::Status CheckType(std::string_view where, std::string_view key, FieldType type,
                       const ordered_json& v) {
  const bool ok = type == FieldType::kBool      ? v.is_boolean()
                  : type == FieldType::kInteger ? v.is_number_integer()
                                                : v.is_number();
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": ", std::string(key),
                                                 " must be ",
                                                 type == FieldType::kBool      ? "a boolean"
                                                 : type == FieldType::kInteger ? "an integer"
                                                                               : "a number",
                                                 ", got ", v.dump()));
}

std::string PythonRepr(const ordered_json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return base::PythonFloatRepr(v.get<double>());
  return v.dump();
}

// The content of one message as the "openai" format passes it: text parts as {"type": "text",
// "text": ...} (a string content is one such part); a tool message's text parts stay joined.
ordered_json OpenAiContent(const ordered_json& message, const ordered_json& string_form) {
  const ordered_json* role = base::FindField(message, "role");
  if (role != nullptr && *role == "tool") return string_form;
  const ordered_json* content = base::FindField(message, "content");
  ordered_json parts = ordered_json::array();
  if (content == nullptr) return parts;
  if (content->is_string()) {
    parts.push_back({{"type", "text"}, {"text", *content}});
    return parts;
  }
  if (!content->is_array()) return string_form;
  for (const ordered_json& part : *content) {
    const ordered_json* text = part.is_object() ? base::FindField(part, "text") : nullptr;
    if (part.is_string()) {
      parts.push_back({{"type", "text"}, {"text", part}});
    } else if (text != nullptr && text->is_string()) {
      parts.push_back({{"type", "text"}, {"text", *text}});
    }
  }
  return parts;
}

}  // namespace

absl::Status CheckServingFlags(const ServingFlags& flags) {
  const std::string& f = flags.chat_template_content_format;
  if (f != "auto" && f != "string" && f != "openai") {
    return absl::InvalidArgumentError(absl::StrCat("--chat-template-content-format: '",
                                                   f.substr(0, 64),
                                                   "' is not one of auto, string, openai"));
  }
  if (flags.generation_config.empty()) {
    return absl::InvalidArgumentError("--generation-config: empty (auto, vllm or a folder)");
  }
  if (flags.default_chat_template_kwargs.size() > kMaxServingFlagBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--default-chat-template-kwargs: over ", kMaxServingFlagBytes, " bytes"));
  }
  if (!flags.default_chat_template_kwargs.empty()) {
    VLLM_ASSIGN_OR_RETURN(ordered_json k, base::ParseOrderedJson(flags.default_chat_template_kwargs,
                                                                 "--default-chat-template-kwargs"));
    if (!k.is_object()) {
      return absl::InvalidArgumentError("--default-chat-template-kwargs: not a JSON object");
    }
  }
  if (flags.override_generation_config.empty()) return absl::OkStatus();
  if (flags.override_generation_config.size() > kMaxServingFlagBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--override-generation-config: over ", kMaxServingFlagBytes, " bytes"));
  }
  if (flags.generation_config.size() > kMaxServingFlagBytes) {
    return absl::InvalidArgumentError("--generation-config: the path is too long");
  }
  VLLM_ASSIGN_OR_RETURN(ordered_json o, base::ParseOrderedJson(flags.override_generation_config,
                                                               "--override-generation-config"));
  if (!o.is_object()) {
    return absl::InvalidArgumentError("--override-generation-config: not a JSON object");
  }
  for (const auto& [name, type] : kSamplingFields) {
    const std::string key(name);
    if (const ordered_json* v = base::FindField(o, key.c_str()); v != nullptr) {
      VLLM_RETURN_IF_ERROR(CheckType("--override-generation-config", name, type, *v));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestDefaults> ResolveRequestDefaults(const std::filesystem::path& model_dir,
                                                       const ServingFlags& flags,
                                                       std::string_view chat_template) {
  VLLM_RETURN_IF_ERROR(CheckServingFlags(flags));
  const std::string& src = flags.generation_config;
  ordered_json config = ordered_json::object();
  if (src != "vllm") {
    const std::filesystem::path dir = src == "auto" ? model_dir : std::filesystem::path(src);
    if (src != "auto" && !std::filesystem::is_directory(dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--generation-config: '", src, "' is not auto, vllm or a folder"));
    }
    VLLM_ASSIGN_OR_RETURN(config, LoadGenerationConfig(dir));
  }
  ordered_json override_config = ordered_json::object();
  if (!flags.override_generation_config.empty()) {
    VLLM_ASSIGN_OR_RETURN(override_config, base::ParseOrderedJson(flags.override_generation_config,
                                                                  "--override-generation-config"));
    for (const auto& [key, value] : override_config.items()) config[key] = value;  // dict.update
  }
  RequestDefaults out;
  const std::string where = src == "auto" || src == "vllm"
                                ? (model_dir / "generation_config.json").string()
                                : (std::filesystem::path(src) / "generation_config.json").string();
  for (const auto& [name, type] : kSamplingFields) {
    const std::string key(name);
    const ordered_json* v = base::FindField(config, key.c_str());
    if (v == nullptr) continue;
    VLLM_RETURN_IF_ERROR(CheckType(where, name, type, *v));
    if (type == FieldType::kInteger &&
        (v->get<double>() < (key == "max_new_tokens" ? 1 : -(1 << 30)) ||
         v->get<double>() > (1 << 30))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", key, " out of range, got ", v->dump()));
    }
    out.sampling[key == "max_new_tokens" ? "max_tokens" : key] = *v;  // vLLM's rename
  }
  if (src != "auto" && src != "vllm") {
    if (const ordered_json* m = base::FindField(out.sampling, "max_tokens"); m != nullptr) {
      out.override_max_tokens = m->get<int32_t>();
    }
  } else if (const ordered_json* m = base::FindField(override_config, "max_new_tokens");
             m != nullptr) {
    out.override_max_tokens = m->get<int32_t>();
  }
  if (!out.sampling.empty() && src != "vllm") {
    spdlog::warn(
        "Default vLLM sampling parameters have been overridden by {}: `{}`. If this is not "
        "intended, please relaunch vLLM instance with `--generation-config vllm`.",
        src == "auto" ? std::string("the model's `generation_config.json`") : src,
        DescribeSamplingDefaults(out.sampling));
  }
  if (!flags.default_chat_template_kwargs.empty()) {
    VLLM_ASSIGN_OR_RETURN(out.chat_template_kwargs,
                          base::ParseOrderedJson(flags.default_chat_template_kwargs,
                                                 "--default-chat-template-kwargs"));
  }
  out.return_tokens_as_token_ids = flags.return_tokens_as_token_ids;
  out.force_include_usage = flags.enable_force_include_usage;
  out.response_role = flags.response_role;
  out.prompt_tokens_details = flags.enable_prompt_tokens_details;
  out.per_request_metrics = flags.enable_per_request_metrics;
  out.log_outputs = flags.enable_log_outputs;
  out.log_deltas = flags.enable_log_deltas;
  const std::string& format = flags.chat_template_content_format;
  if (format == "auto") {
    out.content_format = DetectContentFormat(chat_template);
    spdlog::info(
        "Detected the chat template content format to be '{}'. You can set "
        "`--chat-template-content-format` to override this.",
        out.content_format == ContentFormat::kOpenAi ? "openai" : "string");
  } else {
    out.content_format = format == "openai" ? ContentFormat::kOpenAi : ContentFormat::kString;
  }
  return out;
}

std::string DescribeSamplingDefaults(const ordered_json& sampling) {
  std::string out = "{";
  for (const auto& [key, value] : sampling.items()) {
    if (out.size() > 1) out += ", ";
    absl::StrAppend(&out, "'", key, "': ", PythonRepr(value));
  }
  return out + "}";
}

ContentFormat DetectContentFormat(std::string_view chat_template) {
  return jinja::TemplateIteratesMessageContent(chat_template) ? ContentFormat::kOpenAi
                                                              : ContentFormat::kString;
}

void ApplySamplingDefaults(const RequestDefaults& defaults, ordered_json* body) {
  for (const auto& [key, value] : defaults.sampling.items()) {
    if (key == "max_tokens") continue;
    if (base::FindField(*body, key.c_str()) == nullptr) (*body)[key] = value;
  }
  if (defaults.return_tokens_as_token_ids &&
      base::FindField(*body, "return_tokens_as_token_ids") == nullptr) {
    (*body)["return_tokens_as_token_ids"] = true;
  }
  const ordered_json* stream = base::FindField(*body, "stream");
  const ordered_json* options = base::FindField(*body, "stream_options");
  if (defaults.force_include_usage && stream != nullptr && *stream == true &&
      (options == nullptr || options->is_object())) {
    (*body)["stream_options"] = {{"include_usage", true}, {"continuous_usage_stats", true}};
  }
  if (defaults.chat_template_kwargs.empty() || base::FindField(*body, "messages") == nullptr) {
    return;
  }
  const ordered_json* own = base::FindField(*body, "chat_template_kwargs");
  if (own != nullptr && !own->is_object()) return;  // TemplateKwargs names the error
  ordered_json merged = defaults.chat_template_kwargs;
  if (own != nullptr) {
    for (const auto& [key, value] : own->items()) {
      if (!value.is_null() && value != "auto") merged[key] = value;
    }
  }
  (*body)["chat_template_kwargs"] = std::move(merged);
}

void ApplyContentFormat(const RequestDefaults& defaults, const ordered_json& body,
                        ordered_json* template_messages) {
  if (defaults.content_format != ContentFormat::kOpenAi) return;
  const ordered_json* messages = base::FindField(body, "messages");
  if (messages == nullptr || !messages->is_array() ||
      messages->size() != template_messages->size()) {
    return;
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    ordered_json& out = (*template_messages)[i];
    out["content"] = OpenAiContent((*messages)[i], out["content"]);
  }
}

absl::Status ApplyMaxTokensDefault(const RequestDefaults& defaults, const EngineClient& engine,
                                   const std::vector<Prompt>& prompts, GenerationOptions* options) {
  core::SamplingParams& p = options->params;
  if (p.max_tokens.has_value()) {
    if (defaults.override_max_tokens.has_value()) {
      p.max_tokens = std::min(*p.max_tokens, *defaults.override_max_tokens);
    }
  } else if (const ordered_json* d = base::FindField(defaults.sampling, "max_tokens");
             d != nullptr) {
    // vLLM: min(max_model_len - prompt length, the default), per prompt; one value serves
    // every prompt of the request here, so the longest prompt bounds it.
    const int32_t max_model_len = engine.MaxModelLen();
    int64_t longest = 0;
    for (const Prompt& prompt : prompts) {
      int64_t len = static_cast<int64_t>(prompt.token_ids.size());
      if (prompt.text.has_value()) {
        VLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                              engine.Tokenize(*prompt.text, options->add_special_tokens));
        len = static_cast<int64_t>(ids.size());
      }
      if (options->truncate_prompt_tokens.has_value()) {
        const int64_t keep = *options->truncate_prompt_tokens < 0
                                 ? max_model_len - 1
                                 : *options->truncate_prompt_tokens;
        len = std::min(len, keep);
      }
      longest = std::max(longest, len);
    }
    const int64_t room = max_model_len - longest;
    // No room: left unset, so the engine client answers with the context-length error.
    if (room > 0) p.max_tokens = static_cast<int32_t>(std::min<int64_t>(d->get<int64_t>(), room));
  }
  if (p.max_tokens.has_value() && p.min_tokens > *p.max_tokens) {
    return InvalidParam("min_tokens",
                        absl::StrCat("min_tokens must be less than or equal to max_tokens=",
                                     *p.max_tokens, ", got ", p.min_tokens, "."));
  }
  return absl::OkStatus();
}

void ApplyResponseFlags(const RequestDefaults& defaults, bool add_generation_prompt,
                        const std::string& last_role, GenerationOptions* options) {
  options->response_role = add_generation_prompt ? defaults.response_role : last_role;
  options->prompt_tokens_details = defaults.prompt_tokens_details;
  options->per_request_metrics = defaults.per_request_metrics;
  options->log_outputs = defaults.log_outputs;
  options->log_deltas = defaults.log_deltas;
  options->log_max_len = defaults.log_max_len;
}

}  // namespace vllm::frontend
