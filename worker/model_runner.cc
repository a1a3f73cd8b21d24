#include "worker/model_runner.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu/rejection_sampler.h"
#include "kernels/cpu/sampling.h"
#include "xxhash.h"

namespace vllm::worker {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace cpu = ::vllm::kernels::cpu;

// Salts a request's seed for the accept/reject draws of speculative decoding, so that they are
// independent of the draws that sample tokens (CounterUniform(seed, position)).
constexpr uint64_t kAcceptSeedSalt = 0x9e3779b97f4a7c15ULL;

cpu::SamplingRow ToSamplingRow(const core::SamplingParams& p) {
  cpu::SamplingRow row;
  row.temperature = static_cast<float>(p.temperature);
  row.top_k = p.top_k;
  row.top_p = static_cast<float>(p.top_p);
  row.min_p = static_cast<float>(p.min_p);
  row.presence_penalty = static_cast<float>(p.presence_penalty);
  row.frequency_penalty = static_cast<float>(p.frequency_penalty);
  row.repetition_penalty = static_cast<float>(p.repetition_penalty);
  return row;
}

absl::Status Bad(const std::string& req_id, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("SchedulerOutput: request %s: %s", req_id, what));
}

// The device sampler lacks penalties, logprobs, allowed_token_ids, bad_words and logit_bias:
// such rows are sampled on the host.
bool NeedsHostSampling(const core::SamplingParams& p) {
  return p.logprobs.has_value() || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 ||
         p.repetition_penalty != 1.0 || !p.allowed_token_ids.empty() ||
         !p.bad_words_token_ids.empty() || !p.logit_bias.empty();
}

// vLLM's allowed_token_ids, bad_words and logit_bias on one row (before the penalties).
void ApplyConstraints(const core::SamplingParams& p, float* logits, int64_t vocab,
                      std::span<const int32_t> output_ids) {
  cpu::ApplyTokenConstraints(logits, vocab, p.allowed_token_ids, p.bad_words_token_ids,
                             p.logit_bias, output_ids);
}

}  // namespace

ModelRunner::ModelRunner(std::unique_ptr<ModelBackend> backend, uint64_t seed)
    : backend_(std::move(backend)), seed_(seed) {}

ModelRunner::ModelRunner(std::unique_ptr<LlamaModel> model, uint64_t seed)
    : ModelRunner(std::make_unique<CpuModelBackend>(std::move(model), int64_t{1} << 30), seed) {}

absl::Status ModelRunner::InitializeKVCache(int32_t num_blocks, int32_t block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache needs positive num_blocks and block_size, got %d and %d",
                        num_blocks, block_size));
  }
  VLLM_RETURN_IF_ERROR(backend_->InitializeKVCache(num_blocks, block_size));
  if (drafter_ != nullptr)
    VLLM_RETURN_IF_ERROR(drafter_->InitializeKVCache(num_blocks, block_size));
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  return absl::OkStatus();
}

