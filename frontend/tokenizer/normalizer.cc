#include "frontend/tokenizer/normalizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

absl::Status Bad(const std::string& where, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", why));
}

}  // namespace

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, pos)) {
    out.append(text.substr(pos, at - pos));
    out.append(to);
    pos = at + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

absl::StatusOr<std::string> LiteralPattern(const nlohmann::json& pattern,
                                           const std::string& where) {
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    std::string s = pattern["String"].get<std::string>();
    if (s.empty()) return Bad(where, "an empty String pattern is not supported");
    return s;
  }
  if (pattern.is_object() && pattern.contains("Regex")) {
    return Bad(where, "a Regex pattern is not supported (only {\"String\": ...})");
  }
  return Bad(where, "expected {\"String\": string}");
}

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const nlohmann::json& normalizer) {
  std::unique_ptr<Normalizer> n(new Normalizer);
  absl::Status s = n->AddStep(normalizer, "normalizer");
  if (!s.ok()) return s;
  return n;
}

absl::Status Normalizer::AddStep(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Bad(where, "expected an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return Bad(where + ".normalizers", "missing or not an array");
    }
    const nlohmann::json& steps = j["normalizers"];
    for (size_t i = 0; i < steps.size(); ++i) {
      absl::Status s = AddStep(steps[i], absl::StrCat(where, ".normalizers[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return Bad(where + ".prepend", "missing or not a string");
    }
    steps_.push_back(Step{true, "", j["prepend"].get<std::string>()});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    absl::StatusOr<std::string> pattern =
        LiteralPattern(j.contains("pattern") ? j["pattern"] : nlohmann::json(), where + ".pattern");
    if (!pattern.ok()) return pattern.status();
    if (!j.contains("content") || !j["content"].is_string()) {
      return Bad(where + ".content", "missing or not a string");
    }
    steps_.push_back(Step{false, *std::move(pattern), j["content"].get<std::string>()});
    return absl::OkStatus();
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return Bad(where + ".type", absl::StrCat("\"", type,
                                             "\" is not supported (Unicode normalization is "
                                             "not implemented)"));
  }
  return Bad(where + ".type", absl::StrCat("\"", type, "\" is not supported"));
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    if (step.prepend) {
      if (!out.empty()) out.insert(0, step.content);
    } else {
      out = ReplaceAll(out, step.pattern, step.content);
    }
  }
  return out;
}

}  // namespace vllm::frontend
