// ModelRunner: runs one SchedulerOutput on this rank's model (vLLM's
// vllm/v1/worker/gpu_model_runner.py with its InputBatch).
//
// It keeps persistent per-request state — token ids, block table, sampling settings — built
// from a request's NewRequestData once and updated from each step's CachedRequestData
// deltas; finished and preempted requests are dropped (a resumed request arrives with all
// its tokens and blocks). Each step it flattens the scheduled tokens into one batch (token
// ids, positions, slot mapping, query_start_loc, seq_lens, block tables), runs the model,
// and samples one token for every request whose known tokens are all computed after the
// step (the others are mid-way through a chunked prefill and get an empty entry).
//
// The device is behind a ModelBackend (model_backend.h): the CPU backend (LlamaModel) or the
// CUDA one. On a backend that samples on the device, rows whose requests need penalties or
// logprobs are marked on_host and sampled here from their copied-back logits; every other
// row's token comes from the device. A structured-output request's grammar bitmask row
// travels with its logits row (RowSampling::bitmask) and is applied where the row is sampled.
//
// Sampling is reproducible: the draw for the token at position p of a request uses
// CounterUniform(seed, p), with the request's seed or, when it has none, one derived from
// the runner's seed and the request id — so a preempted and recomputed request samples the
// same tokens.
//
// Thread-safety: none; the worker's thread owns it.
#ifndef VLLM_WORKER_MODEL_RUNNER_H_
#define VLLM_WORKER_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sampling_params.h"
#include "core/scheduler_output.h"
#include "worker/drafter.h"
#include "worker/llama_model.h"
#include "worker/model_backend.h"

namespace vllm::worker {

class ModelRunner {
 public:
  // `seed` seeds requests without a seed of their own. The backend is owned.
  ModelRunner(std::unique_ptr<ModelBackend> backend, uint64_t seed);
  // The CPU backend over `model` (DetermineAvailableMemory reports 1 GiB).
  ModelRunner(std::unique_ptr<LlamaModel> model, uint64_t seed);

  // Allocates the KV cache; must precede ExecuteModel. InvalidArgument on non-positive sizes.
  [[nodiscard]] absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size);

  // Applies the step's deltas, runs the model and samples. InvalidArgument (and no state
  // change to other requests' KV) when the output references an unknown request, a block
  // outside the cache, or tokens inconsistent with the request's state — a scheduler bug or
  // a corrupt frame, reported rather than crashing the worker.
  [[nodiscard]] absl::StatusOr<core::ModelRunnerOutput> ExecuteModel(
      const core::SchedulerOutput& scheduler_output);

  // Speculative decoding with a draft in the worker (eagle, medusa, draft_model): after each
  // step the drafter drafts up to `num_speculative_tokens` tokens for every request that
  // sampled, returned in ModelRunnerOutput::draft_token_ids. Before InitializeKVCache.
  void SetDrafter(std::unique_ptr<Drafter> drafter, int32_t num_speculative_tokens) {
    drafter_ = std::move(drafter);
    num_speculative_tokens_ = num_speculative_tokens;
  }
  const Drafter* drafter() const { return drafter_.get(); }

  // Pipeline parallelism (the backend's stage() is not the whole model): the links to the
  // previous and next stages (not owned, outlive the runner; null at the ends). A stage after
  // the first receives the stream before running its layers; a stage before the last sends
  // it on and samples nothing (its ModelRunnerOutput has the request ids only); a stage that
  // fails a step tells the next one, so the last stage's driver reports the error.
  void SetStageLinks(StageLink* previous, StageLink* next) {
    previous_stage_ = previous;
    next_stage_ = next;
  }

  // Where a worker's time goes over the steps it ran (CLOCK_MONOTONIC ns): busy is ExecuteModel
  // less the time spent receiving from the previous stage (waiting for it included) and
  // sending to the next (waiting for room included). Empty steps are not counted.
  struct StageStats {
    int64_t steps = 0;
    int64_t first_step_ns = 0;     // start of the first step
    int64_t last_step_end_ns = 0;  // end of the last one
    int64_t busy_ns = 0;
    int64_t receive_ns = 0;
    int64_t send_ns = 0;
    int64_t bytes_sent = 0;
    // busy ÷ (last end − first start); 0 before two steps.
    double busy_fraction() const {
      const int64_t span = last_step_end_ns - first_step_ns;
      return steps > 1 && span > 0 ? static_cast<double>(busy_ns) / static_cast<double>(span) : 0;
    }
  };
  const StageStats& stage_stats() const { return stage_stats_; }

  ModelBackend& backend() { return *backend_; }
  const ModelBackend& backend() const { return *backend_; }
  size_t num_requests() const { return requests_.size(); }
  bool kv_cache_initialized() const { return num_blocks_ > 0; }

 private:
  struct RequestState {
    std::vector<int32_t> token_ids;  // prompt, then every token known to the worker
    int32_t num_prompt_tokens = 0;
    int32_t num_computed_tokens = 0;
    std::vector<int32_t> block_ids;
    core::SamplingParams sampling_params;
    uint64_t seed = 0;
    // Prompt logprobs being assembled over the chunks of the current prefill: entry p - 1
    // for prompt position p. Sent (and cleared) with the first token sampled once all are
    // filled; a resumed request assembles them again.
    bool prompt_logprobs_pending = false;
    int32_t num_prompt_logprobs_filled = 0;
    std::vector<core::TokenLogprobs> prompt_logprobs;
  };

