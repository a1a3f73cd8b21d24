#include "frontend/engine/detokenizer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/utf8.h"

namespace vllm::frontend {
namespace {

// vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET.
constexpr size_t kInitialPrefixIds = 5;

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::span<const int32_t> prompt_ids,
                                               DetokenizerOptions options)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      ids_(prompt_ids.begin(), prompt_ids.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = read_offset_ > kInitialPrefixIds ? read_offset_ - kInitialPrefixIds : 0;
  if (!options_.include_stop_str_in_output) {
    for (const std::string& s : options_.stop) {
      const size_t n = base::CountCodePoints(s);
      if (n > 0) hold_back_code_points_ = std::max(hold_back_code_points_, n - 1);
    }
  }
}

size_t IncrementalDetokenizer::DecodeNew() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix = tokenizer_.Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), options_.skip_special_tokens);
  const std::string full =
      tokenizer_.Decode(all.subspan(prefix_offset_), options_.skip_special_tokens);
  // Wait while the newest bytes are an incomplete character (decoded as U+FFFD) or nothing
  // new decoded; the next id may complete it.
  if (full.size() <= prefix.size() || full.ends_with(base::kReplacementChar)) return 0;
  // Byte-level decoding is prefix-stable, so `full` extends `prefix`; compare anyway.
  const size_t common = full.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0;
  text_.append(full, common, std::string::npos);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return full.size() - common;
}

void IncrementalDetokenizer::CheckStop(size_t new_bytes) {
  if (new_bytes == 0) return;
  for (const std::string& stop : options_.stop) {
    if (stop.empty()) continue;
    // Only a match that ends inside the new text is new.
    const size_t window = new_bytes + stop.size() - 1;
    const size_t from = text_.size() > window ? text_.size() - window : 0;
    const size_t at = text_.find(stop, from);
    if (at == std::string::npos) continue;
    stopped_ = true;
    stop_reason_ = stop;
    const size_t end = options_.include_stop_str_in_output ? at + stop.size() : at;
    text_.resize(std::min(end, text_.size()));
    released_ = std::min(released_, text_.size());
    return;
  }
}

size_t IncrementalDetokenizer::Releasable() const {
  if (stopped_ || hold_back_code_points_ == 0) return text_.size();
  size_t end = text_.size();
  for (size_t held = 0; held < hold_back_code_points_ && end > 0;) {
    --end;
    if ((static_cast<uint8_t>(text_[end]) & 0xC0) != 0x80) ++held;
  }
  return end;
}

std::string IncrementalDetokenizer::Append(std::span<const int32_t> new_ids, bool stop_terminated) {
  if (stopped_) return "";
  std::optional<int32_t> skipped;
  if (stop_terminated && !options_.include_stop_str_in_output && !new_ids.empty()) {
    skipped = new_ids.back();
    new_ids = new_ids.first(new_ids.size() - 1);
  }
  for (int32_t id : new_ids) {
    ids_.push_back(id);
    CheckStop(DecodeNew());
    if (stopped_) break;
  }
  if (skipped.has_value() && !stopped_) ids_.push_back(*skipped);
  const size_t end = std::max(Releasable(), released_);
  std::string delta = text_.substr(released_, end - released_);
  released_ = end;
  return delta;
}

std::string IncrementalDetokenizer::Flush() {
  std::string rest = text_.substr(released_);
  released_ = text_.size();
  return rest;
}

}  // namespace vllm::frontend
