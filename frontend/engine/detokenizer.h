// IncrementalDetokenizer: streaming token ids -> text, as vLLM's detokenizer does it.
#ifndef VLLM_FRONTEND_ENGINE_DETOKENIZER_H_
#define VLLM_FRONTEND_ENGINE_DETOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "frontend/tokenizer/tokenizer.h"

namespace vllm::frontend {

// What the detokenizer does with the text (vLLM's SamplingParams fields of the same names).
struct DetokenizerOptions {
  bool skip_special_tokens = true;
  // Stop strings: the first in this order found in the new text ends generation.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
};

// Turns a request's output ids into text one step at a time. Uses vLLM's prefix_offset /
// read_offset scheme: each step decodes ids[prefix_offset:] and ids[prefix_offset:read_offset]
// and emits the difference only when it does not end in U+FFFD (an incomplete UTF-8
// sequence), so byte-level tokens that split a character are held until it completes.
// The prompt's last 5 ids seed the prefix so the first output token decodes in context.
// Stop strings are checked on the full text; while any are set, Append holds back the last
// max(len(stop)) - 1 code points so a stop string split across steps never leaks out.
// Not thread-safe; one per request. Holds a reference to the tokenizer, which must outlive it.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                         DetokenizerOptions options);

  // Adds generated ids and returns the newly releasable text ("" once stopped()). Ids out of
  // the vocabulary decode to nothing. `stop_terminated`: the last id is the token that
  // stopped the request (EOS or one of stop_token_ids); unless include_stop_str_in_output it
  // is kept but not decoded, so its text never shows (vLLM's stop_terminated), whatever
  // skip_special_tokens says.
  std::string Append(std::span<const int32_t> new_ids, bool stop_terminated = false);

  // Returns the text still held back for stop-string matching; call when the request
  // finishes for another reason (EOS, length). The deltas of Append plus Flush() == text().
  std::string Flush();

  // The whole output text so far (truncated at a stop string when one matched).
  [[nodiscard]] const std::string& text() const { return text_; }
  // Whether a stop string matched; then stop_reason() is that string.
  [[nodiscard]] bool stopped() const { return stopped_; }
  [[nodiscard]] const std::string& stop_reason() const { return stop_reason_; }
  // Every id seen (prompt then output), for callers that need them.
  [[nodiscard]] const std::vector<int32_t>& all_ids() const { return ids_; }

 private:
  // Decodes the newly appended ids into text_; returns the number of bytes added.
  size_t DecodeNew();
  // Looks for a stop string ending in the last `new_bytes` bytes of text_; truncates.
  void CheckStop(size_t new_bytes);
  // Bytes of text_ that may be released now.
  size_t Releasable() const;

  const Tokenizer& tokenizer_;
  DetokenizerOptions options_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string text_;
  size_t released_ = 0;  // bytes of text_ already returned
  size_t hold_back_code_points_ = 0;
  bool stopped_ = false;
  std::string stop_reason_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_DETOKENIZER_H_
