// The normalizer of a Hugging Face tokenizer.json: the steps SentencePiece-converted files
// use (Prepend, Replace with a String pattern), Unicode normalization forms (Qwen2's NFC),
// and Sequence of those.
// Internal to frontend/tokenizer/ (its API is tokenizer.h).
#ifndef VLLM_FRONTEND_TOKENIZER_NORMALIZER_H_
#define VLLM_FRONTEND_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace vllm::frontend {

// Rewrites each piece of input text between added tokens before pre-tokenization, as HF's
// NormalizedString does (offsets are not tracked: nothing here needs them). Supported:
// Prepend (prepends to a non-empty piece), Replace with {"String": pattern} (every
// non-overlapping occurrence, left to right), NFC / NFD / NFKC / NFKD (utf8proc, Unicode
// 15.0; HF uses the unicode-normalization crate), and Sequence of those. Precompiled,
// Lowercase, Strip, StripAccents, Nmt, BertNormalizer, ByteLevel and Replace with a Regex
// pattern are refused.
// Immutable; const use is thread-safe.
class Normalizer {
 public:
  // Parses tokenizer.json's "normalizer" value (not null). InvalidArgument naming the field
  // (e.g. "normalizer.normalizers[1].type") for an unknown or unsupported step.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(
      const nlohmann::json& normalizer);

  // The normalized form of `text` (valid UTF-8 in, valid UTF-8 out).
  [[nodiscard]] std::string Normalize(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace, kUnicode };
    Kind kind = Kind::kReplace;
    std::string pattern;      // Replace: the literal to find (non-empty)
    std::string content;      // Prepend: the prefix; Replace: the replacement
    int unicode_options = 0;  // kUnicode: utf8proc_option_t flags of the form
  };
  Normalizer() = default;
  absl::Status AddStep(const nlohmann::json& j, const std::string& where);

  std::vector<Step> steps_;
};

// Reads {"String": s} (HF's Replace/Split pattern); InvalidArgument naming `where` for a
// Regex pattern or an empty string. Shared by the Replace normalizer and decoder.
[[nodiscard]] absl::StatusOr<std::string> LiteralPattern(const nlohmann::json& pattern,
                                                         const std::string& where);

// `text` with every non-overlapping occurrence of `from` (non-empty), left to right, replaced
// by `to` (HF's Replace with a String pattern).
[[nodiscard]] std::string ReplaceAll(std::string_view text, std::string_view from,
                                     std::string_view to);

// Unicode normalization form `form` ("NFC", "NFD", "NFKC" or "NFKD") of valid UTF-8 `text`;
// InvalidArgument for another form name. Exposed for tests.
[[nodiscard]] absl::StatusOr<std::string> UnicodeNormalize(std::string_view text,
                                                           std::string_view form);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_TOKENIZER_NORMALIZER_H_