absl::Status ModelRunner::UpdateStates(const core::SchedulerOutput& so) {
  for (const std::string& id : so.finished_req_ids) requests_.erase(id);
  // A preempted request keeps its sampling state (a resume sends tokens and blocks only).
  for (const std::string& id : so.preempted_req_ids) {
    auto it = requests_.find(id);
    if (it != requests_.end()) it->second->block_ids.clear();
  }
  scheduled_.clear();
  for (const core::NewRequestData& d : so.scheduled_new_reqs) {
    if (d.prompt_token_ids.empty()) return Bad(d.req_id, "empty prompt");
    std::unique_ptr<RequestState>& slot = requests_[d.req_id];
    if (slot == nullptr) slot = std::make_unique<RequestState>();
    RequestState& s = *slot;
    s.token_ids = d.prompt_token_ids;
    s.num_prompt_tokens = static_cast<int32_t>(d.prompt_token_ids.size());
    s.num_computed_tokens = d.num_computed_tokens;
    s.block_ids = d.block_ids;
    s.sampling_params = d.sampling_params;
    s.seed = d.sampling_params.seed.has_value() ? static_cast<uint64_t>(*d.sampling_params.seed)
                                                : XXH64(d.req_id.data(), d.req_id.size(), seed_);
    ResetPromptLogprobs(s);
    scheduled_.push_back(&s);
  }
  const core::CachedRequestData& c = so.scheduled_cached_reqs;
  for (size_t i = 0; i < c.size(); ++i) {
    auto it = requests_.find(c.req_ids[i]);
    if (it == requests_.end()) return Bad(c.req_ids[i], "not known to this worker");
    RequestState& s = *it->second;
    const auto tokens = c.new_token_ids_of(i);
    const auto blocks = c.new_block_ids_of(i);
    const int32_t nc = c.num_computed_tokens[i];
    if (c.resumed_from_preemption[i] != 0) {
      if (static_cast<int32_t>(tokens.size()) < s.num_prompt_tokens) {
        return Bad(c.req_ids[i], "resumed without its prompt");
      }
      s.token_ids.assign(tokens.begin(), tokens.end());
      s.block_ids.assign(blocks.begin(), blocks.end());
      ResetPromptLogprobs(s);
    } else {
      if (nc < 0 || nc > static_cast<int32_t>(s.token_ids.size())) {
        return Bad(c.req_ids[i], absl::StrFormat("num_computed_tokens %d but %d tokens known", nc,
                                                 s.token_ids.size()));
      }
      // The tokens fed this step; usually the token this worker sampled last step. A pipeline
      // stage before the last samples nothing and verifies no draft: it knows the tokens it was
      // fed, and what it was fed beyond them (drafts the last stage rejected) is dropped.
      const size_t end = static_cast<size_t>(nc) + tokens.size();
      if (s.token_ids.size() < end || next_stage_ != nullptr) s.token_ids.resize(end);
      std::copy(tokens.begin(), tokens.end(), s.token_ids.begin() + nc);
      s.block_ids.insert(s.block_ids.end(), blocks.begin(), blocks.end());
    }
    s.num_computed_tokens = nc;
    scheduled_.push_back(&s);
  }
  if (so.num_scheduled_tokens.size() != scheduled_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SchedulerOutput: %d num_scheduled_tokens entries for %d requests",
                        so.num_scheduled_tokens.size(), scheduled_.size()));
  }
  return absl::OkStatus();
}

void ModelRunner::ResetPromptLogprobs(RequestState& s) const {
  s.prompt_logprobs_pending =
      s.sampling_params.prompt_logprobs.has_value() && backend_->supports_prompt_logprobs();
  s.num_prompt_logprobs_filled = 0;
  s.prompt_logprobs.clear();
  if (s.prompt_logprobs_pending) s.prompt_logprobs.resize(s.num_prompt_tokens - 1);
}

void ModelRunner::AddPromptLogprobsRows(const RequestState& s, int32_t r, int32_t nc,
                                        int32_t seq_len, int32_t first_row) {
  // Position p's logits predict prompt token p + 1: positions 0 .. num_prompt_tokens - 2.
  const int32_t end = std::min(seq_len, s.num_prompt_tokens - 1);
  for (int32_t p = nc; p < end; ++p) {
    logits_indices_.push_back(first_row + (p - nc));
    sampling_rows_.push_back(r);
    prompt_positions_.push_back(p);
    RowSampling row;
    row.on_host = true;  // never sampled: its raw logits come back for the logprobs
    row.logits_only = true;
    row_sampling_.push_back(row);
  }
}

