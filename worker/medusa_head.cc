#include "worker/medusa_head.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "worker/hf_config.h"

namespace vllm::worker {
namespace {

using json = nlohmann::json;
namespace cpu = ::vllm::kernels::cpu;

absl::Status KeyError(std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("Medusa config.json ", std::string(key), ": ", std::string(what)));
}

absl::Status ReadInt(const json& v, std::string_view key, int64_t lo, int64_t hi, int32_t* out) {
  if (!v.is_number_integer()) return KeyError(key, "expected an integer");
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) return KeyError(key, absl::StrFormat("%d outside %d..%d", x, lo, hi));
  *out = static_cast<int32_t>(x);
  return absl::OkStatus();
}

absl::Status ReadBool(const json& v, std::string_view key, bool* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_boolean()) return KeyError(key, "expected true or false");
  *out = v.get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<MedusaConfig> Parse(std::string_view text) {
  json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object())
    return absl::InvalidArgumentError("Medusa config.json: not a JSON object");
  MedusaConfig c;
  std::optional<int32_t> truncated;
  for (const auto& [key, v] : config.items()) {
    // vLLM's MedusaConfig.from_pretrained: any key with "num" and "heads" (medusa_num_heads)
    // is num_heads, with "num" and "layers" num_hidden_layers.
    const bool num = key.find("num") != std::string::npos;
    if (num && key.find("heads") != std::string::npos) {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 16, &c.num_heads));
    } else if (num && key.find("layers") != std::string::npos) {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 16, &c.num_hidden_layers));
    } else if (key == "hidden_size") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 20, &c.hidden_size));
    } else if (key == "vocab_size") {
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 24, &c.vocab_size));
    } else if (key == "original_lm_head") {
      VLLM_RETURN_IF_ERROR(ReadBool(v, key, &c.original_lm_head));
    } else if (key == "medusa_fc_bias") {
      VLLM_RETURN_IF_ERROR(ReadBool(v, key, &c.fc_bias));
    } else if (key == "truncated_vocab_size" && !v.is_null()) {
      int32_t t = 0;
      VLLM_RETURN_IF_ERROR(ReadInt(v, key, 1, 1 << 24, &t));
      truncated = t;
    } else if (key == "logit_scale" && !v.is_null()) {
      // Scales every logit by one positive factor: the greedy drafts do not change.
      if (!v.is_number() || !(v.get<double>() > 0)) return KeyError(key, "must be positive");
    }
  }
  if (truncated.has_value() && *truncated != c.vocab_size) {
    return KeyError("truncated_vocab_size",
                    absl::StrFormat("%d: a truncated draft vocabulary (token_map) is not "
                                    "supported; it must equal vocab_size %d",
                                    *truncated, c.vocab_size));
  }
  return c;
}

}  // namespace

absl::StatusOr<MedusaConfig> ParseMedusaConfig(std::string_view config_json) {
  try {
    return Parse(config_json);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("Medusa config.json: ", e.what()));
  }
}

absl::StatusOr<MedusaConfig> LoadMedusaConfig(const std::filesystem::path& model_dir) {
  VLLM_ASSIGN_OR_RETURN(const std::string text, ReadConfigJson(model_dir));
  absl::StatusOr<MedusaConfig> c = ParseMedusaConfig(text);
  if (c.ok()) return c;
  return absl::Status(c.status().code(), absl::StrCat((model_dir / "config.json").string(), ": ",
                                                      c.status().message()));
}

absl::StatusOr<std::unique_ptr<MedusaHead>> MedusaHead::Load(const MedusaConfig& config,
                                                             WeightSource& weights) {
  std::unique_ptr<MedusaHead> head(new MedusaHead(config));
  const int64_t h = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  const std::vector<int64_t> square = {h, h}, row = {h}, lm_head = {vocab, h};
  head->blocks_.resize(config.num_heads);
  for (int32_t i = 0; i < config.num_heads; ++i) {
    Block& b = head->blocks_[i];
    for (int32_t j = 0; j < config.num_hidden_layers; ++j) {
      const std::string name = absl::StrCat("blocks.", i, ".layers.", j);
      VLLM_ASSIGN_OR_RETURN(auto w, weights.Load(name + ".weight", square));
      b.layers.push_back(cpu::PackedWeight::Pack(w.data(), h, h));
      if (config.fc_bias) {
        VLLM_ASSIGN_OR_RETURN(auto bias, weights.Load(name + ".bias", row));
        b.biases.push_back(std::move(bias));
      }
    }
  }
  const int32_t num_lm_heads = config.original_lm_head ? 1 : config.num_heads;
  for (int32_t i = 0; i < num_lm_heads; ++i) {
    const std::string name = config.original_lm_head ? std::string("lm_head.weight")
                                                     : absl::StrCat("lm_heads.", i, ".weight");
    VLLM_ASSIGN_OR_RETURN(auto w, weights.Load(name, lm_head));
    head->lm_heads_.push_back(
        cpu::PackedWeight::Pack(w.data(), vocab, h, cpu::PackedWeight::Storage::kBf16IfExact));
  }
  return head;
}

void MedusaHead::Propose(const float* hidden, int64_t n, int32_t k, int32_t* drafts) {
  const int64_t h = config_.hidden_size;
  const int64_t vocab = config_.vocab_size;
  x_.resize(static_cast<size_t>(n * h));
  y_.resize(static_cast<size_t>(n * h));
  logits_.resize(static_cast<size_t>(n * vocab));
  for (int32_t i = 0; i < k; ++i) {
    const Block& b = blocks_[i];
    std::copy(hidden, hidden + n * h, x_.begin());
    for (size_t j = 0; j < b.layers.size(); ++j) {
      cpu::LinearPacked(x_.data(), b.layers[j], b.biases.empty() ? nullptr : b.biases[j].data(),
                        y_.data(), n);
      for (int64_t e = 0; e < n * h; ++e) x_[e] += y_[e] / (1.0f + std::exp(-y_[e]));
    }
    const cpu::PackedWeight& lm_head = lm_heads_[config_.original_lm_head ? 0 : i];
    cpu::LinearPacked(x_.data(), lm_head, nullptr, logits_.data(), n);
    for (int64_t r = 0; r < n; ++r) {
      const float* row = logits_.data() + r * vocab;
      drafts[r * k + i] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
  }
}

}  // namespace vllm::worker
