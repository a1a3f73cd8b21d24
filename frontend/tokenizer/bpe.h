// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}).
// Internal to frontend/tokenizer/ (its API is tokenizer.h): tools/lint/check_layering.py
// refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_TOKENIZER_BPE_H_
#define VLLM_FRONTEND_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace vllm::frontend {

// Vocabulary plus ranked merges. Encodes one pre-token (already byte-level mapped when the
// tokenizer uses ByteLevel) the way HF tokenizers' BPE does without dropout: start from one
// symbol per code point, repeatedly merge the adjacent pair with the lowest merge rank
// (leftmost first on ties). Immutable after FromJson; const methods are thread-safe.
class BpeModel {
 public:
  // Parses the "model" object. InvalidArgument (prefixed with "tokenizer.json: model.")
  // for anything malformed or unsupported: a merge naming a token not in the vocab, a
  // merge whose concatenation is not in the vocab, continuing_subword_prefix or
  // end_of_word_suffix, dropout, negative ids.
  [[nodiscard]] static absl::StatusOr<BpeModel> FromJson(const nlohmann::json& model);

  // Appends the ids of `word` to `out`. Code points missing from the vocab become <0xNN>
  // byte tokens under byte_fallback, else unk_token when set, else are dropped (as HF).
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  // Id of `token` in the vocab, if any.
  [[nodiscard]] std::optional<int32_t> TokenToId(std::string_view token) const;

  // The vocab entries as id -> token; ids without a token are empty strings.
  [[nodiscard]] const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Initial symbols of `word`: one id per code point (or its byte-fallback / unk ids).
  void InitialSymbols(std::string_view word, std::vector<int32_t>* ids) const;
  // Applies merges in rank order to `ids` in place.
  void Merge(std::vector<int32_t>* ids) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids, -1 where absent
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_TOKENIZER_BPE_H_
