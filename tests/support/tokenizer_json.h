// tokenizer.json pieces for tests that extend a fixture tokenizer. Header-only.
#ifndef VLLM_TESTS_SUPPORT_TOKENIZER_JSON_H_
#define VLLM_TESTS_SUPPORT_TOKENIZER_JSON_H_

#include <string>

#include "nlohmann/json.hpp"

namespace vllm::testing {

// One "added_tokens" entry of tokenizer.json (HF tokenizers' AddedToken), not normalized and
// not stripped. tokenizer_config.json's "added_tokens_decoder" takes the same object without
// "id".
inline nlohmann::json AddedTokenJson(int id, const std::string& content, bool special = false) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_TOKENIZER_JSON_H_
