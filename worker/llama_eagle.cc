// LlamaModel's EAGLE-1 and EAGLE-3 draft heads (vLLM's llama_eagle.py, llama_eagle3.py): their
// loaders, their inputs, and the EAGLE-3 target's auxiliary hidden states.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "worker/llama_internal.h"
#include "worker/llama_model.h"

namespace vllm::worker {
namespace {

namespace cpu = ::vllm::kernels::cpu;
using llama_internal::PackWeight;
using llama_internal::Scratch;

// A head's checkpoint names its tensors with or without the "model." prefix the Llama loader
// asks for (vLLM's load_weights adds it), and an EAGLE-3 head's first layer "midlayer." (vLLM
// maps it to layers.0): "model.X" reads "X", and "model.layers.0.X" "midlayer.X", when only
// that exists.
class EagleWeightNames final : public WeightSource {
 public:
  explicit EagleWeightNames(WeightSource& inner) : inner_(inner) {}
  absl::StatusOr<std::vector<float>> Load(std::string_view name,
                                          std::span<const int64_t> full_shape,
                                          const Shard& shard) override {
    return inner_.Load(Resolve(name), full_shape, shard);
  }
  bool Has(std::string_view name) const override { return inner_.Has(Resolve(name)); }
  std::vector<std::string> Names() const override { return inner_.Names(); }

 private:
  std::string Resolve(std::string_view name) const {
    constexpr std::string_view kModel = "model.", kFirstLayer = "model.layers.0.";
    if (!name.starts_with(kModel) || inner_.Has(name)) return std::string(name);
    const std::string_view bare = name.substr(kModel.size());
    if (inner_.Has(bare)) return std::string(bare);
    if (name.starts_with(kFirstLayer)) {
      std::string mid = "midlayer." + std::string(name.substr(kFirstLayer.size()));
      if (inner_.Has(mid)) return mid;
    }
    return std::string(name);
  }
  WeightSource& inner_;
};

absl::Status HeadShapeCheck(std::string_view what, const HfConfig& config,
                            const LlamaModel& target) {
  if (config.hidden_size != target.config().hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the %s's hidden_size %d differs from the target's %d (config.json)", what,
                        config.hidden_size, target.config().hidden_size));
  }
  if (config.gemma || config.num_experts > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the %s must be made of Llama decoder layers (config.json model_type)", what));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::LoadEagleHead(const HfConfig& config,
                                                                      WeightSource& weights,
                                                                      kernels::Communicator* comm,
                                                                      const LlamaModel& target) {
  VLLM_RETURN_IF_ERROR(HeadShapeCheck("EAGLE head", config, target));
  if (config.vocab_size != target.config().vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the EAGLE head's vocab_size %d differs from the target's %d (config.json)",
                        config.vocab_size, target.config().vocab_size));
  }
  EagleWeightNames names(weights);
  return Build(config, names, comm, &target, nullptr);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::LoadEagle3Head(const HfConfig& config,
                                                                       const Eagle3Options& options,
                                                                       WeightSource& weights,
                                                                       kernels::Communicator* comm,
                                                                       const LlamaModel& target) {
  VLLM_RETURN_IF_ERROR(HeadShapeCheck("EAGLE-3 head", config, target));
  const int32_t vocab = target.config().vocab_size;
  if (options.draft_vocab_size < 1 || options.draft_vocab_size > vocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the EAGLE-3 head's draft_vocab_size %d: expected 1 to the target's vocab_size %d "
        "(config.json)",
        options.draft_vocab_size, vocab));
  }
  if (options.num_aux_hidden_states < 0 ||
      options.num_aux_hidden_states > target.num_layers() + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the EAGLE-3 head reads %d target hidden states; the target has %d layer boundaries",
        options.num_aux_hidden_states, target.num_layers() + 1));
  }
  if (config.vocab_size != vocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the EAGLE-3 head's vocab_size %d differs from the target's %d (config.json; its own "
        "vocabulary is draft_vocab_size)",
        config.vocab_size, vocab));
  }
  EagleWeightNames names(weights);
  return Build(config, names, comm, &target, &options);
}

