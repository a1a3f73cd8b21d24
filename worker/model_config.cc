#include "worker/model_config.h"

#include <array>
#include <cmath>
#include <exception>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_util.h"
#include "base/status_macros.h"

namespace vllm::worker {
namespace {

using json = nlohmann::json;
using kernels::cpu::RopeScaling;

// Messages are built with absl::StrCat, which (Debian's Abseil has its own string_view) takes
// absl::string_view, not std::string_view: helpers here take the former.
constexpr char kConfigFile[] = "config.json";
constexpr char kGenerationConfigFile[] = "generation_config.json";
constexpr std::array<absl::string_view, 5> kArchitectures = {
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Phi3ForCausalLM"};

absl::Status FieldError(absl::string_view file, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", field, " ", what));
}

absl::StatusOr<json> ParseObject(std::string_view text, absl::string_view file) {
  // Bounded before parsing: copying or printing a value (an error message quotes it) recurses
  // once per level.
  if (base::JsonNestingDepth(text, base::kMaxJsonDepth) > base::kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": arrays and objects nest deeper than ",
                                                   base::kMaxJsonDepth, " levels"));
  }
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(file, ": invalid JSON"));
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  }
  return value;
}

// The field's value, or nullptr when it is absent or JSON null (HF writes both for "unset").
const json* Find(const json& object, absl::string_view field) {
  auto it = object.find(std::string(field));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> AsInt(const json& value, absl::string_view field, absl::string_view file) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(file, field, "is out of range");
    }
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return FieldError(file, field, absl::StrCat("must be an integer, got ", value.dump()));
}

absl::StatusOr<std::optional<int64_t>> OptionalInt(const json& object, absl::string_view field,
                                                   absl::string_view file) {
  const json* value = Find(object, field);
  if (value == nullptr) return std::nullopt;
  VLLM_ASSIGN_OR_RETURN(int64_t v, AsInt(*value, field, file));
  return v;
}

// A required field that must lie in [1, max].
absl::StatusOr<int64_t> PositiveInt(const json& object, absl::string_view field,
                                    absl::string_view file,
                                    int64_t max = std::numeric_limits<int32_t>::max()) {
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(object, field, file));
  if (!v) return FieldError(file, field, "is missing");
  if (*v <= 0) return FieldError(file, field, absl::StrCat("(", *v, ") must be positive"));
  if (*v > max) return FieldError(file, field, absl::StrCat("(", *v, ") is too large"));
  return *v;
}

absl::StatusOr<std::optional<double>> OptionalNumber(const json& object, absl::string_view field,
                                                     absl::string_view file) {
  const json* value = Find(object, field);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    return FieldError(file, field, absl::StrCat("must be a number, got ", value->dump()));
  }
  return value->get<double>();
}

absl::StatusOr<bool> OptionalBool(const json& object, absl::string_view field,
                                  absl::string_view file, bool default_value) {
  const json* value = Find(object, field);
  if (value == nullptr) return default_value;
  if (!value->is_boolean()) {
    return FieldError(file, field, absl::StrCat("must be true or false, got ", value->dump()));
  }
  return value->get<bool>();
}

