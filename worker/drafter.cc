#include "worker/drafter.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "worker/hf_config.h"
#include "worker/medusa_head.h"
#include "worker/weights.h"

namespace vllm::worker {
namespace {

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

absl::Status VocabMismatch(std::string_view what, int64_t draft, int64_t target) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "--speculative-config model: the %s's vocab_size %d differs from the target's %d "
      "(config.json)",
      what, draft, target));
}

constexpr std::string_view kEagle3Architectures[] = {"LlamaForCausalLMEagle3",
                                                     "Eagle3LlamaForCausalLM"};

// An EAGLE or EAGLE-3 head's config.json: a Llama config whose architecture may name the head
// (EAGLE-1: EagleLlamaForCausalLM, as vLLM's EAGLEConfig renames it, or LlamaForCausalLMEagle;
// EAGLE-3: LlamaForCausalLMEagle3 or Eagle3LlamaForCausalLM). The parsed JSON goes to
// `json` (EAGLE-3's own keys are read from it).
absl::StatusOr<HfConfig> LoadEagleConfig(const std::filesystem::path& dir, bool eagle3,
                                         nlohmann::json* json) {
  VLLM_ASSIGN_OR_RETURN(const std::string text, ReadConfigJson(dir));
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_object()) {
    auto it = config.find("architectures");
    if (it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
      const std::string arch = (*it)[0].get<std::string>();
      const bool is_eagle3 =
          std::find(std::begin(kEagle3Architectures), std::end(kEagle3Architectures), arch) !=
          std::end(kEagle3Architectures);
      if (is_eagle3 && !eagle3) {
        return absl::InvalidArgumentError(
            absl::StrCat("--speculative-config model: ", (dir / "config.json").string(),
                         " is an EAGLE-3 head (", arch, "); use method \"eagle3\""));
      }
      if (is_eagle3 || arch == "EagleLlamaForCausalLM" || arch == "LlamaForCausalLMEagle") {
        (*it)[0] = "LlamaForCausalLM";
      }
    }
  }
  absl::StatusOr<HfConfig> parsed = ParseHfConfig(config.is_discarded() ? text : config.dump(), "");
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat((dir / "").string(), parsed.status().message()));
  }
  *json = std::move(config);
  return parsed;
}

// The key of EAGLE-3's config.json, top-level or in eagle_config (vLLM reads both), or null.
const nlohmann::json* Eagle3Key(const nlohmann::json& config, std::string_view key) {
  const auto top = config.find(key);
  if (top != config.end() && !top->is_null()) return &*top;
  const auto inner = config.find("eagle_config");
  if (inner == config.end() || !inner->is_object()) return nullptr;
  const auto it = inner->find(key);
  return it == inner->end() || it->is_null() ? nullptr : &*it;
}

absl::Status Eagle3KeyError(const std::filesystem::path& dir, std::string_view key,
                            std::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("--speculative-config model: ", (dir / "config.json").string(), " ",
                   std::string(key), ": ", std::string(problem)));
}