absl::Status LlamaModel::LoadHeadWeights(WeightSource& weights) {
  const int64_t hidden = config_.hidden_size;
  const int64_t vocab = config_.vocab_size;
  // A dummy source (no names) has every tensor: it gives the head no embedding of its own.
  const bool real = !weights.Names().empty();
  if (real && weights.Has("model.embed_tokens.weight")) {
    VLLM_ASSIGN_OR_RETURN(embed_tokens_, weights.Load("model.embed_tokens.weight",
                                                      std::vector<int64_t>{vocab, hidden}));
  }
  const auto pack = [&](std::string_view name, int64_t rows, int64_t cols,
                        kernels::cpu::PackedWeight* into) -> absl::Status {
    VLLM_ASSIGN_OR_RETURN(auto w, weights.Load(name, std::vector<int64_t>{rows, cols}));
    *into = PackWeight(w.data(), rows, cols);
    return absl::OkStatus();
  };
  if (!eagle3_) {
    // EAGLE-1: no final norm; its lm_head only when the checkpoint has one.
    if (real && weights.Has("lm_head.weight")) {
      VLLM_RETURN_IF_ERROR(pack("lm_head.weight", vocab, hidden, &lm_head_));
    }
    VLLM_RETURN_IF_ERROR(pack("model.fc.weight", hidden, 2 * hidden, &eagle_fc_));
    if (real && weights.Has("model.fc.bias")) {
      VLLM_ASSIGN_OR_RETURN(eagle_fc_bias_,
                            weights.Load("model.fc.bias", std::vector<int64_t>{hidden}));
    }
    return absl::OkStatus();
  }
  const Eagle3Options& o = eagle3_options_;
  const int64_t draft_vocab = o.draft_vocab_size;
  VLLM_ASSIGN_OR_RETURN(final_norm_,
                        weights.Load("model.norm.weight", std::vector<int64_t>{hidden}));
  // Its own lm_head over the draft vocabulary; the target's when the vocabularies agree and the
  // checkpoint has none.
  if (!real || weights.Has("lm_head.weight") || draft_vocab != vocab) {
    VLLM_RETURN_IF_ERROR(pack("lm_head.weight", draft_vocab, hidden, &lm_head_));
  }
  const int64_t fc_in = int64_t{o.num_aux_hidden_states} * hidden;
  if (fc_in > 0) {
    VLLM_RETURN_IF_ERROR(pack("model.fc.weight", hidden, fc_in, &eagle_fc_));
    if (o.norm_before_fc) {
      VLLM_ASSIGN_OR_RETURN(fc_input_norm_,
                            weights.Load("model.input_norm.weight", std::vector<int64_t>{fc_in}));
    }
    if (o.fc_norm) {
      for (int32_t j = 0; j < o.num_aux_hidden_states; ++j) {
        VLLM_ASSIGN_OR_RETURN(auto norm, weights.Load(absl::StrCat("model.fc_norm.", j, ".weight"),
                                                      std::vector<int64_t>{hidden}));
        fc_norms_.push_back(std::move(norm));
      }
    }
  }
  if (draft_vocab == vocab) return absl::OkStatus();
  // d2t: draft id i is target id i + d2t[i] (vLLM leaves it zero when the checkpoint has none).
  std::vector<float> offsets(static_cast<size_t>(draft_vocab), 0.0f);
  if (real && weights.Has("d2t")) {
    VLLM_ASSIGN_OR_RETURN(offsets, weights.Load("d2t", std::vector<int64_t>{draft_vocab}));
  }
  draft_to_target_.resize(offsets.size());
  for (int64_t i = 0; i < draft_vocab; ++i) {
    const auto id = static_cast<int64_t>(offsets[i]) + i;
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "EAGLE-3 head tensor 'd2t': draft id %d maps to %d, outside the target's vocabulary "
          "of %d",
          i, id, vocab));
    }
    draft_to_target_[i] = static_cast<int32_t>(id);
  }
  return absl::OkStatus();
}

