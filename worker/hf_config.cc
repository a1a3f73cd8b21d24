#include "worker/hf_config.h"

#include <algorithm>
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
constexpr std::array<absl::string_view, 10> kArchitectures = {
    "LlamaForCausalLM",  "MistralForCausalLM",  "Qwen2ForCausalLM",   "Qwen3ForCausalLM",
    "Phi3ForCausalLM",   "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Gemma2ForCausalLM",
    "Gemma3ForCausalLM", "Qwen2MoeForCausalLM"};

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
                                     bool required, absl::string_view prefix = "rope_scaling") {
  const std::string field = absl::StrCat(prefix, ".", key);
  VLLM_ASSIGN_OR_RETURN(std::optional<double> v, OptionalNumber(scaling, key, kConfigFile));
  if (!v) {
    if (required) return FieldError(kConfigFile, field, "is missing");
    return fallback;
  }
  if (!std::isfinite(*v)) return FieldError(kConfigFile, field, "must be finite");
  return *v;
}

// transformers >= 5 writes Gemma-3's rope_parameters keyed by layer type
// ({"full_attention": {...}, "sliding_attention": {...}}); ParseGemma reads those.
bool RopeParametersPerLayerType(const json& config) {
  const json* params = Find(config, "rope_parameters");
  return params != nullptr && params->is_object() &&
         (params->contains("full_attention") || params->contains("sliding_attention"));
}

// One rope_scaling object (`prefix` names it in errors).
absl::StatusOr<RopeScaling> ParseRopeScalingObject(const json& scaling, absl::string_view prefix) {
  RopeScaling out;
  if (!scaling.is_object()) return FieldError(kConfigFile, prefix, "must be an object");
  const json* type = Find(scaling, "rope_type");
  if (type == nullptr) type = Find(scaling, "type");
  if (type == nullptr || !type->is_string()) {
    return FieldError(kConfigFile, absl::StrCat(prefix, ".rope_type"), "must be a string");
  }
  const auto& name = type->get_ref<const std::string&>();
  if (name == "default") return out;
  if (name != "linear" && name != "llama3") {
    return FieldError(kConfigFile, absl::StrCat(prefix, ".rope_type"),
                      absl::StrCat("'", name, "' is not supported (default, linear, llama3)"));
  }
  VLLM_ASSIGN_OR_RETURN(out.factor,
                        ScalingNumber(scaling, "factor", 1.0, /*required=*/true, prefix));
  if (out.factor < 1.0) {
    return FieldError(kConfigFile, absl::StrCat(prefix, ".factor"),
                      absl::StrCat("(", out.factor, ") must be >= 1"));
  }
  if (name == "linear") {
    out.type = RopeScaling::Type::kLinear;
    return out;
  }
  out.type = RopeScaling::Type::kLlama3;
  VLLM_ASSIGN_OR_RETURN(out.low_freq_factor, ScalingNumber(scaling, "low_freq_factor", 1.0,
                                                           /*required=*/true, prefix));
  VLLM_ASSIGN_OR_RETURN(out.high_freq_factor, ScalingNumber(scaling, "high_freq_factor", 4.0,
                                                            /*required=*/true, prefix));
  if (!(out.low_freq_factor > 0 && out.low_freq_factor < out.high_freq_factor)) {
    return FieldError(kConfigFile, absl::StrCat(prefix, ".low_freq_factor"),
                      absl::StrCat("(", out.low_freq_factor, ") must be positive and below ",
                                   "high_freq_factor (", out.high_freq_factor, ")"));
  }
  VLLM_ASSIGN_OR_RETURN(out.original_max_position_embeddings,
                        PositiveInt(scaling, "original_max_position_embeddings", kConfigFile,
                                    std::numeric_limits<int64_t>::max()));
  return out;
}

