#include "frontend/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "frontend/tokenizer/byte_level.h"
#include "frontend/tokenizer/normalizer.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

// GPT-2's pattern, which HF's ByteLevel pre-tokenizer applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::Status Bad(const std::string& where, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", why));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

struct TokenizerRegex::Impl {
  pcre2_code* code = nullptr;
};

TokenizerRegex::~TokenizerRegex() {
  if (impl_ != nullptr && impl_->code != nullptr) pcre2_code_free(impl_->code);
}

absl::StatusOr<std::unique_ptr<TokenizerRegex>> TokenizerRegex::Compile(std::string_view pattern,
                                                                        bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex does not compile at offset ", offset,
                                                   ": ", reinterpret_cast<const char*>(message)));
  }
  // JIT is an optimisation: without it (unsupported platform) pcre2_match interprets.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<TokenizerRegex> regex(new TokenizerRegex);
  regex->impl_ = std::make_unique<Impl>();
  regex->impl_->code = code;
  return regex;
}

absl::Status TokenizerRegex::Split(std::string_view text, bool drop_matches,
                                   std::vector<std::string_view>* pieces) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr));
  if (md == nullptr) return absl::ResourceExhaustedError("pcre2_match_data_create failed");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0;
  size_t offset = 0;
  while (offset <= text.size()) {
    // The text was validated (or repaired) before pre-tokenization.
    const int rc = pcre2_match(impl_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                               md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::InternalError(
          absl::StrCat("pre-tokenizer regex: ", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0];
    const size_t end = ov[1];
    if (end == start) {
      // An empty match splits nothing; step one code point past it (as HF's find_iter).
      if (start >= text.size()) break;
      const size_t len = base::ValidUtf8SequenceLength(text, start);
      offset = start + (len == 0 ? 1 : len);
      continue;
    }
    if (start > gap_start) pieces->push_back(text.substr(gap_start, start - gap_start));
    if (!drop_matches) pieces->push_back(text.substr(start, end - start));
    gap_start = end;
    offset = end;
  }
  if (gap_start < text.size()) pieces->push_back(text.substr(gap_start));
  return absl::OkStatus();
}

absl::StatusOr<PrependScheme> ParsePrependScheme(const nlohmann::json& j,
                                                 const std::string& where) {
  PrependScheme scheme = PrependScheme::kAlways;  // HF's default when absent
  if (j.contains("prepend_scheme")) {
    const nlohmann::json& v = j["prepend_scheme"];
    const std::string name = v.is_string() ? v.get<std::string>() : v.dump();
    if (name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return Bad(where + ".prepend_scheme",
                 absl::StrCat(name, " is not one of \"always\", \"first\", \"never\""));
    }
  }
  if (j.contains("add_prefix_space") && !j["add_prefix_space"].is_null()) {
    if (!j["add_prefix_space"].is_boolean()) return Bad(where + ".add_prefix_space", "not a bool");
    // As HF: false means "never", and contradicts any other (declared or default) scheme.
    if (!j["add_prefix_space"].get<bool>() && scheme != PrependScheme::kNever) {
      return Bad(where + ".add_prefix_space", "false does not match the prepend_scheme");
    }
  }
  return scheme;
}

absl::StatusOr<std::string> ParseReplacementChar(const nlohmann::json& j,
                                                 const std::string& where) {
  if (!j.contains("replacement") || !j["replacement"].is_string()) {
    return Bad(where + ".replacement", "missing or not a string");
  }
  std::string r = j["replacement"].get<std::string>();
  if (r.empty() || !base::IsValidUtf8(r) || base::ValidUtf8SequenceLength(r, 0) != r.size()) {
    return Bad(where + ".replacement", "not exactly one character");
  }
  return r;
}

PreTokenizer::~PreTokenizer() = default;

absl::Status PreTokenizer::AddMetaspace(const nlohmann::json& j, const std::string& where) {
  Step step;
  absl::StatusOr<std::string> replacement = ParseReplacementChar(j, where);
  if (!replacement.ok()) return replacement.status();
  step.replacement = *std::move(replacement);
  absl::StatusOr<PrependScheme> scheme = ParsePrependScheme(j, where);
  if (!scheme.ok()) return scheme.status();
  step.prepend = *scheme;
  if (j.contains("split") && !j["split"].is_null()) {
    if (!j["split"].is_boolean()) return Bad(where + ".split", "not a bool");
    step.split = j["split"].get<bool>();
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::Metaspace(const Step& step, std::string_view piece, bool first,
                             std::vector<std::string>* out) {
  const std::string& rep = step.replacement;
  std::string s = ReplaceAll(piece, " ", rep);
  const bool prepend =
      step.prepend == PrependScheme::kAlways || (step.prepend == PrependScheme::kFirst && first);
  if (prepend && !s.starts_with(rep)) s.insert(0, rep);
  if (!step.split) {
    out->push_back(std::move(s));
    return;
  }
  // UTF-8 is self-synchronising: a match of the whole character never starts mid-character.
  size_t begin = 0;
  for (size_t pos = s.find(rep); pos != std::string::npos; pos = s.find(rep, pos + rep.size())) {
    if (pos > begin) {
      out->push_back(s.substr(begin, pos - begin));
      begin = pos;
    }
  }
  if (begin < s.size()) out->push_back(s.substr(begin));
}

absl::Status PreTokenizer::AddStep(const nlohmann::json& j, const std::string& where, bool last) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Bad(where, "expected an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return Bad(where + ".pretokenizers", "missing or not an array");
    }
    const nlohmann::json& steps = j["pretokenizers"];
    for (size_t i = 0; i < steps.size(); ++i) {
      absl::Status s = AddStep(steps[i], absl::StrCat(where, ".pretokenizers[", i, "]"),
                               last && i + 1 == steps.size());
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (byte_level_) return Bad(where, "steps after ByteLevel are not supported");
  if (type == "Metaspace") return AddMetaspace(j, where);
  if (type == "ByteLevel") {
    byte_level_ = true;
    add_prefix_space_ = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) {
      absl::StatusOr<std::unique_ptr<TokenizerRegex>> re =
          TokenizerRegex::Compile(kGpt2Pattern, false);
      if (!re.ok()) return Bad(where, std::string(re.status().message()));
      byte_level_regex_ = *std::move(re);
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    if (j.value("invert", false)) return Bad(where + ".invert", "true is not supported");
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" && behavior != "Removed") {
      return Bad(where + ".behavior", absl::StrCat("\"", behavior, "\" is not supported"));
    }
    const nlohmann::json* pattern = nullptr;
    bool literal = false;
    if (j.contains("pattern") && j["pattern"].is_object()) {
      if (j["pattern"].contains("Regex") && j["pattern"]["Regex"].is_string()) {
        pattern = &j["pattern"]["Regex"];
      } else if (j["pattern"].contains("String") && j["pattern"]["String"].is_string()) {
        pattern = &j["pattern"]["String"];
        literal = true;
      }
    }
    if (pattern == nullptr) {
      return Bad(where + ".pattern", "expected {\"Regex\": string} or {\"String\": string}");
    }
    absl::StatusOr<std::unique_ptr<TokenizerRegex>> re =
        TokenizerRegex::Compile(pattern->get_ref<const std::string&>(), literal);
    if (!re.ok()) return Bad(where + ".pattern", std::string(re.status().message()));
    Step step;
    step.regex = *std::move(re);
    step.drop_matches = behavior == "Removed";
    steps_.push_back(std::move(step));
    return absl::OkStatus();
  }
  return Bad(where + ".type", absl::StrCat("\"", type, "\" is not supported"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(
    const nlohmann::json& pre_tokenizer) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer);
  if (pre_tokenizer.is_null()) return p;
  absl::Status s = p->AddStep(pre_tokenizer, "pre_tokenizer", true);
  if (!s.ok()) return s;
  return p;
}

absl::Status PreTokenizer::Run(std::string_view text, bool at_start,
                               std::vector<std::string>* words) const {
  if (text.empty()) return absl::OkStatus();  // HF drops empty pieces before pre-tokenizing
  std::deque<std::string> rewritten;          // pieces Metaspace rewrote; `pieces` views them
  std::vector<std::string> metaspace_out;
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> next;
  // Where the piece that begins at offset 0 of Encode's input starts (Metaspace "first").
  const char* first = at_start ? text.data() : nullptr;
  for (const Step& step : steps_) {
    next.clear();
    const char* next_first = nullptr;
    for (std::string_view piece : pieces) {
      const bool is_first = first != nullptr && piece.data() == first;
      const size_t before = next.size();
      if (step.regex != nullptr) {
        absl::Status s = step.regex->Split(piece, step.drop_matches, &next);
        if (!s.ok()) return s;
        if (is_first && next.size() > before && next[before].data() == piece.data()) {
          next_first = piece.data();
        }
        continue;
      }
      metaspace_out.clear();
      Metaspace(step, piece, is_first, &metaspace_out);
      for (std::string& m : metaspace_out) {
        rewritten.push_back(std::move(m));
        next.push_back(rewritten.back());
      }
      if (is_first && next.size() > before) next_first = next[before].data();
    }
    first = next_first;
    pieces.swap(next);
  }
  if (!byte_level_) {
    for (std::string_view piece : pieces) words->emplace_back(piece);
    return absl::OkStatus();
  }
  std::string prefixed;
  for (std::string_view piece : pieces) {
    // HF prepends the space to every piece that reaches ByteLevel, not just the first.
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      prefixed = " " + std::string(piece);
      piece = prefixed;
    }
    next.clear();
    if (byte_level_regex_ != nullptr) {
      absl::Status s = byte_level_regex_->Split(piece, false, &next);
      if (!s.ok()) return s;
    } else {
      next.push_back(piece);
    }
    for (std::string_view word : next) {
      std::string mapped;
      mapped.reserve(word.size() * 2);
      for (char c : word) mapped += ByteToUnicode(static_cast<uint8_t>(c));
      words->push_back(std::move(mapped));
    }
  }
  return absl::OkStatus();
}

}  // namespace vllm::frontend
