#include "frontend/openai/beam_search.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/ordered_json.h"
#include "base/status_macros.h"

namespace vllm::frontend {
namespace {

using Body = nlohmann::ordered_json;

// One entry of a step's logprobs dict (vLLM's: the sampled token, then the top ones).
std::vector<const TokenLogprob*> Entries(const PositionLogprobs& position) {
  std::vector<const TokenLogprob*> out = {&position.sampled};
  for (const TokenLogprob& top : position.top) {
    if (top.token_id != position.sampled.token_id) out.push_back(&top);
  }
  return out;
}

struct Candidate {
  double cum_logprob = 0.0;
  int32_t token_id = 0;
  size_t beam = 0;
};

}  // namespace

absl::Status ParseBeamSearchFields(const Body& body, bool chat, GenerationOptions* options) {
  bool beam = false;
  if (const Body* v = base::FindField(body, "use_beam_search"); v != nullptr) {
    if (!v->is_boolean()) return base::WrongTypeParam("use_beam_search", "a boolean", *v);
    beam = v->get<bool>();
  }
  double length_penalty = 1.0;
  if (const Body* v = base::FindField(body, "length_penalty"); v != nullptr) {
    if (!v->is_number()) return base::WrongTypeParam("length_penalty", "a number", *v);
    length_penalty = v->get<double>();
    if (!std::isfinite(length_penalty)) {
      return InvalidParam("length_penalty", "length_penalty must be a finite number");
    }
  }
  options->use_beam_search = beam;
  options->length_penalty = length_penalty;
  if (!beam) return absl::OkStatus();
  // vLLM's messages (completion/protocol.py check_logprobs, serving.py _create_completion).
  if (!chat && options->stream) {
    return absl::InvalidArgumentError("Streaming is not currently supported with beam search");
  }
  if (!chat) {
    const Body* echo = base::FindField(body, "echo");
    const Body* logprobs = base::FindField(body, "logprobs");
    if (echo != nullptr && echo->is_boolean() && echo->get<bool>() && logprobs != nullptr) {
      return InvalidParam("echo",
                          "`echo` with `logprobs` is not supported with beam search because "
                          "beam search does not compute prompt logprobs.");
    }
  }
  if (!options->params.allowed_token_ids.empty()) {
    // vLLM scores allowlisted beams with exact-id logprobs, only on its V2 model runner.
    return InvalidParam("allowed_token_ids", "Beam allowlists require the V2 model runner");
  }
  options->params.prompt_logprobs.reset();  // vLLM's beam search answers prompt_logprobs null
  return absl::OkStatus();
}

double BeamScore(const Beam& beam, double length_penalty) {
  const double len = static_cast<double>(std::max<size_t>(beam.logprobs.size(), 1));
  return beam.cum_logprob / std::pow(len, length_penalty);
}

BeamSearch::BeamSearch(EngineClient& engine, GenerateRequest request, int32_t beam_width,
                       double length_penalty, std::vector<OutputCallback> on_output)
    : engine_(engine),
      request_(std::move(request)),
      beam_width_(beam_width),
      length_penalty_(length_penalty),
      on_output_(std::move(on_output)),
      eos_ids_(engine.EosTokenIds()) {}

absl::StatusOr<std::shared_ptr<BeamSearch>> BeamSearch::Start(
    EngineClient& engine, GenerateRequest request, int32_t beam_width, double length_penalty,
    std::vector<OutputCallback> on_output) {
  if (request.prompt_text.has_value()) {
    VLLM_ASSIGN_OR_RETURN(request.prompt_token_ids,
                          engine.Tokenize(*request.prompt_text, request.add_special_tokens));
    request.prompt_text.reset();
  }
  VLLM_RETURN_IF_ERROR(TruncatePrompt(request, engine.MaxModelLen(), &request.prompt_token_ids));
  request.truncate_prompt_tokens.reset();
  const int32_t prompt_len = static_cast<int32_t>(request.prompt_token_ids.size());
  const int32_t max_model_len = engine.MaxModelLen();
  int32_t max_tokens = request.params.max_tokens.value_or(std::max(max_model_len - prompt_len, 0));
  if (prompt_len < max_model_len && prompt_len + max_tokens > max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "This model's maximum context length is %d tokens. However, you requested %d tokens "
        "(%d in the prompt, %d for the completion). Reduce the prompt or max_tokens.",
        max_model_len, prompt_len + max_tokens, prompt_len, max_tokens));
  }
  std::shared_ptr<BeamSearch> search(
      new BeamSearch(engine, std::move(request), beam_width, length_penalty, std::move(on_output)));
  search->max_tokens_ = max_tokens;
  std::vector<GenerateRequest> first;
  {
    absl::MutexLock lock(&search->mu_);
    search->beams_.emplace_back();
    if (max_tokens > 0) first = search->StepRequests();
  }
  if (first.empty()) {  // max_tokens 0: the prompt alone, as vLLM's loop of no step
    std::vector<GenerateOutput> results;
    {
      absl::MutexLock lock(&search->mu_);
      search->done_ = true;
      results = search->Results();
    }
    for (size_t i = 0; i < results.size(); ++i) search->on_output_[i](std::move(results[i]));
    return search;
  }
  VLLM_RETURN_IF_ERROR(search->Launch(0, std::move(first)));
  return search;
}