void LlamaModel::SetAuxHiddenLayers(std::vector<int32_t> layers) {
  VLLM_CHECK(std::is_sorted(layers.begin(), layers.end()) &&
             std::adjacent_find(layers.begin(), layers.end()) == layers.end() &&
             (layers.empty() || (layers.front() >= 0 && layers.back() <= num_layers())))
      << "aux hidden layers must be sorted, distinct and within [0, num_layers]";
  aux_layers_ = std::move(layers);
}

void LlamaModel::CombineHiddenStates(std::span<const float> states, std::vector<float>* out) {
  const Eagle3Options& o = eagle3_options_;
  const int64_t h = config_.hidden_size;
  if (!eagle3_ || o.num_aux_hidden_states == 0) {
    out->assign(states.begin(), states.end());
    return;
  }
  const int64_t fc_in = int64_t{o.num_aux_hidden_states} * h;
  const int64_t t = static_cast<int64_t>(states.size()) / fc_in;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const float* in = states.data();
  if (!fc_input_norm_.empty() || !fc_norms_.empty()) {
    float* normed = Scratch(fc_in_, static_cast<size_t>(t * fc_in));
    std::memcpy(normed, in, static_cast<size_t>(t * fc_in) * sizeof(float));
    if (!fc_input_norm_.empty()) cpu::RmsNorm(normed, fc_input_norm_.data(), normed, t, fc_in, eps);
    for (int64_t r = 0; r < t; ++r) {
      for (size_t j = 0; j < fc_norms_.size(); ++j) {
        float* chunk = normed + r * fc_in + static_cast<int64_t>(j) * h;
        cpu::RmsNorm(chunk, fc_norms_[j].data(), chunk, 1, h, eps);
      }
    }
    in = normed;
  }
  out->resize(static_cast<size_t>(t * h));
  cpu::LinearPacked(in, eagle_fc_, nullptr, out->data(), t);
}

void LlamaModel::EagleInput(const ForwardBatch& batch, const float* input_hidden, float* residual) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  float* cat = Scratch(cat_, t * 2 * h);
  float* embedded = Scratch(hidden_, t * h);
  cpu::Embedding(batch.token_ids.data(), t, embed_table().data(), 0, config_.vocab_size, h,
                 embedded);
  for (int64_t i = 0; i < t; ++i) {
    std::memcpy(cat + i * 2 * h, embedded + i * h, static_cast<size_t>(h) * sizeof(float));
    std::memcpy(cat + i * 2 * h + h, input_hidden + i * h, static_cast<size_t>(h) * sizeof(float));
  }
  cpu::LinearPacked(cat, eagle_fc_, eagle_fc_bias_.empty() ? nullptr : eagle_fc_bias_.data(),
                    residual, t);
}

void LlamaModel::Eagle3Input(const ForwardBatch& batch, const float* input_hidden, float* hidden,
                             float* residual) {
  const int64_t t = static_cast<int64_t>(batch.token_ids.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const Layer& first = layers_[0];
  float* embedded = Scratch(cat_, t * h);
  cpu::Embedding(batch.token_ids.data(), t, embed_table().data(), 0, config_.vocab_size, h,
                 embedded);
  cpu::RmsNorm(embedded, first.input_norm.data(), embedded, t, h, eps);
  for (int64_t i = 0; i < t; ++i) {
    float* row = hidden + i * 2 * h;
    std::memcpy(row, embedded + i * h, static_cast<size_t>(h) * sizeof(float));
    cpu::RmsNorm(input_hidden + i * h, first.hidden_norm.data(), row + h, 1, h, eps);
    std::memcpy(residual + i * h,
                eagle3_options_.norm_before_residual ? row + h : input_hidden + i * h,
                static_cast<size_t>(h) * sizeof(float));
  }
}

}  // namespace vllm::worker
