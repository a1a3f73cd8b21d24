#include "config/speculative_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_util.h"
#include "base/status_macros.h"

namespace vllm::config {
namespace {

absl::Status KeyError(std::string_view key, std::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative-config ", std::string(key), ": ", std::string(problem)));
}

absl::Status ReadInt(const nlohmann::json& v, std::string_view key, int64_t lo, int64_t hi,
                     std::optional<int32_t>* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_number_integer()) return KeyError(key, "expected an integer");
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                               : (v.get<int64_t>() >= lo && v.get<int64_t>() <= hi);
  if (!in_range) return KeyError(key, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
  *out = static_cast<int32_t>(v.get<int64_t>());
  return absl::OkStatus();
}

absl::Status ReadDouble(const nlohmann::json& v, std::string_view key, double* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_number()) return KeyError(key, "expected a number");
  *out = v.get<double>();
  return absl::OkStatus();
}

// vLLM 0.33 keys this server does not honour: refused by name unless null or their default.
constexpr std::string_view kUnsupportedKeys[] = {
    "enforce_eager",
    "tensor_parallel_size",
    "quantization",
    "moe_backend",
    "attention_backend",
    "kv_cache_dtype",
    "max_model_len",
    "revision",
    "code_revision",
    "index_share_for_mtp_iteration",
    "disable_padded_drafter_batch",
    "disable_eagle_block_drop",
    "disable_lookahead_block_hashes",
    "draft_lm_head_quantization",
    "use_local_argmax_reduction",
    "use_heterogeneous_vocab",
    "parallel_drafting",
    "draft_load_config",
    "rejection_sample_method",
    "synthetic_acceptance_rates",
    "synthetic_acceptance_length",
    "enable_adaptive_verification",
    "draft_sample_method",
    "dspark_draft_topk",
    "xpress_topc",
    "fly_window_size",
    "fly_entropy_threshold",
    "fly_entropy_top_k",
};

// The value a vLLM key we do not honour may hold (its default): anything else is refused.
bool IsDefaultValue(std::string_view key, const nlohmann::json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (key == "rejection_sample_method") return v.is_string() && v.get<std::string>() == "standard";
  if (key == "draft_sample_method") return v.is_string() && v.get<std::string>() == "greedy";
  return false;
}

// vLLM's validate_and_normalize_dynamic_sd_schedule: a non-empty list of [start, end, k]
// (integers; start and end positive, start <= end, k >= 0), sorted by start, the ranges not
// overlapping, the first starting at 1. Returns the ranges sorted.
absl::StatusOr<std::vector<std::array<int32_t, 3>>> ParseSchedule(const nlohmann::json& v) {
  constexpr std::string_view kKey = "num_speculative_tokens_per_batch_size";
  if (!v.is_array() || v.empty()) {
    return KeyError(kKey,
                    "expected a non-empty list of [range_start, range_end, "
                    "num_speculative_tokens] entries");
  }
  std::vector<std::array<int32_t, 3>> ranges;
  for (const nlohmann::json& entry : v) {
    if (!entry.is_array() || entry.size() != 3) {
      return KeyError(kKey, "each entry must be [range_start, range_end, num_speculative_tokens]");
    }
    std::array<int32_t, 3> r{};
    for (size_t i = 0; i < 3; ++i) {
      if (!entry[i].is_number_integer() || entry[i].get<int64_t>() < 0 ||
          entry[i].get<int64_t>() > (1 << 20)) {
        return KeyError(kKey, "entries must be integers from 0 to 2^20");
      }
      r[i] = static_cast<int32_t>(entry[i].get<int64_t>());
    }
    if (r[0] <= 0 || r[1] <= 0 || r[0] > r[1]) {
      return KeyError(kKey, absl::StrFormat("the batch-size range (%d, %d) must be positive and "
                                            "start <= end",
                                            r[0], r[1]));
    }
    ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end());
  int32_t previous_end = 0;
  for (const auto& r : ranges) {
    if (r[0] <= previous_end) return KeyError(kKey, "the batch-size ranges overlap");
    previous_end = r[1];
  }
  if (ranges.front()[0] != 1) {
    return KeyError(kKey, "the first batch-size range must start at 1");
  }
  return ranges;
}

// The schedule's canonical text (the ranges sorted, no spaces).
std::string ScheduleText(const std::vector<std::array<int32_t, 3>>& ranges) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : ranges) out.push_back({r[0], r[1], r[2]});
  return out.dump();
}