void BeamSearch::Abort() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    ids = step_ids_;
  }
  for (const std::string& id : ids) engine_.Abort(id);
}

std::vector<GenerateRequest> BeamSearch::StepRequests() const {
  std::vector<GenerateRequest> out;
  for (size_t i = 0; i < beams_.size(); ++i) {
    GenerateRequest r;
    r.request_id = absl::StrCat(request_.request_id, "-", step_, "-beam-", i);
    r.prompt_token_ids = request_.prompt_token_ids;
    r.prompt_token_ids.insert(r.prompt_token_ids.end(), beams_[i].tokens.begin(),
                              beams_[i].tokens.end());
    r.params.temperature = request_.params.temperature;
    r.params.max_tokens = 1;
    r.params.logprobs = 2 * beam_width_;
    r.priority = request_.priority;
    r.arrival_time = request_.arrival_time;
    r.cache_salt = request_.cache_salt;
    out.push_back(std::move(r));
  }
  return out;
}

absl::Status BeamSearch::Launch(uint64_t step, std::vector<GenerateRequest> requests) {
  std::vector<std::string> ids;
  for (const GenerateRequest& r : requests) ids.push_back(r.request_id);
  {
    absl::MutexLock lock(&mu_);
    if (done_ || step != step_) return absl::OkStatus();
    step_ids_ = ids;
    step_out_.assign(requests.size(), std::nullopt);
    pending_ = requests.size();
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    auto cb = [self = shared_from_this(), step, i](absl::StatusOr<GenerateOutput> out) {
      self->OnStepOutput(step, i, std::move(out));
    };
    if (absl::Status s = engine_.Generate(std::move(requests[i]), std::move(cb)); !s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (done_) return absl::OkStatus();
        done_ = true;
      }
      for (size_t j = 0; j < i; ++j) engine_.Abort(ids[j]);
      if (step == 0) return s;  // the caller answers it
      for (const OutputCallback& deliver : on_output_) deliver(s);
      return absl::OkStatus();
    }
  }
  bool aborted;
  {
    absl::MutexLock lock(&mu_);
    aborted = done_ && step_ == step;
  }
  if (aborted) {  // Abort() ran while the step was being submitted
    for (const std::string& id : ids) engine_.Abort(id);
  }
  return absl::OkStatus();
}

void BeamSearch::Fail(const absl::Status& status) {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    ids = step_ids_;
  }
  for (const std::string& id : ids) engine_.Abort(id);
  for (const OutputCallback& cb : on_output_) cb(status);
}

void BeamSearch::OnStepOutput(uint64_t step, size_t beam, absl::StatusOr<GenerateOutput> out) {
  if (!out.ok()) return Fail(out.status());
  std::vector<GenerateRequest> next;
  std::vector<GenerateOutput> final;
  uint64_t next_step = 0;
  {
    absl::MutexLock lock(&mu_);
    if (done_ || step != step_ || beam >= step_out_.size()) return;
    std::optional<GenerateOutput>& slot = step_out_[beam];
    if (!slot.has_value()) {
      slot = std::move(*out);
    } else {  // a later delta of the same one-token request
      for (PositionLogprobs& lp : out->logprobs) slot->logprobs.push_back(std::move(lp));
      slot->finish_reason = out->finish_reason;
    }
    if (!slot->finished()) return;
    engine_index_ = slot->engine_index;
    if (--pending_ > 0) return;
    next = Advance(&final);
    next_step = step_;
  }
  if (!next.empty()) {
    (void)Launch(next_step, std::move(next));  // a refusal after step 0 went to the callbacks
    return;
  }
  for (size_t i = 0; i < final.size(); ++i) on_output_[i](std::move(final[i]));
}