  // ExecuteModel's body; `received` is set once the previous stage's frame was taken,
  // `forwarded` once the step went to the next stage.
  [[nodiscard]] absl::StatusOr<core::ModelRunnerOutput> RunStep(const core::SchedulerOutput& so,
                                                                bool* received, bool* forwarded);
  // The last stage's part: samples (and verifies drafts) from result_ into `out`.
  [[nodiscard]] absl::Status SampleRows(const core::SchedulerOutput& so,
                                        core::ModelRunnerOutput* out);
  [[nodiscard]] absl::Status UpdateStates(const core::SchedulerOutput& so);
  // Fills the flattened batch for the scheduled requests (in num_scheduled_tokens order).
  [[nodiscard]] absl::Status PrepareInputs(const core::SchedulerOutput& so);
  // PrepareInputs' parts: the step's grammar bitmask rows per request (grammar_row_,
  // grammar_rows_), and request r's logits rows to sample (its last position; with drafts, the
  // verification rows of the last real token and of every draft).
  [[nodiscard]] absl::Status ReadGrammarRows(const core::SchedulerOutput& so);
  [[nodiscard]] absl::Status AddSamplingRows(const core::SchedulerOutput& so, size_t r,
                                             int32_t seq_len);
  // `bitmask`: the request's structured-output row this step (null: unconstrained).
  int32_t Sample(RequestState& state, float* logits, core::TokenLogprobs* logprobs,
                 const int32_t* bitmask);
  // Speculative decoding: verifies `s`'s `num_spec` drafts (the last tokens of s.token_ids)
  // against the num_spec + 1 host logits rows at `logits` (modified) with the rejection
  // sampler, fills out->sampled_token_ids[r] (and logprobs[r]) with the accepted drafts and the
  // token after them, and keeps those in s.token_ids in place of the drafts.
  // `bitmask`: the request's num_spec + 1 grammar rows, or null.
  void VerifyDrafts(RequestState& s, int32_t num_spec, float* logits, const int32_t* bitmask,
                    core::ModelRunnerOutput* out, size_t r);
  // Runs the drafter on the step just sampled into `out` (before num_computed_tokens moves on).
  [[nodiscard]] absl::Status ProposeDrafts(const core::SchedulerOutput& so,
                                           core::ModelRunnerOutput* out);
  // Whether logits row i starts a request's verification rows.
  bool IsSpecRow(size_t i) const { return spec_rows_[i] == 0; }
  // Starts assembling `s`'s prompt logprobs when it asks for them (a new or resumed request).
  void ResetPromptLogprobs(RequestState& s) const;
  // Adds the logits rows of `s`'s prompt positions in [nc, seq_len) that predict a prompt
  // token; `first_row` is the batch row of position nc.
  // Stores the prompt logprobs of position `position` + 1 from that position's raw logits.
  void AddPromptLogprobs(RequestState& s, int32_t position, const float* logits);
  void AddPromptLogprobsRows(const RequestState& s, int32_t r, int32_t nc, int32_t seq_len,
                             int32_t first_row);

  std::unique_ptr<ModelBackend> backend_;
  const uint64_t seed_;
  std::unique_ptr<Drafter> drafter_;
  int32_t num_speculative_tokens_ = 0;
  std::vector<DraftRequest> draft_requests_;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  // Boxed: scheduled_ keeps pointers across insertions.
  absl::flat_hash_map<std::string, std::unique_ptr<RequestState>> requests_;

  // Per-step scratch.
  std::vector<RequestState*> scheduled_;
  std::vector<int32_t> input_ids_, positions_, query_start_loc_, seq_lens_, block_tables_;
  std::vector<int32_t> logits_indices_;
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> sampling_rows_;  // index into scheduled_ per logits row
  // Per logits row: -1 for a row to sample from, else the prompt position whose logits
  // give the prompt logprob of token p + 1.
  std::vector<int32_t> prompt_positions_;
  // Per logits row; `bitmask` points into the step's so.grammar_bitmask.
  std::vector<RowSampling> row_sampling_;
  // Per logits row: j for the j-th verification row of a request with drafts, else -1.
  std::vector<int32_t> spec_rows_;
  std::vector<float> spec_raw_;
  std::vector<double> spec_u_accept_, spec_u_sample_;
  std::vector<int32_t> spec_tokens_;
  // Per scheduled request: its first grammar bitmask row (null: unconstrained) and its count.
  std::vector<const int32_t*> grammar_row_;
  std::vector<int32_t> grammar_rows_;
  int32_t max_query_len_ = 0, max_seq_len_ = 0;
  StepResult result_;
  StageStats stage_stats_;
  StageLink* previous_stage_ = nullptr;
  StageLink* next_stage_ = nullptr;
  IntermediateTensors stage_input_;
};

}  // namespace vllm::worker

#endif  // VLLM_WORKER_MODEL_RUNNER_H_
