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
  for (size_t i = 0; i < record.requests.size(); ++i) {
    const Request* r = record.requests[i];
    // Only a request that samples in this step (its last prompt chunk, or a decode) needs a
    // row; a finished grammar (the stop token accepted) constrains nothing more.
    if (r->structured_output == nullptr || r->num_computed_tokens != r->num_tokens()) continue;
    structured_output::Grammar* grammar = r->structured_output->grammar();
    if (grammar == nullptr || grammar->IsTerminated()) continue;
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
  if (!reasoning_rows) return;
  for (size_t k = 0; k < grammar_scratch_.size(); ++k) {
    if (grammar_scratch_[k] != nullptr) continue;
    const Request* r = record.requests[static_cast<size_t>(output->structured_output_indices[k])];
    structured_output_manager_->FillReasoningRow(
        *r->structured_output,
        std::span<int32_t>(output->grammar_bitmask).subspan(k * words, words));
  }
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
