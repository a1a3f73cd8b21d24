// TokenizeRequestBody: kv_aware's view of a request, the prompt token ids a worker computes.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/ordered_json.h"
#include "frontend/jinja/chat_template_input.h"
#include "nlohmann/json.hpp"
#include "router/router.h"

namespace vllm::router {
namespace {

// Ordered, as the API server parses a chat (the template's tojson keeps the client's order).
using json = nlohmann::ordered_json;

// A token-id prompt: every element an integer id in int32 range; nullopt otherwise.
std::optional<std::vector<int32_t>> TokenIds(const json& prompt) {
  std::vector<int32_t> ids;
  ids.reserve(prompt.size());
  for (const json& t : prompt) {
    if (!t.is_number_integer()) return std::nullopt;
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) return std::nullopt;
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// A boolean field of the body, or `fallback`.
bool Flag(const json& body, const char* name, bool fallback) {
  auto it = body.find(name);
  return it != body.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

std::optional<std::vector<int32_t>> TokenizeRequestBody(const frontend::Tokenizer& tokenizer,
                                                        const frontend::ChatTemplate* chat_template,
                                                        const std::string& body, bool chat) {
  absl::StatusOr<json> parsed = base::ParseOrderedJson(body, "request body");
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  const json& j = *parsed;
  std::string text;
  bool add_special_tokens = true;  // completions: as vLLM, unless the request says otherwise
  if (!chat) {
    auto it = j.find("prompt");
    if (it == j.end()) return std::nullopt;
    const json* prompt = &*it;
    if (prompt->is_array() && !prompt->empty() &&
        (prompt->front().is_string() || prompt->front().is_array())) {
      prompt = &prompt->front();  // a batch: its first prompt
    }
    if (prompt->is_array()) return TokenIds(*prompt);
    if (!prompt->is_string()) return std::nullopt;
    text = prompt->get<std::string>();
    if (auto a = j.find("add_special_tokens"); a != j.end() && a->is_boolean()) {
      add_special_tokens = a->get<bool>();
    }
  } else {
    if (chat_template == nullptr) return std::nullopt;
    // As the API server renders the chat (frontend/jinja/chat_template_input.h): the messages,
    // the request's tools and template kwargs, the prompt flags. The rendered text is
    // tokenized with special tokens only when the request asks (the template writes BOS).
    json tools;
    if (auto t = j.find("tools"); t != j.end() && t->is_array() && !t->empty()) tools = *t;
    absl::StatusOr<frontend::ChatTemplateInput> input = frontend::TemplateInputFor(
        j, std::move(tools), Flag(j, "add_generation_prompt", true),
        Flag(j, "continue_final_message", false), Flag(j, "add_special_tokens", false));
    if (!input.ok()) return std::nullopt;
    absl::StatusOr<std::string> rendered = frontend::RenderChatPrompt(
        *chat_template, *input, tokenizer.bos_token(), tokenizer.eos_token());
    if (!rendered.ok()) return std::nullopt;
    text = std::move(*rendered);
    add_special_tokens = input->add_special_tokens;
  }
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_special_tokens);
  if (!ids.ok()) return std::nullopt;
  return std::move(*ids);
}

}  // namespace vllm::router
