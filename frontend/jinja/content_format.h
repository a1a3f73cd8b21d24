// Whether a chat template reads a message's content as a list of parts: vLLM 0.33's detection
// of the "openai" chat-template content format (vllm/renderers/hf.py, _detect_content_format),
// over this folder's AST.
#ifndef VLLM_FRONTEND_JINJA_CONTENT_FORMAT_H_
#define VLLM_FRONTEND_JINJA_CONTENT_FORMAT_H_

#include <string_view>

namespace vllm::frontend::jinja {

// True when `source` loops over a message's content: `{% for part in message['content'] %}`
// (or message.content, through filters, tests and slices) where `message` is the target of a
// loop over `messages` or a variable set from it (`set msgs = messages[1:]`, a namespace
// attribute such as `ns.rest = messages`), or a loop over a variable named `content`. False
// for a template that does not parse (vLLM's default, "string").
bool TemplateIteratesMessageContent(std::string_view source);

}  // namespace vllm::frontend::jinja

#endif  // VLLM_FRONTEND_JINJA_CONTENT_FORMAT_H_
