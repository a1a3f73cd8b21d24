// The pre-tokenizer of a Hugging Face tokenizer.json: regex Split steps (PCRE2 with UTF,
// UCP and JIT) and the GPT-2 ByteLevel step.
// Internal to frontend/tokenizer/ (its API is tokenizer.h): tools/lint/check_layering.py
// refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_TOKENIZER_PRETOKENIZER_H_
#define VLLM_FRONTEND_TOKENIZER_PRETOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace vllm::frontend {

// A compiled regex; matching allocates its own match data, so const use is thread-safe.
class TokenizerRegex {
 public:
  // Compiles `pattern` with PCRE2_UTF | PCRE2_UCP (so \s, \w, \d and [[:classes:]] are
  // Unicode-aware like Oniguruma's) and JIT-compiles it when the platform allows.
  // InvalidArgument with PCRE2's message and offset when the pattern does not compile.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TokenizerRegex>> Compile(
      std::string_view pattern, bool literal);
  ~TokenizerRegex();
  TokenizerRegex(const TokenizerRegex&) = delete;
  TokenizerRegex& operator=(const TokenizerRegex&) = delete;

  // Appends to `pieces` the parts of `text` (valid UTF-8): each match and each non-empty
  // gap between matches, in order (HF's SplitDelimiterBehavior::Isolated); with
  // `drop_matches`, only the gaps (Removed). Internal error if PCRE2 fails mid-match.
  [[nodiscard]] absl::Status Split(std::string_view text, bool drop_matches,
                                   std::vector<std::string_view>* pieces) const;

 private:
  TokenizerRegex() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How Metaspace puts the replacement character in front of a piece (HF's PrependScheme).
enum class PrependScheme { kAlways, kFirst, kNever };

// Parses a Metaspace object's "prepend_scheme" / legacy "add_prefix_space" as HF does:
// prepend_scheme defaults to "always"; add_prefix_space false means "never" (and contradicts
// any other declared scheme). Shared by the Metaspace pre-tokenizer and decoder.
[[nodiscard]] absl::StatusOr<PrependScheme> ParsePrependScheme(const nlohmann::json& j,
                                                               const std::string& where);

// Reads a Metaspace object's "replacement": exactly one code point; returns its UTF-8.
[[nodiscard]] absl::StatusOr<std::string> ParseReplacementChar(const nlohmann::json& j,
                                                               const std::string& where);

// The pre-tokenizer pipeline. Supported: null, Split (Regex or String pattern, behavior
// Isolated or Removed, invert false), Metaspace (replacement, prepend_scheme always / first
// / never or legacy add_prefix_space, split true / false), ByteLevel (add_prefix_space,
// use_regex with GPT-2's pattern), and Sequence of those with ByteLevel last. Immutable;
// const use is thread-safe.
class PreTokenizer {
 public:
  // Parses tokenizer.json's "pre_tokenizer" value. InvalidArgument naming the field for an
  // unknown type, bad regex or unsupported option.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(
      const nlohmann::json& pre_tokenizer);
  ~PreTokenizer();

  // Splits `text` (valid UTF-8) into the words the model sees, byte-level mapped when the
  // pipeline ends with ByteLevel. `at_start`: `text` begins at offset 0 of the input given to
  // Encode (Metaspace's "first" scheme prepends only there). Fails only if PCRE2 fails
  // (Internal).
  [[nodiscard]] absl::Status Run(std::string_view text, bool at_start,
                                 std::vector<std::string>* words) const;

  // Whether the pipeline ends with ByteLevel (the model's tokens are byte-level strings).
  [[nodiscard]] bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    std::unique_ptr<TokenizerRegex> regex;  // Split; null for Metaspace
    bool drop_matches = false;
    std::string replacement;  // Metaspace: the UTF-8 of its replacement character
    PrependScheme prepend = PrependScheme::kAlways;
    bool split = true;
  };
  absl::Status AddStep(const nlohmann::json& j, const std::string& where, bool last);
  absl::Status AddMetaspace(const nlohmann::json& j, const std::string& where);
  // Metaspace on one piece: spaces -> replacement, the prefix, then (split) pieces that each
  // begin at a replacement character (HF's MergedWithNext).
  static void Metaspace(const Step& step, std::string_view piece, bool first,
                        std::vector<std::string>* out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
  bool add_prefix_space_ = false;
  std::unique_ptr<TokenizerRegex> byte_level_regex_;  // GPT-2's pattern when use_regex
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_TOKENIZER_PRETOKENIZER_H_