absl::StatusOr<std::vector<std::array<int32_t, 3>>> ParseScheduleText(std::string_view text) {
  nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) {
    return KeyError("num_speculative_tokens_per_batch_size", "not JSON");
  }
  return ParseSchedule(v);
}

}  // namespace

std::vector<int32_t> SpeculativeConfig::DynamicSchedule(int32_t max_batch_size) const {
  if (num_speculative_tokens_per_batch_size.empty() || max_batch_size < 1) return {};
  absl::StatusOr<std::vector<std::array<int32_t, 3>>> ranges =
      ParseScheduleText(num_speculative_tokens_per_batch_size);
  if (!ranges.ok()) return {};
  std::vector<int32_t> dense(static_cast<size_t>(max_batch_size) + 1, 0);
  int32_t last = 0;
  size_t next = 0;
  for (int32_t b = 1; b <= max_batch_size; ++b) {
    while (next < ranges->size() && (*ranges)[next][0] <= b) {
      last = (*ranges)[next][2];
      ++next;
    }
    // Within a range its k; in a gap or past the last range, the k of the range before.
    dense[b] = std::min(last, num_speculative_tokens);
  }
  return dense;
}

absl::Status SpeculativeConfig::Validate() const {
  if (!num_speculative_tokens_per_batch_size.empty()) {
    absl::StatusOr<std::vector<std::array<int32_t, 3>>> ranges =
        ParseScheduleText(num_speculative_tokens_per_batch_size);
    if (!ranges.ok()) return ranges.status();
    if (ScheduleText(*ranges) != num_speculative_tokens_per_batch_size) {
      return KeyError("num_speculative_tokens_per_batch_size", "not in canonical form");
    }
    if (method.empty()) {
      return KeyError("num_speculative_tokens_per_batch_size", "needs a method");
    }
  }
  // Checked whatever the method (they have valid defaults): a NaN, which no comparison
  // refuses, or a value out of range never reaches a proposer or the config's wire form.
  if (!(suffix_decoding_max_spec_factor >= 0 && std::isfinite(suffix_decoding_max_spec_factor))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--speculative-config suffix_decoding_max_spec_factor=%g must be >= 0",
                        suffix_decoding_max_spec_factor));
  }
  if (!(suffix_decoding_min_token_prob >= 0 && suffix_decoding_min_token_prob <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--speculative-config suffix_decoding_min_token_prob=%g must be in [0, 1]",
                        suffix_decoding_min_token_prob));
  }
  if (method.empty()) {
    if (num_speculative_tokens != 0) {
      return absl::InvalidArgumentError(
          "--speculative-config: num_speculative_tokens was given without a method");
    }
    return absl::OkStatus();
  }
  if (num_speculative_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--speculative-config num_speculative_tokens: %d; expected 1 to %d for method '%s'",
        num_speculative_tokens, kMaxSpeculativeTokens, method));
  }
  if (method == "ngram") {
    if (prompt_lookup_min < 1 || prompt_lookup_max < 1) {
      return absl::InvalidArgumentError(
          "--speculative-config prompt_lookup_min/prompt_lookup_max: must be at least 1");
    }
    if (prompt_lookup_min > prompt_lookup_max) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--speculative-config: prompt_lookup_min=%d must be <= prompt_lookup_max=%d",
          prompt_lookup_min, prompt_lookup_max));
    }
  } else if (method == "suffix") {
    // Its settings are checked above.
  } else if (method == "eagle" || method == "eagle3" || method == "medusa" ||
             method == "draft_model") {
    if (model.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--speculative-config model: method '%s' needs the draft's directory", method));
    }
  } else {
    // vLLM's mtp runs a model's own multi-token-prediction layers (DeepSeek-V3's
    // num_nextn_predict_layers, MiMo, Qwen3-Next, GLM-4.5 ...); no architecture this server
    // serves has them.
    return absl::InvalidArgumentError(
        "--speculative-config method: 'mtp' needs a target with multi-token-prediction layers "
        "(DeepSeek-V3, MiMo, Qwen3-Next, GLM-4.5 and the like); none of the architectures this "
        "server serves (Llama, Mistral, Qwen2/3, Phi-3, Gemma 2/3, Mixtral, Qwen MoE) has them. "
        "Use eagle, eagle3, medusa, draft_model, ngram or suffix");
  }
  return absl::OkStatus();
}

