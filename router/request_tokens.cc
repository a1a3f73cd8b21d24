// TokenizeRequestBody: kv_aware's view of a request, the prompt token ids a worker computes.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json_util.h"
#include "nlohmann/json.hpp"
#include "router/router.h"

namespace vllm::router {
namespace {

using nlohmann::json;

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

// A chat message's text as the API server reads it: a string, or text parts joined by "\n".
std::string MessageText(const json& m) {
  auto content = m.find("content");
  if (content == m.end()) return "";
  if (content->is_string()) return content->get<std::string>();
  std::string out;
  if (!content->is_array()) return out;
  bool first = true;
  for (const json& part : *content) {
    if (!part.is_object()) continue;
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) continue;
    if (!first) out += "\n";
    out += t->get_ref<const std::string&>();
    first = false;
  }
  return out;
}

}  // namespace

std::optional<std::vector<int32_t>> TokenizeRequestBody(const frontend::Tokenizer& tokenizer,
                                                        const frontend::ChatTemplate* chat_template,
                                                        const std::string& body, bool chat) {
  absl::StatusOr<json> parsed = base::ParseJson(body, "request body");
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
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array()) return std::nullopt;
    std::vector<frontend::ChatMessage> messages;
    for (const json& m : *it) {
      if (!m.is_object()) return std::nullopt;
      auto role = m.find("role");
      if (role == m.end() || !role->is_string()) return std::nullopt;
      messages.push_back({role->get<std::string>(), MessageText(m)});
    }
    bool add_generation_prompt = true;
    if (auto a = j.find("add_generation_prompt"); a != j.end() && a->is_boolean()) {
      add_generation_prompt = a->get<bool>();
    }
    absl::StatusOr<std::string> rendered = chat_template->Render(
        messages, add_generation_prompt, tokenizer.bos_token(), tokenizer.eos_token());
    if (!rendered.ok()) return std::nullopt;
    text = std::move(*rendered);
    // As the API server (and vLLM): the rendered text is tokenized with special tokens only
    // when the request asks (the template writes BOS itself).
    add_special_tokens = false;
    if (auto a = j.find("add_special_tokens"); a != j.end() && a->is_boolean()) {
      add_special_tokens = a->get<bool>();
    }
  }
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_special_tokens);
  if (!ids.ok()) return std::nullopt;
  return std::move(*ids);
}

}  // namespace vllm::router