absl::Status ReadBool(const nlohmann::json& config, const std::filesystem::path& dir,
                      std::string_view key, bool* out) {
  const nlohmann::json* v = Eagle3Key(config, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Eagle3KeyError(dir, key, "expected true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

// EAGLE-3's options and the target layers whose states it reads (vLLM's Eagle3LlamaForCausalLM
// and GPUModelRunner._get_eagle3_aux_layers_from_config): eagle_aux_hidden_state_layer_ids, or
// the target's default (2, L / 2, L - 3), as a sorted set; their number must be what fc reads.
absl::StatusOr<Eagle3Options> Eagle3OptionsOf(const nlohmann::json& config,
                                              const std::filesystem::path& dir,
                                              const HfConfig& head, int32_t target_layers,
                                              std::vector<int32_t>* aux_layers) {
  Eagle3Options o;
  o.draft_vocab_size = head.vocab_size;
  if (const nlohmann::json* v = Eagle3Key(config, "draft_vocab_size")) {
    if (!v->is_number_integer())
      return Eagle3KeyError(dir, "draft_vocab_size", "expected an integer");
    o.draft_vocab_size = static_cast<int32_t>(std::clamp<int64_t>(v->get<int64_t>(), -1, 1 << 30));
  }
  if (const nlohmann::json* v = Eagle3Key(config, "target_hidden_size")) {
    if (!v->is_number_integer() || v->get<int64_t>() != head.hidden_size) {
      return Eagle3KeyError(dir, "target_hidden_size",
                            absl::StrCat("must equal hidden_size ", head.hidden_size,
                                         " (a head narrower than its target is not supported)"));
    }
  }
  bool use_aux = true;
  VLLM_RETURN_IF_ERROR(ReadBool(config, dir, "use_aux_hidden_state", &use_aux));
  VLLM_RETURN_IF_ERROR(ReadBool(config, dir, "norm_before_fc", &o.norm_before_fc));
  VLLM_RETURN_IF_ERROR(ReadBool(config, dir, "fc_norm", &o.fc_norm));
  VLLM_RETURN_IF_ERROR(ReadBool(config, dir, "norm_before_residual", &o.norm_before_residual));
  VLLM_RETURN_IF_ERROR(ReadBool(config, dir, "norm_output", &o.norm_output));
  // P-EAGLE's parallel drafting (mask_hidden) and DFlash heads: refused when on (false, null
  // or an empty object is their default).
  for (std::string_view unsupported : {"parallel_drafting", "dflash_config"}) {
    const nlohmann::json* v = Eagle3Key(config, unsupported);
    if (v != nullptr && !(v->is_boolean() && !v->get<bool>()) && !(v->is_object() && v->empty())) {
      return Eagle3KeyError(dir, unsupported, "not supported by this server");
    }
  }
  aux_layers->clear();
  if (!use_aux) {
    o.num_aux_hidden_states = 0;
    return o;
  }
  std::vector<int64_t> ids;
  if (const nlohmann::json* v = Eagle3Key(config, "eagle_aux_hidden_state_layer_ids")) {
    if (!v->is_array() || v->empty() || v->size() > 64) {
      return Eagle3KeyError(dir, "eagle_aux_hidden_state_layer_ids", "expected 1 to 64 layer ids");
    }
    for (const nlohmann::json& id : *v) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > target_layers) {
        return Eagle3KeyError(
            dir, "eagle_aux_hidden_state_layer_ids",
            absl::StrCat("each id must be a target layer boundary, 0 to ", target_layers));
      }
      ids.push_back(id.get<int64_t>());
    }
  } else {
    ids = {2, target_layers / 2, target_layers - 3};
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  ids.erase(std::remove_if(ids.begin(), ids.end(),
                           [&](int64_t id) { return id < 0 || id > target_layers; }),
            ids.end());
  o.num_aux_hidden_states = 3;
  if (const nlohmann::json* v = Eagle3Key(config, "num_aux_hidden_states")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 64) {
      return Eagle3KeyError(dir, "num_aux_hidden_states", "expected 1 to 64");
    }
    o.num_aux_hidden_states = v->get<int32_t>();
  } else if (Eagle3Key(config, "eagle_aux_hidden_state_layer_ids") != nullptr) {
    o.num_aux_hidden_states =
        static_cast<int32_t>(Eagle3Key(config, "eagle_aux_hidden_state_layer_ids")->size());
  }
  if (static_cast<int32_t>(ids.size()) != o.num_aux_hidden_states) {
    return Eagle3KeyError(
        dir, "eagle_aux_hidden_state_layer_ids",
        absl::StrFormat("the head's fc reads %d target hidden states but the layers give %d "
                        "distinct ones for a %d-layer target (list %d distinct layer ids)",
                        o.num_aux_hidden_states, ids.size(), target_layers,
                        o.num_aux_hidden_states));
  }
  aux_layers->assign(ids.begin(), ids.end());
  return o;
}

absl::StatusOr<std::unique_ptr<WeightSource>> DraftWeights(const std::filesystem::path& dir,
                                                           bool dummy, uint64_t seed) {
  if (dummy) return MakeDummyWeights(seed);
  return OpenSafetensors(dir);
}

// Medusa: the heads on the hidden state of the row that sampled.
class MedusaDrafter final : public Drafter {
 public:
  MedusaDrafter(std::unique_ptr<MedusaHead> head, int32_t hidden)
      : head_(std::move(head)), hidden_(hidden) {}
  bool needs_hidden_states() const override { return true; }
  int64_t kv_bytes_per_token() const override { return 0; }
  absl::Status InitializeKVCache(int32_t, int32_t) override { return absl::OkStatus(); }

  absl::Status Propose(std::span<const DraftRequest> requests, std::span<const float> hidden,
                       std::vector<std::vector<int32_t>>* drafts) override {
    drafts->assign(requests.size(), {});
    rows_.clear();
    which_.clear();
    int32_t k = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const DraftRequest& q = requests[i];
      if (q.num_drafts <= 0 || q.num_rows <= 0) continue;
      const size_t row = static_cast<size_t>(q.first_row + q.num_rows - 1);
      if ((row + 1) * hidden_ > hidden.size()) {
        return absl::InvalidArgumentError("Medusa: a request's row is outside the hidden states");
      }
      rows_.insert(rows_.end(), hidden.begin() + row * hidden_,
                   hidden.begin() + (row + 1) * hidden_);
      which_.push_back(i);
      k = std::max(k, std::min(q.num_drafts, head_->num_heads()));
    }
    if (which_.empty()) return absl::OkStatus();
    out_.resize(which_.size() * static_cast<size_t>(k));
    head_->Propose(rows_.data(), static_cast<int64_t>(which_.size()), k, out_.data());
    for (size_t j = 0; j < which_.size(); ++j) {
      const int32_t n = std::min(k, requests[which_[j]].num_drafts);
      (*drafts)[which_[j]].assign(out_.begin() + j * k, out_.begin() + j * k + n);
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<MedusaHead> head_;
  const size_t hidden_;
  std::vector<float> rows_;
  std::vector<size_t> which_;
  std::vector<int32_t> out_;
};

// EAGLE and EAGLE-3 heads and draft models: a LlamaModel with a KV cache of its own, run pass
// by pass.
class LlamaDrafter final : public Drafter {
 public:
  // `target_width`: floats per row of the target's hidden states (EAGLE-3: its aux states,
  // combined by the head before pass 1); 0 for a draft model.
  LlamaDrafter(std::unique_ptr<LlamaModel> model, std::unique_ptr<kernels::Communicator> own_comm,
               int64_t target_width)
      : own_comm_(std::move(own_comm)),
        model_(std::move(model)),
        eagle_(target_width > 0),
        target_width_(static_cast<size_t>(target_width)) {}

  bool needs_hidden_states() const override { return eagle_; }
  int64_t kv_bytes_per_token() const override {
    return int64_t{2} * model_->num_kv_heads() * model_->head_dim() *
           static_cast<int64_t>(sizeof(float)) * model_->num_layers();
  }
  absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) override {
    VLLM_ASSIGN_OR_RETURN(cache_, model_->AllocateKVCache(num_blocks, block_size));
    return absl::OkStatus();
  }
  absl::Status Propose(std::span<const DraftRequest> requests, std::span<const float> hidden,
                       std::vector<std::vector<int32_t>>* drafts) override;

 private:
  // The request's KV slot of `position`, or -1 when its block table does not reach it.
  int64_t SlotOf(const DraftRequest& q, int32_t position) const {
    const int32_t bs = cache_.block_size;
    const auto b = static_cast<size_t>(position / bs);
    if (position < 0 || b >= q.block_ids.size()) return -1;
    const int32_t block = q.block_ids[b];
    if (block < 0 || block >= cache_.num_blocks) return -1;
    return int64_t{block} * bs + position % bs;
  }
  void Clear();
  // Appends one row of the current sequence (`width` floats of `hidden` for an EAGLE head).
  void AddRow(int32_t token, int32_t position, int64_t slot, const float* hidden, size_t width);
  // The greedy draft of logits row `row` (a target token id).
  int32_t DraftOf(int32_t row) const {
    const int32_t width = model_->logits_width();
    return model_->TokenOfColumn(Argmax(logits_.data() + int64_t{row} * width, width));
  }
  // Closes the current sequence (its rows end at `last_position`).
  void EndSequence(const DraftRequest& q, int32_t last_position);
  // Runs the batch built since Clear, with a logits row per logits_rows_ entry.
  [[nodiscard]] absl::Status Run();
  // Pass 1: the step's standing rows (and, for a draft model, the token just sampled); fills
  // active_ with the requests that draft and their first drafts.
  [[nodiscard]] absl::Status FeedStep(std::span<const DraftRequest> requests,
                                      std::span<const float> hidden,
                                      std::vector<std::vector<int32_t>>* drafts);

  struct Active {
    size_t request = 0;
    int32_t position = 0;  // of its row in the last pass
    int32_t logits_row = 0;
  };

  std::unique_ptr<kernels::Communicator> own_comm_;  // draft_tensor_parallel_size 1 under TP
  std::unique_ptr<LlamaModel> model_;
  const bool eagle_;
  const size_t target_width_;
  KVCache cache_;
  std::vector<Active> active_;
  // The pass's batch.
  std::vector<int32_t> tokens_, positions_, query_start_loc_, seq_lens_, block_tables_,
      logits_rows_;
  std::vector<int64_t> slots_;
  std::vector<float> input_hidden_, logits_, out_hidden_, combined_;
  std::vector<std::span<const int32_t>> seq_blocks_;
};

void LlamaDrafter::Clear() {
  tokens_.clear();
  positions_.clear();
  slots_.clear();
  query_start_loc_.assign(1, 0);
  seq_lens_.clear();
  seq_blocks_.clear();
  logits_rows_.clear();
  input_hidden_.clear();
}

void LlamaDrafter::AddRow(int32_t token, int32_t position, int64_t slot, const float* hidden,
                          size_t width) {
  tokens_.push_back(token);
  positions_.push_back(position);
  slots_.push_back(slot);
  if (eagle_) input_hidden_.insert(input_hidden_.end(), hidden, hidden + width);
}

void LlamaDrafter::EndSequence(const DraftRequest& q, int32_t last_position) {
  query_start_loc_.push_back(static_cast<int32_t>(tokens_.size()));
  seq_lens_.push_back(last_position + 1);
  seq_blocks_.push_back(q.block_ids);
}

absl::Status LlamaDrafter::Run() {
  const int32_t bs = cache_.block_size;
  int32_t max_blocks = 1;
  for (int32_t len : seq_lens_) max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
  block_tables_.assign(seq_lens_.size() * static_cast<size_t>(max_blocks), 0);
  for (size_t s = 0; s < seq_lens_.size(); ++s) {
    const size_t n = static_cast<size_t>((seq_lens_[s] + bs - 1) / bs);
    std::copy_n(seq_blocks_[s].begin(), std::min(n, seq_blocks_[s].size()),
                block_tables_.begin() + s * max_blocks);
  }
  ForwardBatch batch;
  batch.token_ids = tokens_;
  batch.positions = positions_;
  batch.slot_mapping = slots_;
  batch.logits_indices = logits_rows_;
  batch.attention.num_seqs = static_cast<int32_t>(seq_lens_.size());
  batch.attention.query_start_loc = query_start_loc_.data();
  batch.attention.seq_lens = seq_lens_.data();
  batch.attention.block_tables = block_tables_.data();
  batch.attention.max_blocks_per_seq = max_blocks;
  batch.attention.block_size = bs;
  return model_->Forward(batch, cache_, &logits_, eagle_ ? &out_hidden_ : nullptr,
                         eagle_ ? input_hidden_.data() : nullptr);
}

absl::Status LlamaDrafter::FeedStep(std::span<const DraftRequest> requests,
                                    std::span<const float> hidden,
                                    std::vector<std::vector<int32_t>>* drafts) {
  const size_t w = target_width_;
  const int32_t vocab = model_->vocab_size();
  Clear();
  active_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& q = requests[i];
    const auto known = static_cast<int32_t>(q.token_ids.size());
    // EAGLE's row p reads token p + 1: the last known token has no row yet.
    const int32_t rows = std::min(q.num_rows, known - q.first_position - (eagle_ ? 1 : 0));
    if (rows <= 0) continue;
    for (int32_t j = 0; j < rows; ++j) {
      const int32_t p = q.first_position + j;
      const int64_t slot = SlotOf(q, p);
      const size_t row = static_cast<size_t>(q.first_row + j);
      if (slot < 0 || (eagle_ && (row + 1) * w > hidden.size())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("draft: a step row (position %d) has no KV slot or hidden state", p));
      }
      const int32_t token = q.token_ids[p + (eagle_ ? 1 : 0)];
      if (token < 0 || token >= vocab) {
        return absl::InvalidArgumentError(absl::StrFormat("draft: token id %d", token));
      }
      AddRow(token, p, slot, eagle_ ? hidden.data() + row * w : nullptr, w);
    }
    int32_t last = q.first_position + rows - 1;
    // Drafting continues after the last known token, which must be the one this step sampled,
    // right after the standing rows.
    bool drafting =
        q.num_drafts > 0 && rows == q.num_rows && q.first_position + q.num_rows + 1 == known;
    if (drafting && !eagle_) {
      // A draft model reads the token just sampled at its own position.
      const int64_t slot = SlotOf(q, last + 1);
      drafting = slot >= 0 && q.token_ids[last + 1] >= 0 && q.token_ids[last + 1] < vocab;
      if (drafting) {
        ++last;
        AddRow(q.token_ids[last], last, slot, nullptr, 0);
      }
    }
    EndSequence(q, last);
    if (drafting) {
      active_.push_back({i, last, static_cast<int32_t>(logits_rows_.size())});
      logits_rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
    }
  }
  if (tokens_.empty()) return absl::OkStatus();
  if (eagle_ && w != static_cast<size_t>(model_->config().hidden_size)) {
    // EAGLE-3: fc over the target's aux states, once, before the first pass.
    model_->CombineHiddenStates(input_hidden_, &combined_);
    input_hidden_.swap(combined_);
  }
  VLLM_RETURN_IF_ERROR(Run());
  for (const Active& a : active_) (*drafts)[a.request].push_back(DraftOf(a.logits_row));
  return absl::OkStatus();
}

