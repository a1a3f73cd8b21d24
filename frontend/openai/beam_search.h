// Beam search over the engine, in the frontend, as vLLM 0.33's OpenAI server does it
// (entrypoints/generate/beam_search/online.py): each step submits, per live beam, an engine
// request for one token with 2 x beam_width logprobs (the prefix cache makes the repeated
// prefix cheap), and keeps the beam_width best candidates by cumulative logprob; a candidate
// that is an EOS id (unless ignore_eos) completes its beam (finish_reason "stop", stop_reason
// the EOS id). After max_tokens steps the completed and live beams are sorted by
// cum_logprob / (generated tokens, EOS included) ^ length_penalty and the best beam_width are
// the choices (the rest "length"). There is no early stop: every step runs, as vLLM's.
//
// With use_beam_search, vLLM's BeamSearchParams take n (the beam width), max_tokens,
// ignore_eos, temperature, length_penalty, include_stop_str_in_output and
// skip_special_tokens; the sampling fields (stop, stop_token_ids, top_p, top_k, min_p,
// penalties, logit_bias, seed, min_tokens, bad_words, structured outputs, prompt_logprobs)
// are not passed to the engine by vLLM and are not here either. Refused as vLLM refuses them:
// completions with stream, completions with echo and logprobs, allowed_token_ids (vLLM needs
// its V2 model runner for them).
#ifndef VLLM_FRONTEND_OPENAI_BEAM_SEARCH_H_
#define VLLM_FRONTEND_OPENAI_BEAM_SEARCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/openai_protocol.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// use_beam_search and length_penalty into `options` (call once options->stream, params and
// allowed_token_ids are known), and vLLM's refusals of what beam search does not support
// (InvalidArgument naming the field).
[[nodiscard]] absl::Status ParseBeamSearchFields(const nlohmann::ordered_json& body, bool chat,
                                                 GenerationOptions* options);

// One beam: its generated tokens, one logprobs entry per step (a final EOS included even when
// `tokens` omits it) and its cumulative logprob.
struct Beam {
  std::vector<int32_t> tokens;
  std::vector<PositionLogprobs> logprobs;
  double cum_logprob = 0.0;
  std::optional<core::FinishReason> finish_reason;
  std::optional<int32_t> stop_token_id;
};

// vLLM's get_beam_search_score: cum_logprob / max(generated tokens, 1) ^ length_penalty,
// the generated tokens being the beam's logprobs entries (a final EOS counts).
double BeamScore(const Beam& beam, double length_penalty);

// The beam search of one prompt. Thread-safe; engine callbacks keep it alive.
class BeamSearch : public std::enable_shared_from_this<BeamSearch> {
 public:
  // Starts the search of `request`'s prompt (tokenized and truncated as the engine client
  // would; its params give max_tokens, ignore_eos, temperature and the answer's logprobs).
  // on_output[i] gets the i-th best beam as one finished output (beam_width of them), or the
  // error that ended the search. The first step's refusal (a prompt too long, the engine
  // down) is returned here and no callback is called.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<BeamSearch>> Start(
      EngineClient& engine, GenerateRequest request, int32_t beam_width, double length_penalty,
      std::vector<OutputCallback> on_output);

  // Ends the search: its engine requests are aborted and no callback is called any more.
  void Abort();

 private:
  BeamSearch(EngineClient& engine, GenerateRequest request, int32_t beam_width,
             double length_penalty, std::vector<OutputCallback> on_output);

  // Submits the current step's requests (one per live beam); a refusal ends the search.
  absl::Status Launch(uint64_t step, std::vector<GenerateRequest> requests);
  void OnStepOutput(uint64_t step, size_t beam, absl::StatusOr<GenerateOutput> out);
  // With every output of the step in: the next beams, or the end. Called with mu_ held;
  // returns the next step's requests (empty when the search ended: then *final is set).
  std::vector<GenerateRequest> Advance(std::vector<GenerateOutput>* final)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<GenerateRequest> StepRequests() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The best beam_width beams as the choices' outputs.
  std::vector<GenerateOutput> Results() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  GenerateOutput ResultOf(const Beam& beam) const;
  void Fail(const absl::Status& status);

  EngineClient& engine_;
  const GenerateRequest request_;  // prompt_token_ids: the prompt as the engine gets it
  const int32_t beam_width_;
  const double length_penalty_;
  const std::vector<OutputCallback> on_output_;
  std::vector<int32_t> eos_ids_;
  int32_t max_tokens_ = 0;

  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Beam> beams_ ABSL_GUARDED_BY(mu_);      // live
  std::vector<Beam> completed_ ABSL_GUARDED_BY(mu_);  // ended by EOS
  std::vector<std::string> step_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::optional<GenerateOutput>> step_out_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t engine_index_ ABSL_GUARDED_BY(mu_) = 0;
};

// Starts one BeamSearch per prompt of `requests` (FanOut's: n choices per prompt, choice-major;
// each prompt's first request is its search's, its id the prefix of the search's engine
// requests); choice i's output goes to callback_for(i). On a refusal the searches already
// started are aborted and the refusal returned.
[[nodiscard]] absl::StatusOr<std::vector<std::shared_ptr<BeamSearch>>> StartBeamSearches(
    EngineClient& engine, std::vector<GenerateRequest> requests, int32_t n, double length_penalty,
    const std::function<OutputCallback(int32_t)>& callback_for);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_BEAM_SEARCH_H_