absl::StatusOr<SpeculativeConfig> ParseSpeculativeConfig(std::string_view json) {
  absl::StatusOr<nlohmann::json> parsed = base::ParseJson(json, "--speculative-config", 8);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError("--speculative-config: expected a JSON object");
  }
  SpeculativeConfig c;
  std::optional<int32_t> k, lookup_min, lookup_max, draft_tp, depth, cached;
  for (const auto& [key, v] : parsed->items()) {
    if (key == "method") {
      if (v.is_null()) continue;
      if (!v.is_string()) return KeyError(key, "expected a string");
      c.method = v.get<std::string>();
      if (c.method.empty() ||
          std::find(std::begin(kSpeculativeMethods), std::end(kSpeculativeMethods), c.method) ==
              std::end(kSpeculativeMethods)) {
        return KeyError(key,
                        absl::StrCat("unknown method \"", absl::CEscape(c.method.substr(0, 64)),
                                     "\" (known: ngram, suffix, eagle, eagle3, medusa, "
                                     "draft_model, mtp)"));
      }
    } else if (key == "model") {
      if (v.is_null()) continue;
      if (!v.is_string()) return KeyError(key, "expected a path");
      const std::string& path = v.get_ref<const std::string&>();
      if (path.size() > kMaxPathBytes || path.find('\0') != std::string::npos) {
        return KeyError(key, "not a usable path");
      }
      c.model = path;
    } else if (key == "num_speculative_tokens") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, kMaxSpeculativeTokens, &k));
    } else if (key == "prompt_lookup_min") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 20, &lookup_min));
    } else if (key == "prompt_lookup_max") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 20, &lookup_max));
    } else if (key == "draft_tensor_parallel_size") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 10, &draft_tp));
    } else if (key == "suffix_decoding_max_tree_depth") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 16, &depth));
    } else if (key == "suffix_decoding_max_cached_requests") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 0, 1 << 30, &cached));
    } else if (key == "suffix_decoding_max_spec_factor") {
      VLLM_RETURN_IF_ERROR(ReadDouble(v, key, &c.suffix_decoding_max_spec_factor));
    } else if (key == "suffix_decoding_min_token_prob") {
      VLLM_RETURN_IF_ERROR(ReadDouble(v, key, &c.suffix_decoding_min_token_prob));
    } else if (key == "num_speculative_tokens_per_batch_size") {
      if (v.is_null()) continue;
      VLLM_ASSIGN_OR_RETURN(auto ranges, ParseSchedule(v));
      c.num_speculative_tokens_per_batch_size = ScheduleText(ranges);
      if (c.num_speculative_tokens_per_batch_size.size() > kMaxScheduleBytes) {
        return KeyError(key, "too many ranges");
      }
    } else if (std::find(std::begin(kUnsupportedKeys), std::end(kUnsupportedKeys), key) !=
               std::end(kUnsupportedKeys)) {
      if (!IsDefaultValue(key, v)) {
        return KeyError(key, "not supported by this server (only its default is accepted)");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--speculative-config: unknown key \"",
                                                     absl::CEscape(key.substr(0, 64)),
                                                     "\" (not a SpeculativeConfig field)"));
    }
  }
  if (c.method.empty()) {
    // vLLM infers the method from the draft model's name; we ask for it.
    if (!c.model.empty() || k.has_value()) {
      return absl::InvalidArgumentError(
          "--speculative-config: method is required (ngram, suffix, eagle, eagle3, medusa, "
          "draft_model or mtp)");
    }
    return c;
  }
  if (draft_tp.has_value()) c.draft_tensor_parallel_size = *draft_tp;
  if (depth.has_value()) c.suffix_decoding_max_tree_depth = *depth;
  if (cached.has_value()) c.suffix_decoding_max_cached_requests = *cached;
  if (c.method == "ngram") {
    // vLLM: 5 and 5 when neither is given, else the one given for both.
    if (!lookup_min.has_value() && !lookup_max.has_value()) lookup_min = lookup_max = 5;
    c.prompt_lookup_min = lookup_min.value_or(*lookup_max);
    c.prompt_lookup_max = lookup_max.value_or(*lookup_min);
  } else if (lookup_min.has_value() || lookup_max.has_value()) {
    return KeyError(lookup_min.has_value() ? "prompt_lookup_min" : "prompt_lookup_max",
                    "only for method ngram");
  }
  if (c.method == "suffix" && !k.has_value()) {
    k = std::min(c.suffix_decoding_max_tree_depth, kMaxSpeculativeTokens);
  }
  if (!k.has_value()) {
    return KeyError("num_speculative_tokens", absl::StrCat("required for method ", c.method,
                                                           " (1 to ", kMaxSpeculativeTokens, ")"));
  }
  c.num_speculative_tokens = *k;
  VLLM_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace vllm::config
