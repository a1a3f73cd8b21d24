// Scheduler: the structured-output parts (vLLM's scheduler.py WAITING_FOR_FSM handling,
// get_grammar_bitmask and the grammar advance in update_from_output).
#include <algorithm>

#include "core/scheduler.h"
#include "spdlog/spdlog.h"

namespace vllm::core {

using structured_output::StructuredOutputManager;

void Scheduler::PromoteCompiledRequests() {
  std::string error;
  size_t kept = 0;
  for (Request* request : waiting_for_fsm_) {
    switch (structured_output_manager_->Poll(*request->structured_output, &error)) {
      case StructuredOutputManager::PollResult::kCompiling:
        waiting_for_fsm_[kept++] = request;
        break;
      case StructuredOutputManager::PollResult::kReady:
        request->status = RequestStatus::kWaiting;
        waiting_.Add(request);
        break;
      case StructuredOutputManager::PollResult::kFailed: {
        spdlog::warn("request {}: {}", request->request_id, error);
        request->status = RequestStatus::kFinishedError;
        EngineCoreOutput& out = pending_outputs_.emplace_back();
        out.request_id = request->request_id;
        out.finish_reason = FinishReason::kError;
        FreeRequest(*request);
        EraseFinished(request);
        break;
      }
    }
  }
  waiting_for_fsm_.resize(kept);
}

void Scheduler::FillGrammarBitmask(SchedulerOutput* output) {
  const StepRecord& record = inflight_steps_.back();  // this step's requests, scheduled order
  grammar_scratch_.clear();
  bool reasoning_rows = false;
  bool draft_rows = false;
  for (size_t i = 0; i < record.requests.size(); ++i) {
    const Request* r = record.requests[i];
    const int32_t num_spec = record.num_spec_tokens.empty() ? 0 : record.num_spec_tokens[i];
    // Only a request that samples in this step (its last prompt chunk, or a decode) needs a
    // row; a finished grammar (the stop token accepted) constrains nothing more.
    if (r->structured_output == nullptr || r->num_computed_tokens - num_spec != r->num_tokens()) {
      continue;
    }
    structured_output::Grammar* grammar = r->structured_output->grammar();
    if (grammar == nullptr || grammar->IsTerminated()) continue;
    if (num_spec > 0) {
      // One row per verified position, filled below as the grammar walks the drafts.
      for (int32_t j = 0; j <= num_spec; ++j) {
        grammar_scratch_.push_back(nullptr);
        output->structured_output_indices.push_back(static_cast<int32_t>(i));
      }
      draft_rows = true;
      continue;
    }
    if (structured_output_manager_->ShouldFillBitmask(*r->structured_output)) {
      grammar_scratch_.push_back(grammar);
    } else if (structured_output_manager_->NeedsReasoningRow(*r->structured_output)) {
      // Still reasoning, with an implicit end the grammar could not start with: a row that
      // allows everything else (a null entry, filled below).
      grammar_scratch_.push_back(nullptr);
      reasoning_rows = true;
    } else {
      continue;  // still reasoning: every token allowed, no row
    }
    output->structured_output_indices.push_back(static_cast<int32_t>(i));
  }
  if (grammar_scratch_.empty()) return;
  const size_t words = static_cast<size_t>(structured_output_manager_->bitmask_words());
  output->grammar_bitmask.resize(grammar_scratch_.size() * words);
  structured_output_manager_->FillBitmasks(grammar_scratch_, output->grammar_bitmask);
  if (!reasoning_rows && !draft_rows) return;
  auto row = [&](size_t k) {
    return std::span<int32_t>(output->grammar_bitmask).subspan(k * words, words);
  };
  for (size_t k = 0; k < grammar_scratch_.size(); ++k) {
    if (grammar_scratch_[k] != nullptr) continue;
    const auto i = static_cast<size_t>(output->structured_output_indices[k]);
    const Request* r = record.requests[i];
    const int32_t num_spec = record.num_spec_tokens.empty() ? 0 : record.num_spec_tokens[i];
    if (num_spec == 0) {
      structured_output_manager_->FillReasoningRow(*r->structured_output, row(k));
      continue;
    }
    // Row j: what the grammar allows after the first j drafts (vLLM fills the bitmask the same
    // way, accepting the drafts, then rolling them back). The drafts are the tail of the
    // request's scheduled tokens.
    const std::span<const int32_t> fed =
        output->scheduled_cached_reqs.new_token_ids_of(i - output->scheduled_new_reqs.size());
    const std::span<const int32_t> drafts = fed.last(static_cast<size_t>(num_spec));
    structured_output::Grammar* grammar = r->structured_output->grammar();
    int32_t accepted = 0;
    for (int32_t j = 0; j <= num_spec; ++j) {
      grammar->FillBitmask(row(k + static_cast<size_t>(j)));
      if (j < num_spec && accepted == j &&
          grammar->AcceptTokens(drafts.subspan(static_cast<size_t>(j), 1))) {
        ++accepted;
      }
    }
    grammar->Rollback(accepted);
    k += static_cast<size_t>(num_spec);
  }
}

bool Scheduler::CanDraftUnderGrammar(const Request& request) const {
  const structured_output::Grammar* grammar = request.structured_output->grammar();
  return grammar != nullptr && !grammar->IsTerminated() &&
         structured_output_manager_->ShouldFillBitmask(*request.structured_output);
}

size_t Scheduler::ValidDraftPrefix(Request& request, std::span<const int32_t> draft) {
  structured_output::Grammar* grammar = request.structured_output->grammar();
  size_t accepted = 0;
  while (accepted < draft.size() && !grammar->IsTerminated() &&
         grammar->AcceptTokens(draft.subspan(accepted, 1))) {
    ++accepted;
  }
  grammar->Rollback(static_cast<int32_t>(accepted));
  return accepted;
}

bool Scheduler::AdvanceGrammar(Request& request) {
  structured_output::Grammar* grammar = request.structured_output->grammar();
  if (grammar == nullptr || grammar->IsTerminated()) return false;
  const int32_t token = request.all_token_ids.back();
  // While the request reasons the grammar sees nothing, so none of its checks below apply; an
  // implicit reasoning end (qwen3's <tool_call>) is the grammar's first token.
  if (!structured_output_manager_->ShouldAdvance(*request.structured_output, token)) return false;
  if (!grammar->AcceptTokens(std::span<const int32_t>(&token, 1))) {
    // The worker samples under the bitmask, so this is a token the grammar never allowed.
    spdlog::error("request {}: the structured-output grammar refused token {}", request.request_id,
                  token);
    request.status = RequestStatus::kFinishedError;
    return true;
  }
  if (grammar->IsTerminated()) {  // it accepted a stop token
    request.status = RequestStatus::kFinishedStopped;
    return true;
  }
  // Complete, and nothing but a stop token may follow: end now rather than spend a step
  // sampling the stop token.
  grammar_row_scratch_.resize(static_cast<size_t>(structured_output_manager_->bitmask_words()));
  if (grammar->OnlyStopAllowed(grammar_row_scratch_)) {
    request.status = RequestStatus::kFinishedStopped;
    return true;
  }
  return false;
}

}  // namespace vllm::core
