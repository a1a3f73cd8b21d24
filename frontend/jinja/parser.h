// Parser of the chat-template Jinja subset over lexer.h's tokens (see
// frontend/jinja/chat_template.h).
// Internal to frontend/jinja/ (its API is chat_template.h): tools/lint/check_layering.py
// refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_JINJA_PARSER_H_
#define VLLM_FRONTEND_JINJA_PARSER_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "frontend/jinja/ast.h"

namespace vllm::frontend::jinja {

// Parses `source` with transformers' environment settings (trim_blocks, lstrip_blocks,
// keep_trailing_newline false). InvalidArgument "line L, column C: ..." for syntax outside
// the subset or nesting deeper than 128.
[[nodiscard]] absl::StatusOr<Body> ParseTemplate(std::string_view source);

// "line L, column C" (1-based) of byte `offset` in `source`, for error messages.
[[nodiscard]] std::string LocationOf(std::string_view source, size_t offset);

}  // namespace vllm::frontend::jinja

#endif  // VLLM_FRONTEND_JINJA_PARSER_H_