std::vector<GenerateRequest> BeamSearch::Advance(std::vector<GenerateOutput>* final) {
  bool aborted = false;
  for (const std::optional<GenerateOutput>& o : step_out_) {
    aborted = aborted || o->finish_reason == core::FinishReason::kAbort;
  }
  std::vector<Candidate> candidates;
  if (!aborted) {
    for (size_t i = 0; i < step_out_.size(); ++i) {
      if (step_out_[i]->logprobs.empty()) continue;
      const Beam& current = beams_[i];
      const PositionLogprobs& position = step_out_[i]->logprobs.front();
      for (const TokenLogprob* entry : Entries(position)) {
        const double cum = current.cum_logprob + entry->logprob;
        const bool eos =
            std::find(eos_ids_.begin(), eos_ids_.end(), entry->token_id) != eos_ids_.end();
        if (eos && !request_.params.ignore_eos) {
          Beam done = current;
          if (request_.include_stop_str_in_output) done.tokens.push_back(entry->token_id);
          done.logprobs.push_back(position);
          done.cum_logprob = cum;
          done.finish_reason = core::FinishReason::kStop;
          done.stop_token_id = entry->token_id;
          completed_.push_back(std::move(done));
        } else {
          candidates.push_back(Candidate{cum, entry->token_id, i});
        }
      }
    }
  }
  if (aborted) {
    for (Beam& b : beams_) b.finish_reason = core::FinishReason::kAbort;
  } else {
    std::stable_sort(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.cum_logprob > b.cum_logprob; });
    if (candidates.size() > static_cast<size_t>(beam_width_)) candidates.resize(beam_width_);
    std::vector<Beam> next;
    for (const Candidate& c : candidates) {
      Beam b = beams_[c.beam];
      b.tokens.push_back(c.token_id);
      b.logprobs.push_back(step_out_[c.beam]->logprobs.front());
      b.cum_logprob = c.cum_logprob;
      next.push_back(std::move(b));
    }
    beams_ = std::move(next);
    ++step_;
  }
  step_ids_.clear();
  step_out_.clear();
  if (!aborted && !beams_.empty() && step_ < static_cast<uint64_t>(max_tokens_)) {
    return StepRequests();
  }
  done_ = true;
  *final = Results();
  return {};
}

std::vector<GenerateOutput> BeamSearch::Results() {
  std::vector<Beam> all = std::move(completed_);
  for (Beam& b : beams_) all.push_back(std::move(b));
  std::stable_sort(all.begin(), all.end(), [this](const Beam& a, const Beam& b) {
    return BeamScore(a, length_penalty_) > BeamScore(b, length_penalty_);
  });
  std::vector<GenerateOutput> out;
  for (size_t i = 0; i < on_output_.size(); ++i) {
    // Fewer beams than choices (max_tokens 0, a tiny vocabulary): empty "length" choices.
    out.push_back(i < all.size() ? ResultOf(all[i]) : ResultOf(Beam{}));
    out.back().engine_index = engine_index_;
  }
  return out;
}

GenerateOutput BeamSearch::ResultOf(const Beam& beam) const {
  GenerateOutput out;
  std::span<const int32_t> text_ids(beam.tokens);
  if (beam.stop_token_id.has_value() && !text_ids.empty() &&
      text_ids.back() == *beam.stop_token_id) {
    text_ids = text_ids.first(text_ids.size() - 1);  // the EOS is never in the text
  }
  absl::StatusOr<std::string> text = engine_.Decode(text_ids, request_.skip_special_tokens);
  out.text_delta = text.ok() ? *std::move(text) : std::string();
  out.token_ids_delta = beam.tokens;
  out.finish_reason = beam.finish_reason.value_or(core::FinishReason::kLength);
  out.stop_token_id = beam.stop_token_id;
  out.num_prompt_tokens = static_cast<int32_t>(request_.prompt_token_ids.size());
  out.num_output_tokens = static_cast<int32_t>(beam.tokens.size());
  if (request_.return_prompt_token_ids) out.prompt_token_ids = request_.prompt_token_ids;
  if (request_.params.logprobs.has_value()) {
    const auto k = static_cast<size_t>(std::max(*request_.params.logprobs, 0));
    for (size_t t = 0; t < beam.tokens.size() && t < beam.logprobs.size(); ++t) {
      const PositionLogprobs& step = beam.logprobs[t];
      PositionLogprobs lp;
      for (const TokenLogprob* e : Entries(step)) {
        if (e->token_id == beam.tokens[t]) lp.sampled = *e;
      }
      lp.top.assign(step.top.begin(), step.top.begin() + std::min(k, step.top.size()));
      out.logprobs.push_back(std::move(lp));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::shared_ptr<BeamSearch>>> StartBeamSearches(
    EngineClient& engine, std::vector<GenerateRequest> requests, int32_t n, double length_penalty,
    const std::function<OutputCallback(int32_t)>& callback_for) {
  std::vector<std::shared_ptr<BeamSearch>> started;
  const size_t width = static_cast<size_t>(std::max(n, 1));
  for (size_t first = 0; first < requests.size(); first += width) {
    std::vector<OutputCallback> callbacks;
    for (size_t i = first; i < std::min(first + width, requests.size()); ++i) {
      callbacks.push_back(callback_for(static_cast<int32_t>(i)));
    }
    absl::StatusOr<std::shared_ptr<BeamSearch>> search =
        BeamSearch::Start(engine, std::move(requests[first]), static_cast<int32_t>(width),
                          length_penalty, std::move(callbacks));
    if (!search.ok()) {
      for (const auto& s : started) s->Abort();
      return search.status();
    }
    started.push_back(*std::move(search));
  }
  return started;
}

}  // namespace vllm::frontend