// A token id or a list of them; absent or null gives an empty list.
absl::StatusOr<std::vector<int32_t>> TokenIds(const json& object, absl::string_view field,
                                              absl::string_view file, int32_t vocab_size) {
  std::vector<int32_t> ids;
  const json* value = Find(object, field);
  if (value == nullptr) return ids;
  const json list = value->is_array() ? *value : json::array({*value});
  for (const json& item : list) {
    VLLM_ASSIGN_OR_RETURN(int64_t id, AsInt(item, field, file));
    if (id < 0 || id >= vocab_size) {
      return FieldError(file, field,
                        absl::StrCat("(", id, ") must lie in [0, vocab_size ", vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

absl::StatusOr<double> ScalingNumber(const json& scaling, absl::string_view key, double fallback,
                                     bool required) {
  const std::string field = absl::StrCat("rope_scaling.", key);
  VLLM_ASSIGN_OR_RETURN(std::optional<double> v, OptionalNumber(scaling, key, kConfigFile));
  if (!v) {
    if (required) return FieldError(kConfigFile, field, "is missing");
    return fallback;
  }
  if (!std::isfinite(*v)) return FieldError(kConfigFile, field, "must be finite");
  return *v;
}

// rope_scaling: null, {"rope_type": "default"}, linear {factor} or llama3 {factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}. Older configs say
// "type" instead of "rope_type".
absl::StatusOr<RopeScaling> ParseRopeScaling(const json& config) {
  RopeScaling out;
  const json* scaling = Find(config, "rope_scaling");
  // transformers >= 5 writes rope_parameters {rope_type, rope_theta, factor, ...} instead.
  if (scaling == nullptr) scaling = Find(config, "rope_parameters");
  if (scaling == nullptr) return out;
  if (!scaling->is_object()) return FieldError(kConfigFile, "rope_scaling", "must be an object");
  const json* type = Find(*scaling, "rope_type");
  if (type == nullptr) type = Find(*scaling, "type");
  if (type == nullptr || !type->is_string()) {
    return FieldError(kConfigFile, "rope_scaling.rope_type", "must be a string");
  }
  const auto& name = type->get_ref<const std::string&>();
  if (name == "default") return out;
  if (name != "linear" && name != "llama3") {
    return FieldError(kConfigFile, "rope_scaling.rope_type",
                      absl::StrCat("'", name, "' is not supported (default, linear, llama3)"));
  }
  VLLM_ASSIGN_OR_RETURN(out.factor, ScalingNumber(*scaling, "factor", 1.0, /*required=*/true));
  if (out.factor < 1.0) {
    return FieldError(kConfigFile, "rope_scaling.factor",
                      absl::StrCat("(", out.factor, ") must be >= 1"));
  }
  if (name == "linear") {
    out.type = RopeScaling::Type::kLinear;
    return out;
  }
  out.type = RopeScaling::Type::kLlama3;
  VLLM_ASSIGN_OR_RETURN(out.low_freq_factor,
                        ScalingNumber(*scaling, "low_freq_factor", 1.0, /*required=*/true));
  VLLM_ASSIGN_OR_RETURN(out.high_freq_factor,
                        ScalingNumber(*scaling, "high_freq_factor", 4.0, /*required=*/true));
  if (!(out.low_freq_factor > 0 && out.low_freq_factor < out.high_freq_factor)) {
    return FieldError(kConfigFile, "rope_scaling.low_freq_factor",
                      absl::StrCat("(", out.low_freq_factor, ") must be positive and below ",
                                   "high_freq_factor (", out.high_freq_factor, ")"));
  }
  VLLM_ASSIGN_OR_RETURN(out.original_max_position_embeddings,
                        PositiveInt(*scaling, "original_max_position_embeddings", kConfigFile,
                                    std::numeric_limits<int64_t>::max()));
  return out;
}

absl::StatusOr<std::string> Architecture(const json& config) {
  const std::string supported = absl::StrJoin(kArchitectures, ", ");
  const json* list = Find(config, "architectures");
  if (list == nullptr || !list->is_array() || list->empty() || !(*list)[0].is_string()) {
    return FieldError(kConfigFile, "architectures", absl::StrCat("must list one of: ", supported));
  }
  const auto& name = (*list)[0].get_ref<const std::string&>();
  for (absl::string_view known : kArchitectures) {
    if (name == known) return name;
  }
  return FieldError(kConfigFile, "architectures",
                    absl::StrCat("'", name, "' is not supported (supported: ", supported, ")"));
}

// The attention shape: heads, kv heads and head_dim, with their cross-field rules.
absl::Status ParseAttentionShape(const json& config, ModelConfig& out) {
  VLLM_ASSIGN_OR_RETURN(out.num_attention_heads,
                        PositiveInt(config, "num_attention_heads", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> kv,
                        OptionalInt(config, "num_key_value_heads", kConfigFile));
  if (kv) {
    VLLM_ASSIGN_OR_RETURN(out.num_key_value_heads,
                          PositiveInt(config, "num_key_value_heads", kConfigFile));
  } else {
    out.num_key_value_heads = out.num_attention_heads;
  }
  if (out.num_attention_heads % out.num_key_value_heads != 0) {
    return FieldError(kConfigFile, "num_key_value_heads",
                      absl::StrCat("(", out.num_key_value_heads, ") must divide ",
                                   "num_attention_heads (", out.num_attention_heads, ")"));
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                        OptionalInt(config, "head_dim", kConfigFile));
  if (head_dim) {
    VLLM_ASSIGN_OR_RETURN(out.head_dim, PositiveInt(config, "head_dim", kConfigFile));
  } else if (out.hidden_size % out.num_attention_heads != 0) {
    return FieldError(
        kConfigFile, "hidden_size",
        absl::StrCat("(", out.hidden_size, ") must be divisible by ", "num_attention_heads (",
                     out.num_attention_heads, ") when head_dim is absent"));
  } else {
    out.head_dim = out.hidden_size / out.num_attention_heads;
  }
  // Rotary embedding pairs element i with i + head_dim / 2.
  if (out.head_dim % 2 != 0) {
    return FieldError(kConfigFile, "head_dim", absl::StrCat("(", out.head_dim, ") must be even"));
  }
  return absl::OkStatus();
}

absl::Status ParseSizes(const json& config, ModelConfig& out) {
  VLLM_ASSIGN_OR_RETURN(out.vocab_size, PositiveInt(config, "vocab_size", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(out.hidden_size, PositiveInt(config, "hidden_size", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(out.intermediate_size,
                        PositiveInt(config, "intermediate_size", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(out.num_hidden_layers,
                        PositiveInt(config, "num_hidden_layers", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(out.max_position_embeddings,
                        PositiveInt(config, "max_position_embeddings", kConfigFile,
                                    std::numeric_limits<int64_t>::max()));
  return ParseAttentionShape(config, out);
}

absl::Status ParseNumbers(const json& config, ModelConfig& out) {
  VLLM_ASSIGN_OR_RETURN(std::optional<double> theta,
                        OptionalNumber(config, "rope_theta", kConfigFile));
  if (const json* params = Find(config, "rope_parameters");
      !theta && params != nullptr && params->is_object()) {
    VLLM_ASSIGN_OR_RETURN(theta, OptionalNumber(*params, "rope_theta", kConfigFile));
  }
  if (theta) out.rope_theta = *theta;
  if (!(std::isfinite(out.rope_theta) && out.rope_theta > 0)) {
    return FieldError(kConfigFile, "rope_theta",
                      absl::StrCat("(", out.rope_theta, ") must be positive"));
  }
  VLLM_ASSIGN_OR_RETURN(out.rope_scaling, ParseRopeScaling(config));
  VLLM_ASSIGN_OR_RETURN(std::optional<double> eps,
                        OptionalNumber(config, "rms_norm_eps", kConfigFile));
  if (eps) out.rms_norm_eps = *eps;
  if (!(std::isfinite(out.rms_norm_eps) && out.rms_norm_eps > 0)) {
    return FieldError(kConfigFile, "rms_norm_eps",
                      absl::StrCat("(", out.rms_norm_eps, ") must be positive"));
  }
  return absl::OkStatus();
}

absl::Status ParseFlags(const json& config, ModelConfig& out) {
  VLLM_ASSIGN_OR_RETURN(out.tie_word_embeddings,
                        OptionalBool(config, "tie_word_embeddings", kConfigFile, false));
  const bool qwen2 = out.architecture == "Qwen2ForCausalLM";
  const bool qwen = qwen2 || out.architecture == "Qwen3ForCausalLM";
  const bool phi3 = out.architecture == "Phi3ForCausalLM";
  VLLM_ASSIGN_OR_RETURN(out.attention_bias,
                        OptionalBool(config, "attention_bias", kConfigFile, false));
  if (qwen2) out.attention_bias = true;  // Qwen2's q/k/v always carry a bias
  if (phi3) out.attention_bias = false;  // Phi-3's qkv_proj and o_proj never do
  out.qk_norm = out.architecture == "Qwen3ForCausalLM";
  out.fused_projections = phi3;

  // Qwen configs carry a sliding_window even when use_sliding_window is false; as in HF,
  // the window exists only when it is switched on.
  VLLM_ASSIGN_OR_RETURN(bool use_window,
                        OptionalBool(config, "use_sliding_window", kConfigFile, !qwen));
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> window,
                        OptionalInt(config, "sliding_window", kConfigFile));
  if (window && use_window) {
    VLLM_ASSIGN_OR_RETURN(out.sliding_window, PositiveInt(config, "sliding_window", kConfigFile));
  }

  const json* dtype = Find(config, "torch_dtype");
  if (dtype == nullptr) dtype = Find(config, "dtype");  // newer transformers' spelling
  if (dtype != nullptr) {
    if (!dtype->is_string() ||
        (*dtype != "float32" && *dtype != "float16" && *dtype != "bfloat16")) {
      return FieldError(kConfigFile, "torch_dtype",
                        absl::StrCat(dtype->dump(), " is not float32, float16 or bfloat16"));
    }
    out.torch_dtype = dtype->get<std::string>();
  }
  return absl::OkStatus();
}

// layer_types (transformers >= 4.56: one entry per layer, "full_attention" or
// "sliding_attention"). Sliding layers need the window to be in effect; it then limits
// max_model_len as a global window does. Any other kind is refused.
absl::Status ParseLayerTypes(const json& config, const ModelConfig& out) {
  const json* types = Find(config, "layer_types");
  if (types == nullptr) return absl::OkStatus();
  if (!types->is_array() || types->size() != static_cast<size_t>(out.num_hidden_layers)) {
    return FieldError(kConfigFile, "layer_types",
                      absl::StrCat("must list one attention type for each of the ",
                                   out.num_hidden_layers, " layers"));
  }
  for (const json& type : *types) {
    if (type == "full_attention") continue;
    if (type == "sliding_attention") {
      if (out.sliding_window) continue;
      return FieldError(kConfigFile, "layer_types",
                        "names sliding_attention layers but no sliding_window is in effect "
                        "(sliding_window, use_sliding_window)");
    }
    return FieldError(kConfigFile, "layer_types",
                      absl::StrCat(type.dump(),
                                   " is not supported (full_attention, "
                                   "sliding_attention)"));
  }
  return absl::OkStatus();
}

// Keys that would change the computation in ways the model does not implement: refused by
// name rather than served wrong.
absl::Status RefuseUnsupportedFeatures(const json& config, const ModelConfig& out) {
  for (absl::string_view key : {"hidden_act", "hidden_activation"}) {
    const json* act = Find(config, key);
    if (act != nullptr && *act != "silu") {
      return FieldError(kConfigFile, key, absl::StrCat(act->dump(), " is not supported (silu)"));
    }
  }
  VLLM_ASSIGN_OR_RETURN(bool mlp_bias, OptionalBool(config, "mlp_bias", kConfigFile, false));
  if (mlp_bias) return FieldError(kConfigFile, "mlp_bias", "(true) is not supported");
  // Phi-3 (and transformers >= 5 inside rope_parameters): rotary over part of each head.
  const json* params = Find(config, "rope_parameters");
  for (const json* object : {&config, params}) {
    if (object == nullptr || !object->is_object()) continue;
    const absl::string_view field =
        object == &config ? "partial_rotary_factor" : "rope_parameters.partial_rotary_factor";
    VLLM_ASSIGN_OR_RETURN(std::optional<double> factor,
                          OptionalNumber(*object, "partial_rotary_factor", kConfigFile));
    if (factor && *factor != 1.0) {
      return FieldError(kConfigFile, field,
                        absl::StrCat("(", *factor,
                                     ") is not supported (1.0: rotary over the "
                                     "whole head)"));
    }
  }
  return ParseLayerTypes(config, out);
}

absl::Status ParseTokenIds(const json& config, std::string_view generation_config_json,
                           ModelConfig& out) {
  VLLM_ASSIGN_OR_RETURN(std::vector<int32_t> bos,
                        TokenIds(config, "bos_token_id", kConfigFile, out.vocab_size));
  if (bos.size() > 1) return FieldError(kConfigFile, "bos_token_id", "must be a single id");
  if (!bos.empty()) out.bos_token_id = bos[0];
  VLLM_ASSIGN_OR_RETURN(out.eos_token_ids,
                        TokenIds(config, "eos_token_id", kConfigFile, out.vocab_size));
  if (generation_config_json.empty()) return absl::OkStatus();
  VLLM_ASSIGN_OR_RETURN(json generation,
                        ParseObject(generation_config_json, kGenerationConfigFile));
  if (Find(generation, "eos_token_id") != nullptr) {
    VLLM_ASSIGN_OR_RETURN(out.eos_token_ids, TokenIds(generation, "eos_token_id",
                                                      kGenerationConfigFile, out.vocab_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> Parse(std::string_view config_json,
                                  std::string_view generation_config_json) {
  VLLM_ASSIGN_OR_RETURN(json config, ParseObject(config_json, kConfigFile));
  ModelConfig out;
  VLLM_ASSIGN_OR_RETURN(out.architecture, Architecture(config));
  VLLM_RETURN_IF_ERROR(ParseSizes(config, out));
  VLLM_RETURN_IF_ERROR(ParseNumbers(config, out));
  VLLM_RETURN_IF_ERROR(ParseFlags(config, out));
  VLLM_RETURN_IF_ERROR(RefuseUnsupportedFeatures(config, out));
  VLLM_RETURN_IF_ERROR(ParseTokenIds(config, generation_config_json, out));
  return out;
}

// Absent → std::nullopt; unreadable → Internal.
absl::StatusOr<std::optional<std::string>> ReadIfExists(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                             std::string_view generation_config_json) {
  // Every access is type-checked first, so nlohmann has nothing left to throw but
  // allocation failures; those still must not cross this boundary.
  try {
    return Parse(config_json, generation_config_json);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(kConfigFile, ": ", e.what()));
  }
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& model_dir) {
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> config, ReadIfExists(model_dir / kConfigFile));
  if (!config) {
    return absl::NotFoundError(absl::StrCat((model_dir / kConfigFile).string(), " not found"));
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> generation,
                        ReadIfExists(model_dir / kGenerationConfigFile));
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(*config, generation.value_or(""));
  if (parsed.ok()) return parsed;
  // Messages start with the file name; prefixing the directory makes it a full path.
  return absl::Status(parsed.status().code(),
                      absl::StrCat((model_dir / "").string(), parsed.status().message()));
}

}  // namespace vllm::worker
