#include "spec_decode/suffix_proposer.h"

#include <algorithm>

namespace vllm::spec_decode {
namespace {

bool ExtendsSeen(std::span<const int32_t> token_ids, int32_t num_prompt, size_t num_seen,
                 int32_t saved_num_prompt, int32_t last_token) {
  if (num_prompt != saved_num_prompt || token_ids.size() < num_seen) return false;
  return num_seen == 0 || token_ids[num_seen - 1] == last_token;
}

// This Abseil's heterogeneous look-up takes absl::string_view, not std::string_view.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

int32_t ClampedPrompt(std::span<const int32_t> token_ids, int32_t num_prompt) {
  return static_cast<int32_t>(
      std::clamp<int64_t>(num_prompt, 0, static_cast<int64_t>(token_ids.size())));
}

}  // namespace

SuffixProposer::SuffixProposer(const config::SpeculativeConfig& config)
    : max_depth_(std::max(config.suffix_decoding_max_tree_depth, 1)),
      max_cached_(std::max<int64_t>(config.suffix_decoding_max_cached_requests, 0)),
      max_spec_factor_(config.suffix_decoding_max_spec_factor),
      min_token_prob_(config.suffix_decoding_min_token_prob),
      global_(max_depth_) {}

const SuffixTree* SuffixProposer::local_tree(std::string_view request_id) const {
  auto it = active_.find(Key(request_id));
  return it == active_.end() ? nullptr : it->second.local.get();
}

void SuffixProposer::EvictCached(const std::string& request_id) {
  auto it = cached_seq_of_.find(Key(request_id));
  if (it == cached_seq_of_.end()) return;
  global_.Remove(it->second);
  cached_seq_of_.erase(it);
}

void SuffixProposer::EvictOverflow() {
  while (static_cast<int64_t>(cached_seq_of_.size()) > max_cached_ && !fifo_.empty()) {
    auto [seq_id, request_id] = std::move(fifo_.front());
    fifo_.pop_front();
    auto it = cached_seq_of_.find(Key(request_id));
    if (it != cached_seq_of_.end() && it->second == seq_id) EvictCached(request_id);
  }
  // Stale entries (ids evicted on reuse) are dropped once they outnumber the live ones.
  if (fifo_.size() > 2 * cached_seq_of_.size() + 64) {
    std::deque<std::pair<int64_t, std::string>> live;
    for (auto& entry : fifo_) {
      auto it = cached_seq_of_.find(entry.second);
      if (it != cached_seq_of_.end() && it->second == entry.first) live.push_back(std::move(entry));
    }
    fifo_.swap(live);
  }
}

void SuffixProposer::Start(std::string_view request_id, std::span<const int32_t> token_ids,
                           int32_t num_prompt, RequestState* state) {
  const std::string id(request_id);
  EvictCached(id);  // a reused id: its earlier output goes (as arctic-inference's start_request)
  state->local = std::make_unique<SuffixTree>(max_depth_);
  state->num_prompt = num_prompt;
  const int32_t prompt = ClampedPrompt(token_ids, num_prompt);
  state->local->Extend(0, token_ids.first(static_cast<size_t>(prompt)));
  state->num_seen = static_cast<size_t>(prompt);
  state->last_token = prompt > 0 ? token_ids[static_cast<size_t>(prompt) - 1] : 0;
  state->seq_id = -1;
  if (max_cached_ > 0) {
    state->seq_id = next_seq_id_++;
    cached_seq_of_[id] = state->seq_id;
    fifo_.emplace_back(state->seq_id, id);
    EvictOverflow();
  }
}

SuffixProposer::RequestState& SuffixProposer::StateFor(const ProposeRequest& request) {
  auto it = active_.find(Key(request.request_id));
  const bool inserted = it == active_.end();
  if (inserted) it = active_.try_emplace(std::string(request.request_id)).first;
  RequestState& state = it->second;
  if (inserted || !ExtendsSeen(request.token_ids, request.num_prompt_tokens, state.num_seen,
                               state.num_prompt, state.last_token)) {
    Start(request.request_id, request.token_ids, request.num_prompt_tokens, &state);
  }
  return state;
}

void SuffixProposer::TakeIn(std::string_view request_id, std::span<const int32_t> token_ids,
                            bool local, RequestState* state) {
  if (token_ids.size() <= state->num_seen) return;
  const std::span<const int32_t> fresh = token_ids.subspan(state->num_seen);
  if (local) state->local->Extend(0, fresh);
  if (state->seq_id >= 0) {
    // The output may have been evicted from the global tree while the request runs.
    auto it = cached_seq_of_.find(Key(request_id));
    if (it != cached_seq_of_.end() && it->second == state->seq_id) {
      global_.Extend(state->seq_id, fresh);
    } else {
      state->seq_id = -1;
    }
  }
  state->num_seen = token_ids.size();
  state->last_token = token_ids.back();
}

void SuffixProposer::Draft(const ProposeRequest& request, RequestState* state,
                           std::vector<int32_t>* out) {
  out->clear();
  if (request.max_draft_tokens <= 0) return;
  std::span<const int32_t> context = request.token_ids;
  if (context.size() > static_cast<size_t>(max_depth_)) {
    context = context.last(static_cast<size_t>(max_depth_));
  }
  state->local->Speculate(context, request.max_draft_tokens, max_spec_factor_, min_token_prob_,
                          &local_draft_, /*hint_seq_id=*/0);
  global_draft_.token_ids.clear();
  global_draft_.score = 0;
  if (global_.num_seqs() > 0) {
    global_.Speculate(context, request.max_draft_tokens, max_spec_factor_, min_token_prob_,
                      &global_draft_, state->seq_id);
  }
  const SuffixDraft& best =
      local_draft_.score >= global_draft_.score ? local_draft_ : global_draft_;
  const size_t n = std::min(best.token_ids.size(), static_cast<size_t>(request.max_draft_tokens));
  out->assign(best.token_ids.begin(), best.token_ids.begin() + static_cast<ptrdiff_t>(n));
}

void SuffixProposer::Propose(std::span<const ProposeRequest> requests,
                             std::vector<std::vector<int32_t>>* drafts) {
  drafts->resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    RequestState& state = StateFor(requests[i]);
    TakeIn(requests[i].request_id, requests[i].token_ids, /*local=*/true, &state);
    Draft(requests[i], &state, &(*drafts)[i]);
  }
}

void SuffixProposer::OnRequestFinished(std::string_view request_id,
                                       std::span<const int32_t> token_ids,
                                       int32_t num_prompt_tokens) {
  auto it = active_.find(Key(request_id));
  if (it == active_.end()) return;
  RequestState& state = it->second;
  if (ExtendsSeen(token_ids, num_prompt_tokens, state.num_seen, state.num_prompt,
                  state.last_token)) {
    TakeIn(request_id, token_ids, /*local=*/false, &state);
  }
  active_.erase(it);
}

}  // namespace vllm::spec_decode
