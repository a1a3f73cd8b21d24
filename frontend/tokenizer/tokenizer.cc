#include "frontend/tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "base/json_util.h"
#include "base/utf8.h"
#include "frontend/tokenizer/byte_level.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

absl::Status Bad(const std::string& where, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", where, ": ", why));
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

constexpr char kTooDeep[] = "arrays and objects nest deeper than 128 levels";
static_assert(base::kMaxJsonDepth == 128);

// Whether `text` nests arrays and objects at most base::kMaxJsonDepth deep (without parsing).
bool ShallowJson(std::string_view text) {
  return base::JsonNestingDepth(text, base::kMaxJsonDepth) <= base::kMaxJsonDepth;
}

// HF's ByteLevel decoder over all tokens: a token whose every code point is in the
// byte-level alphabet contributes those bytes; any other token (e.g. an added token with a
// space) its own UTF-8.
std::string DecodeByteLevel(const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& tok : tokens) {
    std::string mapped;
    bool all = true;
    for (size_t pos = 0; pos < tok.size();) {
      size_t len = base::ValidUtf8SequenceLength(tok, pos);
      if (len == 0) len = 1;
      std::optional<uint8_t> b = UnicodeToByte(tok, pos, len);
      if (!b.has_value()) {
        all = false;
        break;
      }
      mapped.push_back(static_cast<char>(*b));
      pos += len;
    }
    bytes += all ? mapped : tok;
  }
  return base::Utf8Lossy(bytes);
}