absl::Status LlamaDrafter::Propose(std::span<const DraftRequest> requests,
                                   std::span<const float> hidden,
                                   std::vector<std::vector<int32_t>>* drafts) {
  drafts->assign(requests.size(), {});
  if (cache_.num_blocks == 0) return absl::FailedPreconditionError("draft: no KV cache yet");
  VLLM_RETURN_IF_ERROR(FeedStep(requests, hidden, drafts));
  const auto h = static_cast<size_t>(model_->config().hidden_size);
  // Passes 2..k: each drafting request's last draft at the next position, reading (EAGLE) the
  // head's own output of its previous row.
  std::vector<Active> next;
  // The previous pass's outputs, swapped out before the batch is rebuilt (no copies).
  std::vector<float> previous_hidden;
  std::vector<int32_t> previous_rows;
  while (!active_.empty()) {
    previous_hidden.swap(out_hidden_);
    previous_rows.swap(logits_rows_);
    Clear();
    next.clear();
    for (const Active& a : active_) {
      const DraftRequest& q = requests[a.request];
      const std::vector<int32_t>& d = (*drafts)[a.request];
      if (static_cast<int32_t>(d.size()) >= q.num_drafts) continue;
      const int32_t p = a.position + 1;
      const int64_t slot = SlotOf(q, p);
      if (slot < 0) continue;
      const float* row =
          eagle_ ? previous_hidden.data() + static_cast<size_t>(previous_rows[a.logits_row]) * h
                 : nullptr;
      AddRow(d.back(), p, slot, row, h);
      EndSequence(q, p);
      next.push_back({a.request, p, static_cast<int32_t>(logits_rows_.size())});
      logits_rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
    }
    active_.swap(next);
    if (active_.empty()) break;
    VLLM_RETURN_IF_ERROR(Run());
    for (const Active& a : active_) (*drafts)[a.request].push_back(DraftOf(a.logits_row));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const config::SpeculativeConfig& config,
                                                     LlamaModel& target,
                                                     kernels::Communicator* comm,
                                                     bool dummy_weights, uint64_t dummy_seed) {
  const std::filesystem::path& dir = config.model;
  const HfConfig& t = target.config();
  if (config.method == "medusa") {
    VLLM_ASSIGN_OR_RETURN(MedusaConfig mc, LoadMedusaConfig(dir));
    if (mc.hidden_size != t.hidden_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--speculative-config model: the Medusa head's hidden_size %d differs from the "
          "target's %d (config.json)",
          mc.hidden_size, t.hidden_size));
    }
    if (mc.vocab_size != t.vocab_size)
      return VocabMismatch("Medusa head", mc.vocab_size, t.vocab_size);
    VLLM_ASSIGN_OR_RETURN(auto weights, DraftWeights(dir, dummy_weights, dummy_seed));
    VLLM_ASSIGN_OR_RETURN(auto head, MedusaHead::Load(mc, *weights));
    return std::unique_ptr<Drafter>(new MedusaDrafter(std::move(head), t.hidden_size));
  }
  if (config.method != "eagle" && config.method != "eagle3" && config.method != "draft_model") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--speculative-config method: '%s' has no draft in the worker", config.method));
  }
  const bool eagle = config.method == "eagle";
  const bool eagle3 = config.method == "eagle3";
  nlohmann::json json;
  VLLM_ASSIGN_OR_RETURN(HfConfig dc,
                        eagle || eagle3 ? LoadEagleConfig(dir, eagle3, &json) : LoadHfConfig(dir));
  // RoPE tables as long as the target's (stretched to a longer --max-model-len: worker.cc).
  dc.max_position_embeddings = std::max(dc.max_position_embeddings, t.max_position_embeddings);
  if (dc.vocab_size != t.vocab_size) {
    return VocabMismatch(eagle    ? "EAGLE head"
                         : eagle3 ? "EAGLE-3 head"
                                  : "draft model",
                         dc.vocab_size, t.vocab_size);
  }
  Eagle3Options options;
  std::vector<int32_t> aux_layers;
  if (eagle3) {
    VLLM_ASSIGN_OR_RETURN(options,
                          Eagle3OptionsOf(json, dir, dc, t.num_hidden_layers, &aux_layers));
  }
  // draft_tensor_parallel_size 1: the whole draft on every rank, with a group of its own.
  std::unique_ptr<kernels::Communicator> own;
  kernels::Communicator* draft_comm = comm;
  if (config.draft_tensor_parallel_size == 1 && comm->world_size() > 1) {
    own = std::make_unique<kernels::SingleRankCommunicator>();
    draft_comm = own.get();
  }
  VLLM_ASSIGN_OR_RETURN(auto weights, DraftWeights(dir, dummy_weights, dummy_seed));
  std::unique_ptr<LlamaModel> model;
  if (eagle) {
    VLLM_ASSIGN_OR_RETURN(model, LlamaModel::LoadEagleHead(dc, *weights, draft_comm, target));
  } else if (eagle3) {
    VLLM_ASSIGN_OR_RETURN(model,
                          LlamaModel::LoadEagle3Head(dc, options, *weights, draft_comm, target));
    // The target's Forward now hands out the aux states instead of its last hidden state.
    target.SetAuxHiddenLayers(std::move(aux_layers));
  } else {
    VLLM_ASSIGN_OR_RETURN(model, LlamaModel::Load(dc, *weights, draft_comm));
  }
  const int64_t target_width = eagle || eagle3 ? target.hidden_out_width() : 0;
  return std::unique_ptr<Drafter>(new LlamaDrafter(std::move(model), std::move(own), target_width));
}

}  // namespace vllm::worker
