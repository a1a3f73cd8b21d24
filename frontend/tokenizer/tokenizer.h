// Tokenizer: Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2) in C++.
#ifndef VLLM_FRONTEND_TOKENIZER_TOKENIZER_H_
#define VLLM_FRONTEND_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "frontend/tokenizer/bpe.h"
#include "frontend/tokenizer/normalizer.h"
#include "frontend/tokenizer/pretokenizer.h"

namespace vllm::frontend {

// Text <-> token ids, matching HF `tokenizers` (and transformers' fast tokenizers) for the
// subset of tokenizer.json documented in frontend/tokenizer/README.md: BPE model (byte_fallback),
// Prepend/Replace normalizers, Split/Metaspace/ByteLevel pre-tokenizers, added tokens,
// TemplateProcessing/ByteLevel/Sequence post-processors, ByteLevel/ByteFallback/Fuse/
// Replace/Strip/Metaspace/Sequence decoders: byte-level BPEs (GPT-2, Llama 3, Qwen2) and
// SentencePiece-converted ones (Llama 2, Mistral, Gemma).
// Immutable after Load; every const method is thread-safe.
class Tokenizer {
 public:
  // Loads `model_dir`/tokenizer.json and, when present, `model_dir`/tokenizer_config.json
  // (bos_token, eos_token, chat_template, clean_up_tokenization_spaces). NotFound when
  // tokenizer.json is missing; InvalidArgument naming the file and field for anything
  // malformed or unsupported. Never crashes on a bad file.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::filesystem::path& model_dir);

  // Same, from the two files' contents (`config_json` may be empty).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view config_json);

  // Token ids of `text`. Added tokens (special or not) in the text are always recognised,
  // as in HF; `add_special_tokens` applies the post-processor (e.g. prepends BOS).
  // Ill-formed UTF-8 is first repaired to U+FFFD per maximal subpart (what Python's
  // decode(errors="replace") would hand HF). Fails only on a PCRE2 runtime error (Internal).
  [[nodiscard]] absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                            bool add_special_tokens) const;

  // Text of `ids`, as HF's decode: ids with no token are skipped (HF does the same), special
  // added tokens are dropped when `skip_special_tokens`, bytes that do not form UTF-8 become
  // U+FFFD. Always returns valid UTF-8.
  [[nodiscard]] std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The text of one token as vLLM 0.33 shows a logprob's token (convert_ids_list_to_tokens
  // with transformers 5): decode([id]) without clean_up_tokenization_spaces (transformers 5
  // applies it to no single-token decode), special tokens kept; for a Metaspace pre-tokenizer
  // (SentencePiece style), the leading spaces decode dropped are restored from the raw
  // token's leading replacement characters. Out-of-range ids: "".
  [[nodiscard]] std::string DecodeToken(int32_t id) const;

  // One past the largest id of the vocab or added tokens (HF's len(tokenizer)).
  [[nodiscard]] int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // Ids of tokenizer_config.json's bos_token / eos_token; nullopt when unset or unknown.
  [[nodiscard]] std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  [[nodiscard]] std::optional<int32_t> eos_token_id() const { return eos_token_id_; }
  // The bos/eos token strings ("" when unset), as chat templates see them.
  [[nodiscard]] const std::string& bos_token() const { return bos_token_; }
  [[nodiscard]] const std::string& eos_token() const { return eos_token_; }
  // Id of a token (added token or vocab entry) by its exact string.
  [[nodiscard]] std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id` (byte-level form for vocab tokens); nullopt when out of range.
  [[nodiscard]] std::optional<std::string> IdToToken(int32_t id) const;
  // Whether `id` is dropped by skip_special_tokens: a special added token (as HF, one whose
  // decoded form, the normalized content for a normalized added token, is a special
  // token's content).
  [[nodiscard]] bool IsSpecial(int32_t id) const;
  // tokenizer_config.json's chat_template ("" when absent; the "default" one of a list).
  [[nodiscard]] const std::string& chat_template() const { return chat_template_; }

 private:
  struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    // What is matched in the text: `content`, or its normalized form when `normalized`.
    std::string match;
  };
  // A run of input text: either an added token (id >= 0) or text for the model (id -1).
  struct Segment {
    std::string_view text;
    int32_t id = -1;
    bool at_start = false;  // text begins at offset 0 of Encode's input
  };
  // One element of TemplateProcessing's "single": the sequence or fixed ids.
  struct TemplatePiece {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  // One decoder of the chain (HF's decode_chain, applied in order).
  struct DecoderStep {
    enum class Kind { kByteLevel, kByteFallback, kFuse, kReplace, kStrip, kMetaspace };
    Kind kind = Kind::kFuse;
    std::string from;  // Replace: the literal; Strip, Metaspace: the character
    std::string to;    // Replace: its replacement
    size_t start = 0;  // Strip: leading / trailing characters to strip at most
    size_t stop = 0;
    bool drop_first = false;  // Metaspace: the first token loses its replacement characters
  };

  Tokenizer() = default;
  absl::Status ParseAddedTokens(const nlohmann::json& added);
  absl::Status ParsePostProcessor(const nlohmann::json& j, const std::string& where);
  absl::Status ParseDecoder(const nlohmann::json& j, const std::string& where);
  absl::Status ParseDecoderStep(const std::string& type, const nlohmann::json& j,
                                const std::string& where);
  absl::Status ParseConfig(std::string_view config_json);
  // Splits text segments around the added tokens whose `normalized` flag is `normalized`.
  void SplitAddedTokens(bool normalized, std::vector<Segment>* segments) const;
  std::vector<std::string> DecodeSteps(std::vector<std::string> tokens) const;

  BpeModel model_;
  std::unique_ptr<Normalizer> normalizer_;  // null: none
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_tokens_;
  // First byte -> indexes into added_tokens_, longest content first.
  absl::flat_hash_map<char, std::vector<size_t>> added_by_first_byte_;
  absl::flat_hash_map<std::string, int32_t> added_ids_;
  std::vector<std::string> id_to_token_;
  // Normalized added tokens whose normalized form differs: HF decodes that form.
  absl::flat_hash_map<int32_t, std::string> decode_form_;
  std::vector<bool> special_;
  std::vector<TemplatePiece> template_;  // empty: post-processing adds nothing
  std::vector<DecoderStep> decoder_;
  bool has_decoder_ = false;
  bool clean_up_spaces_ = false;
  // The pre-tokenizer's Metaspace replacement character (vLLM's get_leading_space_marker);
  // empty when there is none.
  std::string space_marker_;
  std::optional<int32_t> bos_token_id_;
  std::optional<int32_t> eos_token_id_;
  std::string bos_token_;
  std::string eos_token_;
  std::string chat_template_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_TOKENIZER_TOKENIZER_H_