absl::Status ModelRunner::PrepareInputs(const core::SchedulerOutput& so) {
  const int32_t bs = block_size_;
  input_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  seq_lens_.clear();
  logits_indices_.clear();
  sampling_rows_.clear();
  prompt_positions_.clear();
  row_sampling_.clear();
  spec_rows_.clear();
  if (!so.num_scheduled_spec_tokens.empty() &&
      so.num_scheduled_spec_tokens.size() != scheduled_.size()) {
    return absl::InvalidArgumentError(
        "SchedulerOutput: num_scheduled_spec_tokens must be empty or one entry per request");
  }
  VLLM_RETURN_IF_ERROR(ReadGrammarRows(so));
  max_query_len_ = 0;
  max_seq_len_ = 0;
  query_start_loc_.assign(1, 0);
  int32_t max_blocks = 1;
  for (size_t r = 0; r < scheduled_.size(); ++r) {
    const RequestState& s = *scheduled_[r];
    const int32_t n = so.num_scheduled_tokens[r];
    const int32_t nc = s.num_computed_tokens;
    const std::string& id = so.scheduled_req_id(r);
    if (n <= 0 || nc + n > static_cast<int32_t>(s.token_ids.size())) {
      return Bad(id, absl::StrFormat("%d tokens scheduled from %d, but %d known", n, nc,
                                     s.token_ids.size()));
    }
    const int32_t seq_len = nc + n;
    const int32_t num_blocks = (seq_len + bs - 1) / bs;
    if (num_blocks > static_cast<int32_t>(s.block_ids.size())) {
      return Bad(id, absl::StrFormat("%d tokens need %d blocks, the table has %d", seq_len,
                                     num_blocks, s.block_ids.size()));
    }
    for (int32_t b = 0; b < num_blocks; ++b) {
      if (s.block_ids[b] < 0 || s.block_ids[b] >= num_blocks_) {
        return Bad(id, absl::StrFormat("block %d outside the cache of %d blocks", s.block_ids[b],
                                       num_blocks_));
      }
    }
    const auto first_row = static_cast<int32_t>(input_ids_.size());
    for (int32_t p = nc; p < seq_len; ++p) {
      input_ids_.push_back(s.token_ids[p]);
      positions_.push_back(p);
      slot_mapping_.push_back(int64_t{s.block_ids[p / bs]} * bs + p % bs);
    }
    query_start_loc_.push_back(static_cast<int32_t>(input_ids_.size()));
    seq_lens_.push_back(seq_len);
    max_blocks = std::max(max_blocks, num_blocks);
    max_query_len_ = std::max(max_query_len_, n);
    max_seq_len_ = std::max(max_seq_len_, seq_len);
    // Rows stay ascending: prompt positions end before the last token, the sampled row.
    if (s.prompt_logprobs_pending)
      AddPromptLogprobsRows(s, static_cast<int32_t>(r), nc, seq_len, first_row);
    VLLM_RETURN_IF_ERROR(AddSamplingRows(so, r, seq_len));
  }
  block_tables_.assign(scheduled_.size() * static_cast<size_t>(max_blocks), 0);
  for (size_t r = 0; r < scheduled_.size(); ++r) {
    const RequestState& s = *scheduled_[r];
    const int32_t num_blocks = (seq_lens_[r] + bs - 1) / bs;
    std::copy_n(s.block_ids.begin(), num_blocks, block_tables_.begin() + r * max_blocks);
  }
  for (int32_t id : input_ids_) {
    if (id < 0 || id >= backend_->config().vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("SchedulerOutput: token id %d outside the vocabulary of %d", id,
                          backend_->config().vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::ReadGrammarRows(const core::SchedulerOutput& so) {
  // Structured outputs: the bitmask row of each constrained scheduled request (the first of
  // its num_spec + 1 consecutive rows when it has drafts), and how many it has.
  grammar_row_.assign(scheduled_.size(), nullptr);
  grammar_rows_.assign(scheduled_.size(), 0);
  if (so.structured_output_indices.empty()) return absl::OkStatus();
  const size_t words = (static_cast<size_t>(backend_->config().vocab_size) + 31) / 32;
  if (so.grammar_bitmask.size() != words * so.structured_output_indices.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SchedulerOutput: grammar_bitmask has %d words for %d rows of a %d-token vocabulary",
        so.grammar_bitmask.size(), so.structured_output_indices.size(),
        backend_->config().vocab_size));
  }
  for (size_t i = 0; i < so.structured_output_indices.size(); ++i) {
    const auto r = static_cast<size_t>(so.structured_output_indices[i]);
    if (r >= grammar_row_.size()) {
      return absl::InvalidArgumentError("SchedulerOutput: structured_output_indices out of range");
    }
    if (grammar_rows_[r] > 0 && so.structured_output_indices[i - 1] != static_cast<int32_t>(r)) {
      return absl::InvalidArgumentError(
          "SchedulerOutput: a request's grammar bitmask rows must be consecutive");
    }
    if (grammar_rows_[r]++ == 0) grammar_row_[r] = so.grammar_bitmask.data() + i * words;
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::AddSamplingRows(const core::SchedulerOutput& so, size_t r,
                                          int32_t seq_len) {
  const RequestState& s = *scheduled_[r];
  const int32_t n = so.num_scheduled_tokens[r];
  const std::string& id = so.scheduled_req_id(r);
  const int32_t num_spec =
      so.num_scheduled_spec_tokens.empty() ? 0 : so.num_scheduled_spec_tokens[r];
  if (num_spec > 0) {
    if (num_spec >= n || seq_len != static_cast<int32_t>(s.token_ids.size())) {
      return Bad(id, absl::StrFormat("%d draft tokens in a step of %d", num_spec, n));
    }
    if (grammar_row_[r] != nullptr && grammar_rows_[r] != num_spec + 1) {
      return Bad(id, absl::StrFormat("%d grammar bitmask rows for %d draft tokens",
                                     grammar_rows_[r], num_spec));
    }
    // Verification: the rows of the last real token and of every draft, sampled together
    // on the host by the rejection sampler.
    for (int32_t j = 0; j <= num_spec; ++j) {
      logits_indices_.push_back(static_cast<int32_t>(input_ids_.size()) - 1 - num_spec + j);
      sampling_rows_.push_back(static_cast<int32_t>(r));
      prompt_positions_.push_back(-1);
      spec_rows_.resize(logits_indices_.size(), -1);
      spec_rows_.back() = j;
      RowSampling row;
      row.on_host = true;
      row.logits_only = true;  // the device samples nothing here
      row_sampling_.push_back(row);
    }
  } else if (grammar_rows_[r] > 1) {
    return Bad(id, absl::StrFormat("%d grammar bitmask rows without drafts", grammar_rows_[r]));
  } else if (seq_len == static_cast<int32_t>(s.token_ids.size())) {
    // Samples only when every known token is computed (not mid-way through a chunked
    // prefill).
    logits_indices_.push_back(static_cast<int32_t>(input_ids_.size()) - 1);
    sampling_rows_.push_back(static_cast<int32_t>(r));
    prompt_positions_.push_back(-1);
    const core::SamplingParams& p = s.sampling_params;
    RowSampling row;
    row.temperature = static_cast<float>(p.temperature);
    row.top_k = p.top_k;
    row.top_p = static_cast<float>(p.top_p);
    row.min_p = static_cast<float>(p.min_p);
    row.u = cpu::CounterUniform(s.seed, s.token_ids.size());
    row.on_host = !backend_->samples_on_device() || NeedsHostSampling(p);
    // Applied by the device to a row it samples, by Sample to an on_host row.
    row.bitmask = grammar_row_[r];
    row_sampling_.push_back(row);
  }
  return absl::OkStatus();
}

int32_t ModelRunner::Sample(RequestState& s, float* logits, core::TokenLogprobs* logprobs,
                            const int32_t* bitmask) {
  const int64_t vocab = backend_->config().vocab_size;
  // Before everything else, as vLLM applies the grammar bitmask to the logits the sampler
  // (and its logprobs) sees.
  if (bitmask != nullptr) cpu::ApplyTokenBitmask(logits, vocab, bitmask);
  std::vector<float> raw;
  if (logprobs != nullptr) raw.assign(logits, logits + vocab);
  const cpu::SamplingRow row = ToSamplingRow(s.sampling_params);
  const std::span<const int32_t> all(s.token_ids);
  ApplyConstraints(s.sampling_params, logits, vocab, all.subspan(s.num_prompt_tokens));
  cpu::ApplyPenalties(logits, vocab, all.first(s.num_prompt_tokens),
                      all.subspan(s.num_prompt_tokens), row);
  const double u = cpu::CounterUniform(s.seed, s.token_ids.size());
  const int32_t token = cpu::SampleRow(logits, vocab, row, u);
  if (logprobs != nullptr) {
    cpu::RowLogprobs lp =
        cpu::ComputeLogprobs(raw.data(), vocab, token, *s.sampling_params.logprobs);
    logprobs->token_ids = std::move(lp.token_ids);
    logprobs->logprobs = std::move(lp.logprobs);
    logprobs->sampled_token_rank = lp.sampled_token_rank;
  }
  return token;
}

void ModelRunner::VerifyDrafts(RequestState& s, int32_t num_spec, float* logits,
                               const int32_t* bitmask, core::ModelRunnerOutput* out, size_t r) {
  const int64_t vocab = backend_->config().vocab_size;
  const auto rows = static_cast<size_t>(num_spec) + 1;
  // The grammar's row j masks position j first, as Sample masks a plain row.
  if (bitmask != nullptr) {
    const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
    for (size_t j = 0; j < rows; ++j) {
      cpu::ApplyTokenBitmask(logits + j * vocab, vocab, bitmask + j * words);
    }
  }
  // The request's real tokens; its drafts follow them in token_ids.
  const size_t num_real = s.token_ids.size() - static_cast<size_t>(num_spec);
  const std::span<const int32_t> all(s.token_ids);
  const std::span<const int32_t> draft = all.subspan(num_real);
  const bool want = s.sampling_params.logprobs.has_value();
  // Logprobs are the target's, of the raw rows (before penalties and temperature).
  if (want) spec_raw_.assign(logits, logits + rows * vocab);
  const cpu::SamplingRow row = ToSamplingRow(s.sampling_params);
  // Row j predicts the token after draft[0..j): penalties count those drafts as output.
  for (size_t j = 0; j < rows; ++j) {
    ApplyConstraints(s.sampling_params, logits + j * vocab, vocab,
                     all.subspan(s.num_prompt_tokens, num_real + j - s.num_prompt_tokens));
    cpu::ApplyPenalties(logits + j * vocab, vocab, all.first(s.num_prompt_tokens),
                        all.subspan(s.num_prompt_tokens, num_real + j - s.num_prompt_tokens), row);
  }
  spec_u_accept_.resize(static_cast<size_t>(num_spec));
  spec_u_sample_.resize(rows);
  for (size_t j = 0; j < rows; ++j) {
    spec_u_sample_[j] = cpu::CounterUniform(s.seed, num_real + j);
    if (j < static_cast<size_t>(num_spec)) {
      spec_u_accept_[j] = cpu::CounterUniform(s.seed ^ kAcceptSeedSalt, num_real + j);
    }
  }
  spec_tokens_.clear();
  cpu::RejectionSample(logits, vocab, draft, /*draft_probs=*/nullptr, row, spec_u_accept_,
                       spec_u_sample_, &spec_tokens_);
  std::vector<int32_t>& sampled = out->sampled_token_ids[r];
  sampled.assign(spec_tokens_.begin(), spec_tokens_.end());
  if (want) {
    if (out->logprobs.empty()) out->logprobs.resize(out->req_ids.size());
    for (size_t j = 0; j < spec_tokens_.size(); ++j) {
      cpu::RowLogprobs lp = cpu::ComputeLogprobs(spec_raw_.data() + j * vocab, vocab,
                                                 spec_tokens_[j], *s.sampling_params.logprobs);
      core::TokenLogprobs& t = out->logprobs[r].emplace_back();
      t.token_ids = std::move(lp.token_ids);
      t.logprobs = std::move(lp.logprobs);
      t.sampled_token_rank = lp.sampled_token_rank;
    }
  }
  // The worker keeps the accepted drafts and the token after them; the rejected drafts go.
  s.token_ids.resize(num_real);
  s.token_ids.insert(s.token_ids.end(), spec_tokens_.begin(), spec_tokens_.end());
}

void ModelRunner::AddPromptLogprobs(RequestState& s, int32_t position, const float* logits) {
  const int64_t vocab = backend_->config().vocab_size;
  // Prompt token ids were range-checked when fed (PrepareInputs); the target was fed or is
  // about to be, and is checked here again so a bad id can never index the row.
  const int32_t target = s.token_ids[position + 1];
  core::TokenLogprobs& lp = s.prompt_logprobs[position];
  if (target < 0 || target >= vocab) return;
  cpu::RowLogprobs row =
      cpu::ComputeLogprobs(logits, vocab, target, *s.sampling_params.prompt_logprobs);
  const bool was_empty = lp.token_ids.empty();
  lp.token_ids = std::move(row.token_ids);
  lp.logprobs = std::move(row.logprobs);
  lp.sampled_token_rank = row.sampled_token_rank;
  if (was_empty) ++s.num_prompt_logprobs_filled;
}

absl::StatusOr<core::ModelRunnerOutput> ModelRunner::ExecuteModel(const core::SchedulerOutput& so) {
  bool received = false, forwarded = false;
  const int64_t start = NowNs();
  const int64_t waited_before = stage_stats_.send_ns + stage_stats_.receive_ns;
  absl::StatusOr<core::ModelRunnerOutput> out = RunStep(so, &received, &forwarded);
  const int64_t end = NowNs();
  if (!out.ok() || !out->req_ids.empty()) {
    StageStats& st = stage_stats_;
    if (st.steps == 0) st.first_step_ns = start;
    ++st.steps;
    st.last_step_end_ns = end;
    st.busy_ns += (end - start) - (st.send_ns + st.receive_ns - waited_before);
  }
  // Between stages exactly one frame per step with scheduled requests (known from the step
  // itself, whatever state a stage is in): a stage that failed such a step still takes the
  // previous stage's frame and still sends one, an error, so the next step lines up.
  if (!out.ok() && so.num_scheduled_reqs() > 0) {
    if (previous_stage_ != nullptr && !received) {
      (void)previous_stage_->Receive(so.step_id, &stage_input_);
    }
    if (next_stage_ != nullptr && !forwarded) {
      const absl::Status error = absl::Status(
          out.status().code(),
          absl::StrCat("pipeline stage ", backend_->stage().rank, ": ", out.status().message()));
      if (absl::Status s = next_stage_->SendError(so.step_id, error); !s.ok()) return s;
    }
  }
  return out;
}

absl::StatusOr<core::ModelRunnerOutput> ModelRunner::RunStep(const core::SchedulerOutput& so,
                                                             bool* received, bool* forwarded) {
  if (!kv_cache_initialized()) {
    return absl::FailedPreconditionError("ExecuteModel before InitializeKVCache");
  }
  VLLM_RETURN_IF_ERROR(UpdateStates(so));
  core::ModelRunnerOutput out;
  const size_t n = scheduled_.size();
  out.req_ids.reserve(n);
  for (size_t r = 0; r < n; ++r) out.req_ids.push_back(so.scheduled_req_id(r));
  out.sampled_token_ids.resize(n);
  if (n == 0) return out;
  VLLM_RETURN_IF_ERROR(PrepareInputs(so));

  StepInputs inputs;
  inputs.token_ids = input_ids_;
  inputs.positions = positions_;
  inputs.slot_mapping = slot_mapping_;
  inputs.query_start_loc = query_start_loc_;
  inputs.seq_lens = seq_lens_;
  inputs.block_tables = block_tables_;
  inputs.max_blocks_per_seq = static_cast<int32_t>(block_tables_.size() / n);
  inputs.max_query_len = max_query_len_;
  inputs.max_seq_len = max_seq_len_;
  inputs.logits_indices = logits_indices_;
  inputs.sampling = row_sampling_;
  // A draft without a KV cache of its own (Medusa) needs nothing from a step that drafts
  // nothing (the dynamic schedule's k = 0).
  inputs.want_hidden = drafter_ != nullptr && drafter_->needs_hidden_states() &&
                       (so.num_spec_tokens_to_schedule > 0 || drafter_->kv_bytes_per_token() > 0);
  if (previous_stage_ != nullptr) {
    // The previous stage's error (its own, or one it passed on) fails this step here too.
    const int64_t t0 = NowNs();
    *received = true;  // taken, or the queue failed: nothing to drain either way
    const absl::Status frame = previous_stage_->Receive(so.step_id, &stage_input_);
    stage_stats_.receive_ns += NowNs() - t0;
    VLLM_RETURN_IF_ERROR(frame);
    inputs.intermediate_in = &stage_input_;
  }
  VLLM_RETURN_IF_ERROR(backend_->Execute(inputs, &result_));
  if (next_stage_ != nullptr) {
    *forwarded = true;
    const int64_t t0 = NowNs();
    const absl::Status sent = next_stage_->Send(so.step_id, result_.intermediate);
    stage_stats_.send_ns += NowNs() - t0;
    stage_stats_.bytes_sent += static_cast<int64_t>(StageFrameBytes(result_.intermediate));
    VLLM_RETURN_IF_ERROR(sent);
  } else {
    VLLM_RETURN_IF_ERROR(SampleRows(so, &out));
  }
  for (size_t r = 0; r < n; ++r) scheduled_[r]->num_computed_tokens += so.num_scheduled_tokens[r];
  return out;
}

absl::Status ModelRunner::SampleRows(const core::SchedulerOutput& so,
                                     core::ModelRunnerOutput* out_ptr) {
  core::ModelRunnerOutput& out = *out_ptr;
  const size_t n = scheduled_.size();
  if (result_.tokens.size() != sampling_rows_.size()) {
    return absl::InternalError("the model backend returned a token count unlike the batch's");
  }

  bool any_logprobs = false;
  spec_rows_.resize(sampling_rows_.size(), -1);
  for (size_t i = 0; i < sampling_rows_.size(); ++i) {
    any_logprobs |= prompt_positions_[i] < 0 &&
                    scheduled_[sampling_rows_[i]]->sampling_params.logprobs.has_value();
  }
  if (any_logprobs) out.logprobs.resize(n);
  const int64_t vocab = backend_->config().vocab_size;
  size_t host_row = 0;
  for (size_t i = 0; i < sampling_rows_.size(); ++i) {
    const int32_t r = sampling_rows_[i];
    RequestState& s = *scheduled_[r];
    if (prompt_positions_[i] >= 0) {
      if (!row_sampling_[i].on_host || (host_row + 1) * vocab > result_.host_logits.size()) {
        return absl::InternalError("the model backend returned too few host logits rows");
      }
      AddPromptLogprobs(s, prompt_positions_[i], result_.host_logits.data() + host_row * vocab);
      ++host_row;
      continue;
    }
    if (IsSpecRow(i)) {
      const auto num_spec = static_cast<size_t>(so.num_scheduled_spec_tokens[r]);
      if ((host_row + num_spec + 1) * vocab > result_.host_logits.size()) {
        return absl::InternalError("the model backend returned too few host logits rows");
      }
      VerifyDrafts(s, static_cast<int32_t>(num_spec), result_.host_logits.data() + host_row * vocab,
                   grammar_row_[r], &out, r);
      host_row += num_spec + 1;
      i += num_spec;
      continue;
    }
    core::TokenLogprobs lp;
    const bool want = s.sampling_params.logprobs.has_value();
    int32_t token = result_.tokens[i];
    if (row_sampling_[i].on_host) {
      if ((host_row + 1) * vocab > result_.host_logits.size()) {
        return absl::InternalError("the model backend returned too few host logits rows");
      }
      token = Sample(s, result_.host_logits.data() + host_row * vocab, want ? &lp : nullptr,
                     row_sampling_[i].bitmask);
      ++host_row;
    } else if (token < 0 || token >= vocab) {
      return absl::InternalError(absl::StrFormat("the device sampled token %d", token));
    }
    out.sampled_token_ids[r].push_back(token);
    if (want) out.logprobs[r].push_back(std::move(lp));
    s.token_ids.push_back(token);
    // The whole prompt's logprobs go with the first token sampled after the prompt.
    if (s.prompt_logprobs_pending && s.num_prompt_logprobs_filled == s.num_prompt_tokens - 1) {
      if (out.prompt_logprobs.empty()) out.prompt_logprobs.resize(n);
      out.prompt_logprobs[r] = std::move(s.prompt_logprobs);
      s.prompt_logprobs.clear();
      s.prompt_logprobs_pending = false;
    }
  }
  if (drafter_ != nullptr) VLLM_RETURN_IF_ERROR(ProposeDrafts(so, &out));
  return absl::OkStatus();
}

absl::Status ModelRunner::ProposeDrafts(const core::SchedulerOutput& so,
                                        core::ModelRunnerOutput* out) {
  const size_t n = scheduled_.size();
  draft_requests_.resize(n);
  bool any = false;
  for (size_t r = 0; r < n; ++r) {
    const RequestState& s = *scheduled_[r];
    const std::vector<int32_t>& sampled = out->sampled_token_ids[r];
    const int32_t num_spec =
        so.num_scheduled_spec_tokens.empty() ? 0 : so.num_scheduled_spec_tokens[r];
    DraftRequest& q = draft_requests_[r];
    q.first_row = query_start_loc_[r];
    // The rows that stand: all, less the rejected drafts' (sampled holds the accepted drafts
    // and one more token).
    q.num_rows = so.num_scheduled_tokens[r] - num_spec +
                 (num_spec > 0 ? static_cast<int32_t>(sampled.size()) - 1 : 0);
    q.first_position = s.num_computed_tokens;
    q.token_ids = s.token_ids;
    q.block_ids = s.block_ids;
    q.num_drafts =
        sampled.empty() ? 0 : std::min(num_speculative_tokens_, so.num_spec_tokens_to_schedule);
    any |= q.num_drafts > 0;
  }
  // Nothing to draft and no KV cache of the draft's to keep up to date.
  if (!any && drafter_->kv_bytes_per_token() == 0) return absl::OkStatus();
  std::vector<std::vector<int32_t>>& drafts = out->draft_token_ids;
  VLLM_RETURN_IF_ERROR(drafter_->Propose(draft_requests_, result_.hidden, &drafts));
  if (!any) drafts.clear();
  return absl::OkStatus();
}

}  // namespace vllm::worker
