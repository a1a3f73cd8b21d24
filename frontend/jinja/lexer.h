// Lexer of the chat-template Jinja subset: the source as text and tag tokens, with
// transformers' whitespace control (trim_blocks, lstrip_blocks, "-"/"+" modifiers, one
// trailing newline dropped) already applied to the text. Internal to frontend/jinja/ (its API
// is chat_template.h): tools/lint/check_layering.py refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_JINJA_LEXER_H_
#define VLLM_FRONTEND_JINJA_LEXER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vllm::frontend::jinja {

enum class Tok {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEnd
};

struct Token {
  Tok type;
  std::string text;
  size_t offset = 0;
};

// The tokens of `src`, ending with one kEnd. InvalidArgument "chat template: line L, column
// C: ..." for an unterminated tag, comment or string, or a character outside the subset.
[[nodiscard]] absl::StatusOr<std::vector<Token>> Lex(std::string_view src);

// InvalidArgument "chat template: line L, column C: <what>" for byte `offset` of `src`.
[[nodiscard]] absl::Status LocatedError(std::string_view src, size_t offset,
                                        const std::string& what);

}  // namespace vllm::frontend::jinja

#endif  // VLLM_FRONTEND_JINJA_LEXER_H_