// The byte of a "<0xNN>" token as HF reads it (Rust's u8::from_str_radix on the two
// characters: either case, or '+' and one digit); nullopt for any other token.
std::optional<uint8_t> ByteFallbackByte(const std::string& tok) {
  if (tok.size() != 6 || !tok.starts_with("<0x") || tok[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (tok[3] == '+' && hex(tok[4]) >= 0) return static_cast<uint8_t>(hex(tok[4]));
  if (hex(tok[3]) < 0 || hex(tok[4]) < 0) return std::nullopt;
  return static_cast<uint8_t>(hex(tok[3]) * 16 + hex(tok[4]));
}

// HF's ByteFallback decoder: runs of <0xNN> tokens become their bytes if they form UTF-8,
// else one U+FFFD per byte (HF's rule, unlike from_utf8_lossy).
void DecodeByteFallback(const std::vector<std::string>& tokens, std::vector<std::string>* out) {
  std::string run;
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (base::IsValidUtf8(run)) {
      out->push_back(run);
    } else {
      for (size_t i = 0; i < run_tokens; ++i) out->emplace_back(base::kReplacementChar);
    }
    run.clear();
    run_tokens = 0;
  };
  for (const std::string& tok : tokens) {
    if (std::optional<uint8_t> b = ByteFallbackByte(tok)) {
      run.push_back(static_cast<char>(*b));
      ++run_tokens;
    } else {
      flush();
      out->push_back(tok);
    }
  }
  flush();
}

// HF's Strip decoder on one token: up to `start` leading and `stop` trailing copies of the
// character `content` (code points, not bytes) are removed.
std::string StripToken(const std::string& tok, const std::string& content, size_t start,
                       size_t stop) {
  size_t begin = 0;
  for (size_t n = 0; n < start && tok.compare(begin, content.size(), content) == 0; ++n) {
    begin += content.size();
  }
  size_t end = tok.size();
  for (size_t n = 0; n < stop && end - begin >= content.size() &&
                     tok.compare(end - content.size(), content.size(), content) == 0;
       ++n) {
    end -= content.size();
  }
  return tok.substr(begin, end - begin);
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// A token's string from tokenizer_config.json: "..." or {"content": "..."} (older files).
std::string ConfigToken(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::filesystem::path& model_dir) {
  absl::StatusOr<std::string> tokenizer_json = ReadFile(model_dir / "tokenizer.json");
  if (!tokenizer_json.ok()) return tokenizer_json.status();
  std::string config_json;
  if (std::filesystem::exists(model_dir / "tokenizer_config.json")) {
    absl::StatusOr<std::string> c = ReadFile(model_dir / "tokenizer_config.json");
    if (!c.ok()) return c.status();
    config_json = *std::move(c);
  }
  return FromJson(*tokenizer_json, config_json);
}

namespace {

// vLLM's get_leading_space_marker: a Metaspace pre-tokenizer's replacement (top level or in a
// Sequence), "" otherwise.
std::string MetaspaceMarker(const nlohmann::json& j) {
  auto marker = [](const nlohmann::json& pre) -> std::optional<std::string> {
    if (!pre.is_object() || pre.value("type", std::string()) != "Metaspace") return std::nullopt;
    const auto r = pre.find("replacement");
    return r != pre.end() && r->is_string() ? r->get<std::string>() : std::string("\u2581");
  };
  const auto pre = j.find("pre_tokenizer");
  if (pre == j.end()) return "";
  if (auto m = marker(*pre); m.has_value()) return *m;
  if (pre->is_object() && pre->value("type", std::string()) == "Sequence") {
    const auto subs = pre->find("pretokenizers");
    if (subs != pre->end() && subs->is_array()) {
      for (const nlohmann::json& sub : *subs) {
        if (auto m = marker(sub); m.has_value()) return *m;
      }
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json) {
  // The nesting is bounded before parsing: the parsers below recurse once per level of nested
  // Sequence pre-tokenizers, post-processors and decoders.
  if (!ShallowJson(tokenizer_json)) return Bad("(root)", kTooDeep);
  const nlohmann::json j =
      nlohmann::json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("(root)", "not a JSON object");
  std::unique_ptr<Tokenizer> t(new Tokenizer);
  // The checks below cover every field we read, but a type error deep inside a field we
  // did not anticipate must still be a status, not a crash.
  try {
    if (!j.contains("model") || !j["model"].is_object()) return Bad("model", "missing");
    const nlohmann::json& model = j["model"];
    if (model.value("type", std::string("BPE")) != "BPE") {
      return Bad("model.type",
                 absl::StrCat("\"", model["type"].dump(), "\" is not supported (only BPE)"));
    }
    absl::StatusOr<BpeModel> bpe = BpeModel::FromJson(model);
    if (!bpe.ok()) return bpe.status();
    t->model_ = *std::move(bpe);
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      absl::StatusOr<std::unique_ptr<Normalizer>> normalizer =
          Normalizer::FromJson(j["normalizer"]);
      if (!normalizer.ok()) return normalizer.status();
      t->normalizer_ = *std::move(normalizer);
    }
    absl::StatusOr<std::unique_ptr<PreTokenizer>> pre =
        PreTokenizer::FromJson(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json());
    if (!pre.ok()) return pre.status();
    t->pre_tokenizer_ = *std::move(pre);
    t->space_marker_ = MetaspaceMarker(j);
    t->id_to_token_ = t->model_.id_to_token();
    absl::Status s = t->ParseAddedTokens(j.contains("added_tokens") ? j["added_tokens"]
                                                                    : nlohmann::json::array());
    if (s.ok() && j.contains("post_processor") && !j["post_processor"].is_null()) {
      s = t->ParsePostProcessor(j["post_processor"], "post_processor");
    }
    if (s.ok() && j.contains("decoder") && !j["decoder"].is_null()) {
      t->has_decoder_ = true;
      s = t->ParseDecoder(j["decoder"], "decoder");
    }
    if (!s.ok()) return s;
  } catch (const nlohmann::json::exception& e) {
    return Bad("(field types)", e.what());
  }
  absl::Status s = t->ParseConfig(config_json);
  if (!s.ok()) return s;
  return t;
}

absl::Status Tokenizer::ParseAddedTokens(const nlohmann::json& added) {
  if (!added.is_array()) return Bad("added_tokens", "not an array");
  // Added tokens follow the vocab's ids; an id far past them would size the id table to it.
  const int64_t max_id = std::min<int64_t>(
      1 << 24, static_cast<int64_t>(id_to_token_.size() + 2 * added.size()) + 1024);
  for (size_t i = 0; i < added.size(); ++i) {
    const nlohmann::json& a = added[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string()) {
      return Bad(where, "expected {\"id\": int, \"content\": string, ...}");
    }
    AddedToken tok;
    const auto id = a["id"].get<int64_t>();
    if (id < 0 || id > max_id) {
      return Bad(where + ".id", absl::StrCat(id, " is outside [0, ", max_id, "]"));
    }
    tok.id = static_cast<int32_t>(id);
    tok.content = a["content"].get<std::string>();
    if (tok.content.empty()) return Bad(where + ".content", "empty");
    tok.special = a.value("special", false);
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    tok.normalized = a.value("normalized", !tok.special);
    if (a.value("single_word", false)) return Bad(where + ".single_word", "true is not supported");
    // HF matches a normalized token by its normalized content, and decodes that form.
    tok.match = tok.normalized && normalizer_ != nullptr ? normalizer_->Normalize(tok.content)
                                                         : tok.content;
    if (tok.match != tok.content) decode_form_[tok.id] = tok.match;
    if (static_cast<size_t>(tok.id) >= id_to_token_.size()) id_to_token_.resize(tok.id + 1);
    id_to_token_[tok.id] = tok.content;
    added_ids_[tok.content] = tok.id;
    added_tokens_.push_back(std::move(tok));
  }
  // skip_special_tokens drops a token whose decoded string is a special token's content.
  absl::flat_hash_map<std::string, bool> special_contents;
  for (const AddedToken& tok : added_tokens_) {
    if (tok.special) special_contents[tok.content] = true;
  }
  special_.assign(id_to_token_.size(), false);
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& tok = added_tokens_[i];
    special_[tok.id] =
        special_contents.contains(tok.match != tok.content ? tok.match : tok.content);
    if (!tok.match.empty()) added_by_first_byte_[tok.match[0]].push_back(i);
  }
  for (auto& [byte, indexes] : added_by_first_byte_) {
    std::stable_sort(indexes.begin(), indexes.end(), [&](size_t a, size_t b) {
      return added_tokens_[a].match.size() > added_tokens_[b].match.size();
    });
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::ParsePostProcessor(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only; ids unchanged
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return Bad(where + ".processors", "missing or not an array");
    }
    for (size_t i = 0; i < j["processors"].size(); ++i) {
      absl::Status s =
          ParsePostProcessor(j["processors"][i], absl::StrCat(where, ".processors[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return Bad(where + ".type", absl::StrCat("\"", type, "\" is not supported"));
  }
  if (!template_.empty()) return Bad(where, "more than one TemplateProcessing");
  if (!j.contains("single") || !j["single"].is_array()) return Bad(where + ".single", "missing");
  const nlohmann::json specials = j.value("special_tokens", nlohmann::json::object());
  bool has_sequence = false;
  for (const nlohmann::json& piece : j["single"]) {
    if (piece.contains("Sequence")) {
      template_.push_back(TemplatePiece{true, {}});
      has_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id")) {
      return Bad(where + ".single", "expected Sequence or SpecialToken items");
    }
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.contains(name) || !specials[name].contains("ids")) {
      return Bad(where + ".special_tokens", absl::StrCat("no entry for \"", name, "\""));
    }
    TemplatePiece p;
    for (const nlohmann::json& id : specials[name]["ids"]) {
      const auto v = id.get<int64_t>();
      if (v < 0 || v >= static_cast<int64_t>(id_to_token_.size())) {
        return Bad(where + ".special_tokens",
                   absl::StrCat("id ", v, " of \"", name, "\" not in vocab"));
      }
      p.ids.push_back(static_cast<int32_t>(v));
    }
    template_.push_back(std::move(p));
  }
  if (!has_sequence) return Bad(where + ".single", "no Sequence item");
  return absl::OkStatus();
}

absl::Status Tokenizer::ParseDecoder(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", std::string());
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return Bad(where + ".decoders", "missing or not an array");
    }
    for (size_t i = 0; i < j["decoders"].size(); ++i) {
      absl::Status s = ParseDecoder(j["decoders"][i], absl::StrCat(where, ".decoders[", i, "]"));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return ParseDecoderStep(type, j, where);
}

absl::Status Tokenizer::ParseDecoderStep(const std::string& type, const nlohmann::json& j,
                                         const std::string& where) {
  using Kind = DecoderStep::Kind;
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    absl::StatusOr<std::string> pattern =
        LiteralPattern(j.contains("pattern") ? j["pattern"] : nlohmann::json(), where + ".pattern");
    if (!pattern.ok()) return pattern.status();
    if (!j.contains("content") || !j["content"].is_string()) {
      return Bad(where + ".content", "missing or not a string");
    }
    step.from = *std::move(pattern);
    step.to = j["content"].get<std::string>();
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    const std::string content = j.value("content", std::string());
    if (content.empty() || !base::IsValidUtf8(content) ||
        base::ValidUtf8SequenceLength(content, 0) != content.size()) {
      return Bad(where + ".content", "not exactly one character");
    }
    for (const char* field : {"start", "stop"}) {
      if (!j.contains(field) || !j[field].is_number_unsigned()) {
        return Bad(absl::StrCat(where, ".", field), "missing or not a non-negative integer");
      }
    }
    step.from = content;
    step.start = j["start"].get<size_t>();
    step.stop = j["stop"].get<size_t>();
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    absl::StatusOr<std::string> replacement = ParseReplacementChar(j, where);
    if (!replacement.ok()) return replacement.status();
    absl::StatusOr<PrependScheme> scheme = ParsePrependScheme(j, where);
    if (!scheme.ok()) return scheme.status();
    step.from = *std::move(replacement);
    step.drop_first = *scheme != PrependScheme::kNever;
  } else {
    return Bad(where + ".type", absl::StrCat("\"", type, "\" is not supported"));
  }
  decoder_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status Tokenizer::ParseConfig(std::string_view config_json) {
  if (config_json.empty()) return absl::OkStatus();
  if (!ShallowJson(config_json)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", kTooDeep));
  }
  const nlohmann::json c = nlohmann::json::parse(config_json, nullptr, false);
  if (c.is_discarded() || !c.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json: not a JSON object");
  }
  bos_token_ = ConfigToken(c, "bos_token");
  eos_token_ = ConfigToken(c, "eos_token");
  if (!bos_token_.empty()) bos_token_id_ = TokenToId(bos_token_);
  if (!eos_token_.empty()) eos_token_id_ = TokenToId(eos_token_);
  clean_up_spaces_ = c.contains("clean_up_tokenization_spaces") &&
                     c["clean_up_tokenization_spaces"].is_boolean() &&
                     c["clean_up_tokenization_spaces"].get<bool>();
  if (c.contains("chat_template")) {
    const nlohmann::json& ct = c["chat_template"];
    if (ct.is_string()) {
      chat_template_ = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const nlohmann::json& named : ct) {
        if (named.is_object() && named.value("name", std::string()) == "default" &&
            named.contains("template") && named["template"].is_string()) {
          chat_template_ = named["template"].get<std::string>();
        }
      }
    } else if (!ct.is_null()) {
      return absl::InvalidArgumentError(
          "tokenizer_config.json: chat_template: not a string or list");
    }
  }
  return absl::OkStatus();
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = added_ids_.find(absl::string_view(token.data(), token.size()));
  if (it != added_ids_.end()) return it->second;
  return model_.TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return std::nullopt;
  return id_to_token_[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

void Tokenizer::SplitAddedTokens(bool normalized, std::vector<Segment>* segments) const {
  std::vector<Segment> out;
  for (const Segment& seg : *segments) {
    if (seg.id >= 0) {
      out.push_back(seg);
      continue;
    }
    const std::string_view text = seg.text;
    size_t emitted = 0;  // text[emitted, ...) is not yet in `out`
    size_t pos = 0;
    while (pos < text.size()) {
      auto bucket = added_by_first_byte_.find(text[pos]);
      const AddedToken* match = nullptr;
      if (bucket != added_by_first_byte_.end()) {
        for (size_t index : bucket->second) {  // longest first: leftmost-longest match
          const AddedToken& tok = added_tokens_[index];
          if (tok.normalized == normalized && text.substr(pos).starts_with(tok.match)) {
            match = &tok;
            break;
          }
        }
      }
      if (match == nullptr) {
        ++pos;
        continue;
      }
      size_t start = pos;
      size_t end = pos + match->match.size();
      // lstrip/rstrip: the token absorbs the whitespace beside it.
      if (match->lstrip) {
        while (start > emitted && IsAsciiSpace(text[start - 1])) --start;
      }
      if (match->rstrip) {
        while (end < text.size() && IsAsciiSpace(text[end])) ++end;
      }
      if (start > emitted) {
        out.push_back(
            Segment{text.substr(emitted, start - emitted), -1, seg.at_start && emitted == 0});
      }
      out.push_back(Segment{text.substr(start, end - start), match->id});
      emitted = pos = end;
    }
    if (emitted < text.size()) {
      out.push_back(Segment{text.substr(emitted), -1, seg.at_start && emitted == 0});
    }
  }
  segments->swap(out);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  std::string repaired;
  if (!base::IsValidUtf8(text)) {
    repaired = base::Utf8Lossy(text);
    text = repaired;
  }
  std::vector<Segment> segments{Segment{text, -1, true}};
  SplitAddedTokens(/*normalized=*/false, &segments);
  // As HF: each piece between non-normalized added tokens is normalized on its own (Prepend
  // applies to every piece), then normalized added tokens are found in the normalized text.
  std::deque<std::string> normalized;
  if (normalizer_ != nullptr) {
    for (Segment& seg : segments) {
      if (seg.id >= 0) continue;
      normalized.push_back(normalizer_->Normalize(seg.text));
      seg.text = normalized.back();
    }
  }
  SplitAddedTokens(/*normalized=*/true, &segments);
  std::vector<int32_t> ids;
  std::vector<std::string> words;
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    words.clear();
    absl::Status s = pre_tokenizer_->Run(seg.text, seg.at_start, &words);
    if (!s.ok()) return s;
    for (const std::string& word : words) model_.EncodeWord(word, &ids);
  }
  if (!add_special_tokens || template_.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + template_.size());
  for (const TemplatePiece& p : template_) {
    if (p.is_sequence) {
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      out.insert(out.end(), p.ids.begin(), p.ids.end());
    }
  }
  return out;
}

std::vector<std::string> Tokenizer::DecodeSteps(std::vector<std::string> tokens) const {
  for (const DecoderStep& step : decoder_) {
    std::vector<std::string> next;
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel:
        next.push_back(DecodeByteLevel(tokens));
        break;
      case DecoderStep::Kind::kByteFallback:
        DecodeByteFallback(tokens, &next);
        break;
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& tok : tokens) all += tok;
        next.push_back(std::move(all));
        break;
      }
      case DecoderStep::Kind::kReplace:
        for (const std::string& tok : tokens) {
          next.push_back(ReplaceAll(tok, step.from, step.to));
        }
        break;
      case DecoderStep::Kind::kStrip:
        for (const std::string& tok : tokens) {
          next.push_back(StripToken(tok, step.from, step.start, step.stop));
        }
        break;
      case DecoderStep::Kind::kMetaspace:
        // Every replacement character becomes a space, except in the first token, which
        // loses all of them (HF: `i == 0 && prepend_scheme != never`).
        for (size_t i = 0; i < tokens.size(); ++i) {
          next.push_back(ReplaceAll(tokens[i], step.from, i == 0 && step.drop_first ? "" : " "));
        }
        break;
    }
    tokens.swap(next);
  }
  return tokens;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) continue;
    if (id_to_token_[id].empty()) continue;  // a hole in the id space: no token
    if (skip_special_tokens && IsSpecial(id)) continue;
    auto form = decode_form_.find(id);
    tokens.push_back(form != decode_form_.end() ? form->second : id_to_token_[id]);
  }
  std::string text;
  if (!has_decoder_) {
    // HF joins with spaces when the file has no decoder.
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&text, i ? " " : "", tokens[i]);
  } else {
    for (const std::string& piece : DecodeSteps(std::move(tokens))) text += piece;
  }
  if (clean_up_spaces_) {
    text = absl::StrReplaceAll(text, {{" .", "."},
                                      {" ?", "?"},
                                      {" !", "!"},
                                      {" ,", ","},
                                      {" ' ", "'"},
                                      {" n't", "n't"},
                                      {" 'm", "'m"},
                                      {" 's", "'s"},
                                      {" 've", "'ve"},
                                      {" 're", "'re"}});
  }
  return text;
}

std::string Tokenizer::DecodeToken(int32_t id) const {
  // Decode's steps for one token, without the clean-up.
  std::string text;
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || id_to_token_[id].empty()) {
    return text;
  }
  auto form = decode_form_.find(id);
  std::string raw = form != decode_form_.end() ? form->second : id_to_token_[id];
  if (!has_decoder_) {
    text = std::move(raw);
  } else {
    for (const std::string& piece : DecodeSteps({std::move(raw)})) text += piece;
  }
  if (space_marker_.empty()) return text;
  // vLLM's _restore_leading_spaces: as many leading spaces as the raw token has markers.
  size_t markers = 0;
  for (absl::string_view rest = id_to_token_[id]; absl::StartsWith(rest, space_marker_);
       rest.remove_prefix(space_marker_.size())) {
    ++markers;
  }
  const size_t existing =
      text.find_first_not_of(' ') == std::string::npos ? text.size() : text.find_first_not_of(' ');
  if (markers > existing) text.insert(0, markers - existing, ' ');
  return text;
}

}  // namespace vllm::frontend
