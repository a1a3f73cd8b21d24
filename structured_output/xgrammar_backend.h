// XgrammarBackend: compiles grammar specs against one model's vocabulary with XGrammar, and
// Grammar, one request's matcher over a compiled grammar (vLLM's backend_xgrammar.py:
// XgrammarBackend and XgrammarGrammar).
//
// The token bitmask is XGrammar's (and vLLM's): BitmaskWords(vocab_size) int32 words per row,
// bit j of word w set when token 32 * w + j may come next.
#ifndef VLLM_STRUCTURED_OUTPUT_XGRAMMAR_BACKEND_H_
#define VLLM_STRUCTURED_OUTPUT_XGRAMMAR_BACKEND_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "structured_output/params.h"

namespace xgrammar {
class CompiledGrammar;
class GrammarCompiler;
class GrammarMatcher;
}  // namespace xgrammar

namespace vllm::structured_output {

inline int32_t BitmaskWords(int32_t vocab_size) { return (vocab_size + 31) / 32; }

// One request's grammar state. Not thread-safe; distinct Grammars may be used from distinct
// threads at once.
class Grammar {
 public:
  ~Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  // Advances over `tokens` in order. False when one is not allowed: the tokens before it stay
  // accepted, it and those after it do not.
  bool AcceptTokens(std::span<const int32_t> tokens);
  // Undoes the last `num_tokens` accepted tokens (speculative decoding's rejected drafts).
  void Rollback(int32_t num_tokens);
  // Writes the allowed next tokens into `row` (BitmaskWords(vocab_size) words). Tokens past
  // the tokenizer's vocabulary (the model's padding rows) are never allowed.
  void FillBitmask(std::span<int32_t> row);
  // True once the stop token was accepted (nothing may follow).
  bool IsTerminated() const;
  // True when the grammar is complete and allows nothing but a stop token next: the request
  // can end now (FillBitmask's row is used as scratch; `row` as above).
  bool OnlyStopAllowed(std::span<int32_t> row);
  int32_t num_accepted_tokens() const { return num_accepted_tokens_; }

 private:
  friend class XgrammarBackend;
  Grammar(std::unique_ptr<xgrammar::GrammarMatcher> matcher, int32_t vocab_size,
          std::vector<int32_t> stop_token_ids);

  std::unique_ptr<xgrammar::GrammarMatcher> matcher_;
  int32_t vocab_size_;
  std::vector<int32_t> stop_token_ids_;
  int32_t num_accepted_tokens_ = 0;
};

class XgrammarBackend {
 public:
  // Reads `model_dir`/tokenizer.json (and tokenizer_config.json) for the vocabulary and its
  // encoding (byte-level, byte-fallback or raw, as XGrammar detects it from tokenizer.json).
  // `vocab_size`: the model's (the logits' width; at least the tokenizer's). `stop_token_ids`:
  // the tokens that end a complete grammar (the model's EOS ids) unless a request names its
  // own. InvalidArgument / NotFound for a missing or unreadable tokenizer.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<XgrammarBackend>> Create(
      const std::filesystem::path& model_dir, int32_t vocab_size,
      std::vector<int32_t> stop_token_ids);
  // From the vocabulary itself (`encoded_vocab[id]`, tokenizer.json's spelling; "" for a token
  // never allowed), byte-level or raw: benchmarks and tests of vocabularies without a model.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<XgrammarBackend>> CreateFromVocab(
      const std::vector<std::string>& encoded_vocab, bool byte_level, int32_t vocab_size,
      std::vector<int32_t> stop_token_ids);
  ~XgrammarBackend();
  XgrammarBackend(const XgrammarBackend&) = delete;
  XgrammarBackend& operator=(const XgrammarBackend&) = delete;

  // Compiles `spec` for this vocabulary. Thread-safe. InvalidArgument with XGrammar's message
  // when the spec does not parse.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const xgrammar::CompiledGrammar>> Compile(
      const GrammarSpec& spec) const;
  // A fresh matcher; its stop tokens are the backend's and `eos_token_id` (the request's).
  [[nodiscard]] std::unique_ptr<Grammar> MakeGrammar(const xgrammar::CompiledGrammar& compiled,
                                                     std::optional<int32_t> eos_token_id) const;
  // Bytes the compiled grammar holds (the compile cache's budget).
  static size_t MemorySize(const xgrammar::CompiledGrammar& compiled);

  int32_t vocab_size() const { return vocab_size_; }

 private:
  XgrammarBackend(std::unique_ptr<xgrammar::GrammarCompiler> compiler, int32_t vocab_size,
                  std::vector<int32_t> stop_token_ids);

  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
  int32_t vocab_size_;
  std::vector<int32_t> stop_token_ids_;
};

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_XGRAMMAR_BACKEND_H_
