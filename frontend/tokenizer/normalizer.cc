#include "frontend/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

absl::Status Bad(const std::string& where, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", why));
}

// utf8proc's flags for a normalization form; 0 for an unknown name. STABLE keeps the
// composition stable across Unicode versions as the standard's forms require.
int UnicodeOptions(std::string_view form) {
  if (form == "NFC") return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  if (form == "NFD") return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  if (form == "NFKC") return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  if (form == "NFKD") return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  return 0;
}

// Normalizes with utf8proc. The text is valid UTF-8 (the tokenizer checks its input), so
// utf8proc_map fails only on allocation; the text is then returned unchanged.
std::string MapUnicode(std::string_view text, int options) {
  if (text.empty()) return std::string();
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0 || out == nullptr) return std::string(text);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

absl::StatusOr<std::string> UnicodeNormalize(std::string_view text, std::string_view form) {
  const int options = UnicodeOptions(form);
  if (options == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown normalization form ", std::string(form)));
  }
  return MapUnicode(text, options);
}

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
    steps_.push_back(Step{Step::Kind::kPrepend, "", j["prepend"].get<std::string>()});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    absl::StatusOr<std::string> pattern =
        LiteralPattern(j.contains("pattern") ? j["pattern"] : nlohmann::json(), where + ".pattern");
    if (!pattern.ok()) return pattern.status();
    if (!j.contains("content") || !j["content"].is_string()) {
      return Bad(where + ".content", "missing or not a string");
    }
    steps_.push_back(
        Step{Step::Kind::kReplace, *std::move(pattern), j["content"].get<std::string>()});
    return absl::OkStatus();
  }
  if (const int options = UnicodeOptions(type); options != 0) {
    steps_.push_back(Step{Step::Kind::kUnicode, "", "", options});
    return absl::OkStatus();
  }
  return Bad(where + ".type", absl::StrCat("\"", type, "\" is not supported"));
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kPrepend:
        if (!out.empty()) out.insert(0, step.content);
        break;
      case Step::Kind::kReplace:
        out = ReplaceAll(out, step.pattern, step.content);
        break;
      case Step::Kind::kUnicode:
        out = MapUnicode(out, step.unicode_options);
        break;
    }
  }
  return out;
}

}  // namespace vllm::frontend