// rope_scaling: null, {"rope_type": "default"}, linear {factor} or llama3 {factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}. Older configs say
// "type" instead of "rope_type".
absl::StatusOr<RopeScaling> ParseRopeScaling(const json& config) {
  const json* scaling = Find(config, "rope_scaling");
  // transformers >= 5 writes rope_parameters {rope_type, rope_theta, factor, ...} instead.
  if (scaling == nullptr && !RopeParametersPerLayerType(config)) {
    scaling = Find(config, "rope_parameters");
  }
  if (scaling == nullptr) return RopeScaling{};
  return ParseRopeScalingObject(*scaling, "rope_scaling");
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
absl::Status ParseAttentionShape(const json& config, HfConfig& out) {
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

absl::Status ParseSizes(const json& config, HfConfig& out) {
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

absl::Status ParseNumbers(const json& config, HfConfig& out) {
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

absl::Status ParseFlags(const json& config, HfConfig& out) {
  VLLM_ASSIGN_OR_RETURN(out.tie_word_embeddings,
                        OptionalBool(config, "tie_word_embeddings", kConfigFile, false));
  const bool qwen2 = out.architecture == "Qwen2ForCausalLM";
  const bool qwen3 =
      out.architecture == "Qwen3ForCausalLM" || out.architecture == "Qwen3MoeForCausalLM";
  const bool qwen2_moe = out.architecture == "Qwen2MoeForCausalLM";
  const bool qwen = qwen2 || qwen3 || qwen2_moe;
  const bool phi3 = out.architecture == "Phi3ForCausalLM";
  // Qwen2-MoE: q/k/v biases unless qkv_bias says otherwise (transformers 5's key); never o_proj.
  VLLM_ASSIGN_OR_RETURN(
      out.attention_bias,
      OptionalBool(config, qwen2_moe ? "qkv_bias" : "attention_bias", kConfigFile, qwen2_moe));
  if (qwen2) out.attention_bias = true;  // Qwen2's q/k/v always carry a bias
  if (phi3) out.attention_bias = false;  // Phi-3's qkv_proj and o_proj never do
  out.qk_norm = qwen3;
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
// "sliding_attention"), else the family's rule for which layers slide. Sliding layers need
// the window to be in effect. Any other kind is refused. Fills out.layer_windows.
absl::Status ParseLayerTypes(const json& config, HfConfig& out) {
  const json* types = Find(config, "layer_types");
  const size_t layers = static_cast<size_t>(out.num_hidden_layers);
  if (types == nullptr || types->is_null()) {
    if (!out.sliding_window) return absl::OkStatus();
    int64_t first_sliding = 0;
    if (out.architecture == "Qwen2ForCausalLM" || out.architecture == "Qwen3ForCausalLM") {
      // HF's Qwen2/Qwen3 configs: layers from max_window_layers on slide.
      VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> max_window_layers,
                            OptionalInt(config, "max_window_layers", kConfigFile));
      if (max_window_layers) {
        if (*max_window_layers < 0) {
          return FieldError(kConfigFile, "max_window_layers", "must not be negative");
        }
        first_sliding = *max_window_layers;
      }
    }
    // HF's Gemma configs: layer i slides unless i + 1 is a multiple of the pattern (Gemma-2:
    // 2, every other layer; Gemma-3: sliding_window_pattern, default 6).
    int64_t pattern = 0;
    if (out.architecture == "Gemma2ForCausalLM") pattern = 2;
    if (out.architecture == "Gemma3ForCausalLM") {
      pattern = 6;
      if (Find(config, "sliding_window_pattern") != nullptr) {
        VLLM_ASSIGN_OR_RETURN(pattern, PositiveInt(config, "sliding_window_pattern", kConfigFile));
      }
    }
    out.layer_windows.assign(layers, 0);
    for (size_t i = 0; i < layers; ++i) {
      const int64_t layer = static_cast<int64_t>(i);
      if (layer >= first_sliding && (pattern == 0 || (layer + 1) % pattern != 0)) {
        out.layer_windows[i] = *out.sliding_window;
      }
    }
    if (!std::any_of(out.layer_windows.begin(), out.layer_windows.end(),
                     [](int32_t w) { return w > 0; })) {
      out.layer_windows.clear();
    }
    return absl::OkStatus();
  }
  if (!types->is_array() || types->size() != layers) {
    return FieldError(kConfigFile, "layer_types",
                      absl::StrCat("must list one attention type for each of the ",
                                   out.num_hidden_layers, " layers"));
  }
  std::vector<int32_t> windows(layers, 0);
  bool any_sliding = false;
  for (size_t i = 0; i < layers; ++i) {
    const json& type = (*types)[i];
    if (type == "full_attention") continue;
    if (type == "sliding_attention") {
      if (!out.sliding_window) {
        return FieldError(kConfigFile, "layer_types",
                          "names sliding_attention layers but no sliding_window is in effect "
                          "(sliding_window, use_sliding_window)");
      }
      windows[i] = *out.sliding_window;
      any_sliding = true;
      continue;
    }
    return FieldError(kConfigFile, "layer_types",
                      absl::StrCat(type.dump(),
                                   " is not supported (full_attention, "
                                   "sliding_attention)"));
  }
  if (any_sliding) out.layer_windows = std::move(windows);
  return absl::OkStatus();
}

// Qwen3-MoE's layer pattern: decoder_sparse_step and mlp_only_layers.
absl::Status ParseSparseLayers(const json& config, HfConfig& out) {
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> step,
                        OptionalInt(config, "decoder_sparse_step", kConfigFile));
  if (step) {
    VLLM_ASSIGN_OR_RETURN(out.decoder_sparse_step,
                          PositiveInt(config, "decoder_sparse_step", kConfigFile));
  }
  const json* dense = Find(config, "mlp_only_layers");
  if (dense == nullptr) return absl::OkStatus();
  if (!dense->is_array()) return FieldError(kConfigFile, "mlp_only_layers", "must be a list");
  for (const json& item : *dense) {
    VLLM_ASSIGN_OR_RETURN(int64_t layer, AsInt(item, "mlp_only_layers", kConfigFile));
    if (layer < 0 || layer >= out.num_hidden_layers) {
      return FieldError(kConfigFile, "mlp_only_layers",
                        absl::StrCat("(", layer, ") must name a layer in [0, num_hidden_layers ",
                                     out.num_hidden_layers, ")"));
    }
    out.mlp_only_layers.push_back(static_cast<int32_t>(layer));
  }
  return absl::OkStatus();
}

// MoE keys of other families (DeepSeek's grouped or sigmoid routing, scaled or shared
// experts) that these architectures do not implement: refused rather than ignored.
absl::Status RefuseOtherRouting(const json& config, bool shared_expert) {
  if (const json* scoring = Find(config, "scoring_func");
      scoring != nullptr && *scoring != "softmax") {
    return FieldError(kConfigFile, "scoring_func",
                      absl::StrCat(scoring->dump(), " is not supported (softmax)"));
  }
  if (const json* method = Find(config, "topk_method"); method != nullptr && *method != "greedy") {
    return FieldError(kConfigFile, "topk_method",
                      absl::StrCat(method->dump(), " is not supported (greedy)"));
  }
  for (absl::string_view key :
       {"n_group", "topk_group", "n_shared_experts", "shared_expert_intermediate_size"}) {
    if (shared_expert && key == "shared_expert_intermediate_size") continue;
    VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(config, key, kConfigFile));
    const int64_t allowed = key == "n_group" || key == "topk_group" ? 1 : 0;
    if (v && *v > allowed) {
      return FieldError(kConfigFile, key,
                        absl::StrCat("(", *v, ") is not supported (at most ", allowed, ")"));
    }
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<double> scale,
                        OptionalNumber(config, "routed_scaling_factor", kConfigFile));
  if (scale && *scale != 1.0) {
    return FieldError(kConfigFile, "routed_scaling_factor",
                      absl::StrCat("(", *scale, ") is not supported (1.0)"));
  }
  return absl::OkStatus();
}

// Qwen2-MoE's shared expert, and its sliding layers: transformers 5 builds layer_types for
// Qwen2-MoE by its own rule (odd layers below max_window_layers), which the Qwen2 rule of
// ParseLayerTypes does not reproduce; a window is served only from an explicit layer_types.
absl::Status ParseSharedExpert(const json& config, HfConfig& out) {
  VLLM_ASSIGN_OR_RETURN(out.shared_expert_intermediate_size,
                        PositiveInt(config, "shared_expert_intermediate_size", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(bool use_window,
                        OptionalBool(config, "use_sliding_window", kConfigFile, false));
  if (use_window && Find(config, "layer_types") == nullptr) {
    return FieldError(kConfigFile, "use_sliding_window",
                      "(true) is not supported for Qwen2MoeForCausalLM without layer_types");
  }
  return absl::OkStatus();
}

// The MoE fields of Qwen3MoeForCausalLM, Qwen2MoeForCausalLM and MixtralForCausalLM (other
// architectures are dense, whatever MoE keys their config carries: transformers ignores
// them too).
absl::Status ParseMoe(const json& config, HfConfig& out) {
  const bool mixtral = out.architecture == "MixtralForCausalLM";
  const bool qwen2_moe = out.architecture == "Qwen2MoeForCausalLM";
  if (!mixtral && !qwen2_moe && out.architecture != "Qwen3MoeForCausalLM") {
    return absl::OkStatus();
  }
  VLLM_RETURN_IF_ERROR(RefuseOtherRouting(config, /*shared_expert=*/qwen2_moe));
  // Hub Qwen-MoE configs say num_experts; transformers 5 writes num_local_experts for all.
  absl::string_view experts_key = "num_local_experts";
  if (!mixtral &&
      (Find(config, "num_experts") != nullptr || Find(config, experts_key) == nullptr)) {
    experts_key = "num_experts";
  }
  constexpr int64_t kMaxExperts = 1 << 16;
  VLLM_ASSIGN_OR_RETURN(std::optional<int64_t> experts,
                        OptionalInt(config, experts_key, kConfigFile));
  if (!mixtral && experts && *experts == 0) return absl::OkStatus();  // HF: every layer dense
  VLLM_ASSIGN_OR_RETURN(out.num_experts,
                        PositiveInt(config, experts_key, kConfigFile, kMaxExperts));
  VLLM_ASSIGN_OR_RETURN(out.num_experts_per_tok,
                        PositiveInt(config, "num_experts_per_tok", kConfigFile, out.num_experts));
  if (mixtral) {
    out.moe_intermediate_size = out.intermediate_size;
    out.norm_topk_prob = true;
    return absl::OkStatus();
  }
  VLLM_ASSIGN_OR_RETURN(out.moe_intermediate_size,
                        PositiveInt(config, "moe_intermediate_size", kConfigFile));
  VLLM_ASSIGN_OR_RETURN(out.norm_topk_prob,
                        OptionalBool(config, "norm_topk_prob", kConfigFile, false));
  VLLM_RETURN_IF_ERROR(ParseSparseLayers(config, out));
  return qwen2_moe ? ParseSharedExpert(config, out) : absl::OkStatus();
}

// Keys that would change the computation in ways the model does not implement: refused by
// name rather than served wrong.
absl::Status RefuseUnsupportedFeatures(const json& config, const HfConfig& out) {
  // Gemma reads hidden_activation only (HF's Gemma-2/3 ignore hidden_act).
  const std::vector<absl::string_view> act_keys =
      out.gemma ? std::vector<absl::string_view>{"hidden_activation"}
                : std::vector<absl::string_view>{"hidden_act", "hidden_activation"};
  const absl::string_view act_name = out.gemma ? "gelu_pytorch_tanh" : "silu";
  for (absl::string_view key : act_keys) {
    const json* act = Find(config, key);
    if (act != nullptr && *act != std::string(act_name)) {
      return FieldError(kConfigFile, key,
                        absl::StrCat(act->dump(), " is not supported (", act_name, ")"));
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
  return absl::OkStatus();
}

// A soft cap: HF's default when the key is absent, none when it is null, else a positive
// number.
absl::StatusOr<double> SoftCap(const json& config, absl::string_view key, double absent) {
  if (!config.contains(std::string(key))) return absent;
  VLLM_ASSIGN_OR_RETURN(std::optional<double> cap, OptionalNumber(config, key, kConfigFile));
  if (!cap) return 0.0;
  if (!(std::isfinite(*cap) && *cap > 0)) {
    return FieldError(kConfigFile, key, absl::StrCat("(", *cap, ") must be positive"));
  }
  return *cap;
}

// Gemma-3's rope: rope_parameters keyed by layer type (transformers >= 5) or the classic
// rope_theta / rope_scaling (global layers) and rope_local_base_freq (local layers), with
// HF's defaults 1e6 and 1e4.
absl::Status ParseGemma3Rope(const json& config, HfConfig& out) {
  constexpr double kGlobalTheta = 1e6, kLocalTheta = 1e4;
  out.rope_local_theta = kLocalTheta;
  if (!RopeParametersPerLayerType(config)) {
    if (Find(config, "rope_theta") == nullptr) out.rope_theta = kGlobalTheta;
    VLLM_ASSIGN_OR_RETURN(std::optional<double> local,
                          OptionalNumber(config, "rope_local_base_freq", kConfigFile));
    if (local) out.rope_local_theta = *local;
  } else {
    const json& params = *Find(config, "rope_parameters");
    out.rope_theta = kGlobalTheta;
    out.rope_scaling = RopeScaling{};
    if (const json* full = Find(params, "full_attention"); full != nullptr) {
      VLLM_ASSIGN_OR_RETURN(out.rope_scaling,
                            ParseRopeScalingObject(*full, "rope_parameters.full_attention"));
      VLLM_ASSIGN_OR_RETURN(std::optional<double> theta,
                            OptionalNumber(*full, "rope_theta", kConfigFile));
      if (theta) out.rope_theta = *theta;
    }
    if (const json* local = Find(params, "sliding_attention"); local != nullptr) {
      VLLM_ASSIGN_OR_RETURN(RopeScaling scaling,
                            ParseRopeScalingObject(*local, "rope_parameters.sliding_attention"));
      if (scaling.type != RopeScaling::Type::kNone) {
        return FieldError(kConfigFile, "rope_parameters.sliding_attention.rope_type",
                          "is not supported (default: local layers are never scaled)");
      }
      VLLM_ASSIGN_OR_RETURN(std::optional<double> theta,
                            OptionalNumber(*local, "rope_theta", kConfigFile));
      if (theta) out.rope_local_theta = *theta;
    }
  }
  for (double theta : {out.rope_theta, *out.rope_local_theta}) {
    if (!(std::isfinite(theta) && theta > 0)) {
      return FieldError(kConfigFile, "rope_theta",
                        absl::StrCat("(", theta, ") must be positive (local and global)"));
    }
  }
  return absl::OkStatus();
}

// Gemma2ForCausalLM / Gemma3ForCausalLM: the fields HfConfig::gemma documents, with HF's
// defaults for absent keys (tied embeddings, query_pre_attn_scalar 256, sliding_window 4096,
// Gemma-2's soft caps 50 and 30).
absl::Status ParseGemma(const json& config, HfConfig& out) {
  const bool gemma2 = out.architecture == "Gemma2ForCausalLM";
  const bool gemma3 = out.architecture == "Gemma3ForCausalLM";
  if (!gemma3 && RopeParametersPerLayerType(config)) {
    return FieldError(kConfigFile, "rope_parameters",
                      "keyed by layer type is supported for Gemma3ForCausalLM only");
  }
  if (!gemma2 && !gemma3) return absl::OkStatus();
  out.gemma = true;
  out.qk_norm = gemma3;
  // HF's Gemma configs tie by default (hub config.json files leave the key out).
  if (Find(config, "tie_word_embeddings") == nullptr) out.tie_word_embeddings = true;
  VLLM_ASSIGN_OR_RETURN(bool bidirectional,
                        OptionalBool(config, "use_bidirectional_attention", kConfigFile, false));
  if (bidirectional) {
    return FieldError(kConfigFile, "use_bidirectional_attention", "(true) is not supported");
  }
  VLLM_ASSIGN_OR_RETURN(std::optional<double> scalar,
                        OptionalNumber(config, "query_pre_attn_scalar", kConfigFile));
  out.query_pre_attn_scalar = scalar.value_or(256.0);
  if (!(std::isfinite(*out.query_pre_attn_scalar) && *out.query_pre_attn_scalar > 0)) {
    return FieldError(kConfigFile, "query_pre_attn_scalar",
                      absl::StrCat("(", *out.query_pre_attn_scalar, ") must be positive"));
  }
  // HF's Gemma-3 attention passes no soft cap, whatever attn_logit_softcapping says.
  if (gemma2) {
    VLLM_ASSIGN_OR_RETURN(out.attn_logit_softcapping,
                          SoftCap(config, "attn_logit_softcapping", 50.0));
  }
  VLLM_ASSIGN_OR_RETURN(out.final_logit_softcapping,
                        SoftCap(config, "final_logit_softcapping", gemma2 ? 30.0 : 0.0));
  if (!config.contains("sliding_window")) out.sliding_window = 4096;
  if (gemma3) return ParseGemma3Rope(config, out);
  return absl::OkStatus();
}

absl::Status ParseTokenIds(const json& config, std::string_view generation_config_json,
                           HfConfig& out) {
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

absl::StatusOr<HfConfig> Parse(std::string_view config_json,
                               std::string_view generation_config_json) {
  VLLM_ASSIGN_OR_RETURN(json config, ParseObject(config_json, kConfigFile));
  HfConfig out;
  VLLM_ASSIGN_OR_RETURN(out.architecture, Architecture(config));
  VLLM_RETURN_IF_ERROR(ParseSizes(config, out));
  VLLM_RETURN_IF_ERROR(ParseNumbers(config, out));
  VLLM_RETURN_IF_ERROR(ParseFlags(config, out));
  VLLM_RETURN_IF_ERROR(ParseMoe(config, out));
  VLLM_RETURN_IF_ERROR(ParseGemma(config, out));
  VLLM_RETURN_IF_ERROR(RefuseUnsupportedFeatures(config, out));
  VLLM_RETURN_IF_ERROR(ParseLayerTypes(config, out));
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

bool HfConfig::IsMoeLayer(int32_t layer) const {
  return num_experts > 0 && (layer + 1) % decoder_sparse_step == 0 &&
         std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

bool HfConfig::HasDenseLayer() const {
  for (int32_t i = 0; i < num_hidden_layers; ++i) {
    if (!IsMoeLayer(i)) return true;
  }
  return false;
}

absl::StatusOr<HfConfig> ParseHfConfig(std::string_view config_json,
                                       std::string_view generation_config_json) {
  // Every access is type-checked first, so nlohmann has nothing left to throw but
  // allocation failures; those still must not cross this boundary.
  try {
    return Parse(config_json, generation_config_json);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(kConfigFile, ": ", e.what()));
  }
}

absl::StatusOr<std::string> ReadConfigJson(const std::filesystem::path& model_dir) {
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> config, ReadIfExists(model_dir / kConfigFile));
  if (!config) {
    return absl::NotFoundError(absl::StrCat((model_dir / kConfigFile).string(), " not found"));
  }
  return std::move(*config);
}

absl::StatusOr<HfConfig> LoadHfConfig(const std::filesystem::path& model_dir) {
  VLLM_ASSIGN_OR_RETURN(std::string config, ReadConfigJson(model_dir));
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> generation,
                        ReadIfExists(model_dir / kGenerationConfigFile));
  absl::StatusOr<HfConfig> parsed = ParseHfConfig(config, generation.value_or(""));
  if (parsed.ok()) return parsed;
  // Messages start with the file name; prefixing the directory makes it a full path.
  return absl::Status(parsed.status().code(),
                      absl::StrCat((model_dir / "").string(), parsed.status().message()));
}

}  // namespace vllm::worker
