#include "frontend/engine/engine_client.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frontend/tokenizer/tokenizer.h"

namespace vllm::frontend {

absl::Status CheckMaxLogprobs(const core::SamplingParams& params, int32_t max_logprobs) {
  if (params.logprobs.has_value() && *params.logprobs > max_logprobs) {
    return InvalidParam("logprobs",
                        absl::StrFormat("Requested sample logprobs of %d, which is greater than "
                                        "max allowed: %d",
                                        *params.logprobs, max_logprobs));
  }
  if (params.prompt_logprobs.has_value() && *params.prompt_logprobs > max_logprobs) {
    return InvalidParam("prompt_logprobs",
                        absl::StrFormat("Requested prompt logprobs of %d, which is greater than "
                                        "max allowed: %d",
                                        *params.prompt_logprobs, max_logprobs));
  }
  return absl::OkStatus();
}

absl::Status TruncatePrompt(const GenerateRequest& request, int32_t max_model_len,
                            std::vector<int32_t>* ids) {
  if (!request.truncate_prompt_tokens.has_value()) return absl::OkStatus();
  int64_t keep = *request.truncate_prompt_tokens;
  if (keep > max_model_len) {
    return InvalidParam("truncate_prompt_tokens",
                        absl::StrCat("truncate_prompt_tokens=", keep,
                                     " cannot be greater than max_model_len = ", max_model_len,
                                     ". Please request a smaller truncation size."));
  }
  if (keep < 0) keep = max_model_len - 1;  // vLLM's max_truncation_tokens
  if (keep >= static_cast<int64_t>(ids->size())) return absl::OkStatus();
  if (request.truncate_left) {
    ids->erase(ids->begin(), ids->end() - keep);
  } else {
    ids->resize(static_cast<size_t>(keep));
  }
  return absl::OkStatus();
}

namespace {

std::string IdList(const std::vector<int32_t>& ids) {
  return absl::StrCat("[", absl::StrJoin(ids, ", "), "]");
}

}  // namespace

absl::Status CheckTokenConstraints(const core::SamplingParams& params, int32_t vocab_size) {
  std::vector<int32_t> bad;
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || id >= vocab_size) bad.push_back(id);
  }
  if (!bad.empty()) {
    return InvalidParam("logit_bias", absl::StrCat("token_id(s) ", IdList(bad),
                                                   " in logit_bias contain out-of-vocab token "
                                                   "ids. Vocabulary size: ",
                                                   vocab_size));
  }
  for (int32_t id : params.allowed_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return InvalidParam("allowed_token_ids", "allowed_token_ids contains out-of-vocab token id!");
    }
  }
  return absl::OkStatus();
}

absl::Status TokenizeBadWords(const Tokenizer& tokenizer, const std::vector<std::string>& words,
                              core::SamplingParams* params) {
  std::vector<std::vector<int32_t>>& out = params->bad_words_token_ids;
  for (const std::string& word : words) {
    const std::string stripped(absl::StripLeadingAsciiWhitespace(word));
    for (const bool add_prefix_space : {false, true}) {
      absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(
          add_prefix_space ? " " + stripped : stripped, /*add_special_tokens=*/false);
      if (!ids.ok()) return ids.status();
      if (ids->empty()) {
        if (!add_prefix_space) {
          return InvalidParam("bad_words",
                              "bad_words entries must tokenize to at least one token.");
        }
        continue;
      }
      // vLLM keeps the spaced form only when it is a new word token of the same length.
      if (add_prefix_space &&
          (out.empty() || (*ids)[0] == out.back()[0] || ids->size() != out.back().size())) {
        continue;
      }
      if (ids->size() > static_cast<size_t>(core::kMaxBadWordTokens)) {
        return InvalidParam("bad_words", absl::StrCat("bad_words entries must tokenize to at most ",
                                                      core::kMaxBadWordTokens, " tokens"));
      }
      out.push_back(*std::move(ids));
      if (out.size() > static_cast<size_t>(core::kMaxBadWords)) {
        return InvalidParam("bad_words",
                            absl::StrCat("Too many bad words after tokenization: ", out.size(),
                                         ". The max number is ", core::kMaxBadWords, "."));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace vllm::frontend
