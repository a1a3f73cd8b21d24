// ChatTemplate: renders tokenizer_config.json's Jinja chat_template for a conversation.
#ifndef VLLM_FRONTEND_JINJA_CHAT_TEMPLATE_H_
#define VLLM_FRONTEND_JINJA_CHAT_TEMPLATE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace vllm::frontend {

namespace jinja {
struct Node;
class Value;
}  // namespace jinja

// One chat message as the OpenAI API sends it (text content only).
struct ChatMessage {
  std::string role;  // "system", "developer", "user", "assistant" or "tool"
  std::string content;

  friend bool operator==(const ChatMessage&, const ChatMessage&) = default;
};

// What one render may do (the defaults hold for the server; fuzzers lower them to keep
// every input fast, since the time bound scales with them).
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{64} << 20;
  int64_t max_iterations = 100'000;
  // Work in bytes of values produced (strings: their bytes; lists and maps: one per element)
  // plus bytes compared: bounds a render's time and memory whatever the template. 8x the
  // output limit: a template copies each message a few times.
  size_t max_work = size_t{512} << 20;
  // Expressions evaluated, each loop iteration counting 4: bounds the time of templates
  // whose values stay small (nested loops over a string, say) to ~0.1 s (2 s under ASan).
  // Real templates evaluate tens of expressions per message.
  int64_t max_evaluations = 1'000'000;
};

// A parsed chat template. The interpreter covers a documented Jinja subset (see
// frontend/jinja/README.md) with transformers' settings (trim_blocks, lstrip_blocks, no trailing
// newline) and renders byte for byte what transformers' apply_chat_template renders for
// Llama 3, Qwen2/2.5, Mistral and the bundled model's templates.
// Immutable after Parse; Render is const and thread-safe. Cheap to move.
class ChatTemplate {
 public:
  using Limits = ChatTemplateLimits;

  // Parses `source` once. InvalidArgument "chat template: line L, column C: ..." for any
  // syntax outside the subset; never crashes, whatever the input.
  [[nodiscard]] static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // Renders the template with the variables messages (list of {role, content} maps),
  // add_generation_prompt, bos_token and eos_token. InvalidArgument with the message of
  // raise_exception('...'), on a type error (e.g. string + int, attribute of undefined), an
  // unknown filter/test/function, or past a limit: `limits` (by default output over 64 MiB,
  // more than 100000 loop iterations, more than 512 MiB of values produced in all, more than
  // 1000000 expression evaluations), a value over 64 MiB (lists and dicts counted as ~64 bytes
  // per element) or nested deeper than 128, a namespace() stored
  // in a list, dict or namespace, a string of over 2^20 characters split into a list. So a
  // render's time and memory are bounded whatever the template and the messages.
  [[nodiscard]] absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                                   bool add_generation_prompt,
                                                   const std::string& bos_token,
                                                   const std::string& eos_token,
                                                   const Limits& limits = Limits()) const;

  // Renders with everything transformers' apply_chat_template passes a template (tool
  // calling, reasoning, template kwargs): `messages`, a JSON array of message objects with
  // whatever fields they have (role; content as a string, null or a list of parts;
  // tool_calls with their arguments as objects, as vLLM passes them; tool_call_id;
  // reasoning_content; ...); `tools`, a JSON array of tool schemas, or null (the template
  // then sees `tools` as none); `extra`, a JSON object of more variables (the request's
  // chat_template_kwargs: enable_thinking, date_string, ...; its keys named like the other
  // arguments are ignored); add_generation_prompt, bos_token and eos_token. JSON values
  // become Python's (null: None, true: True, objects: dicts in their key order, so parse
  // requests with nlohmann::ordered_json for `tojson` to keep the client's order, as
  // Python does). Fails as Render above does, and with InvalidArgument when `messages` is not
  // an array, `tools` neither an array nor null, `extra` not an object, or an input nests
  // deeper than 128 levels or weighs over 64 MiB.
  [[nodiscard]] absl::StatusOr<std::string> RenderJson(
      const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
      const nlohmann::ordered_json& extra, bool add_generation_prompt, const std::string& bos_token,
      const std::string& eos_token, const Limits& limits = Limits()) const;

  // The template's text, as given to Parse.
  const std::string& source() const { return source_; }

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  ChatTemplate();
  // Renders with these top-level variables.
  absl::StatusOr<std::string> RenderGlobals(
      std::vector<std::pair<std::string, jinja::Value>> globals, const Limits& limits) const;
  std::string source_;
  std::unique_ptr<std::vector<std::unique_ptr<jinja::Node>>> body_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_JINJA_CHAT_TEMPLATE_H_
