#include "structured_output/xgrammar_backend.h"

#include <algorithm>
#include <exception>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "frontend/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "structured_output/json_schema_walk.h"
#include "structured_output/xgrammar_row.h"
#include "xgrammar/xgrammar.h"

namespace vllm::structured_output {
namespace {

// XGrammar 0.2.8 turns a string with minLength/maxLength (and no pattern or format) into a
// repetition of [^"\\\r\n], which lets raw control characters (a tab, a form feed) into the
// string: invalid JSON. Such a string gets the equal pattern instead, which XGrammar matches as
// JSON string content (control characters, '"' and '\\' excluded). The schema the client
// validates against is unchanged: every string the pattern admits meets the length bounds.
void BoundStringsAsPatterns(nlohmann::ordered_json& schema) {
  if (!schema.is_object()) return;
  const auto type = schema.find("type");
  const auto min = schema.find("minLength");
  const auto max = schema.find("maxLength");
  if (type != schema.end() && *type == "string" && !schema.contains("pattern") &&
      !schema.contains("format") && (min != schema.end() || max != schema.end()) &&
      (min == schema.end() || min->is_number_unsigned()) &&
      (max == schema.end() || max->is_number_unsigned())) {
    const uint64_t lo = min == schema.end() ? 0 : min->get<uint64_t>();
    const std::string hi = max == schema.end() ? "" : std::to_string(max->get<uint64_t>());
    schema["pattern"] = absl::StrCat("^.{", lo, ",", hi, "}$");
    schema.erase("minLength");
    schema.erase("maxLength");
  }
  ForEachSubschema(schema, "", [](nlohmann::ordered_json& sub, const std::string&) {
    BoundStringsAsPatterns(sub);
  });
}

std::string SchemaForXgrammar(const std::string& text) {
  // Ordered: XGrammar generates properties in the schema's order, which a sorted copy would
  // change.
  nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return text;  // XGrammar reports it
  BoundStringsAsPatterns(schema);
  return schema.dump();
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Grammar::Grammar(std::unique_ptr<xgrammar::GrammarMatcher> matcher, int32_t vocab_size,
                 std::vector<int32_t> stop_token_ids)
    : matcher_(std::move(matcher)),
      vocab_size_(vocab_size),
      stop_token_ids_(std::move(stop_token_ids)) {}

Grammar::~Grammar() = default;

bool Grammar::AcceptTokens(std::span<const int32_t> tokens) {
  for (int32_t token : tokens) {
    if (token < 0 || token >= vocab_size_ || !matcher_->AcceptToken(token)) return false;
    ++num_accepted_tokens_;
  }
  return true;
}

void Grammar::Rollback(int32_t num_tokens) {
  if (num_tokens <= 0) return;
  matcher_->Rollback(num_tokens);
  num_accepted_tokens_ -= num_tokens;
}

void Grammar::FillBitmask(std::span<int32_t> row) { FillRow(*matcher_, row); }

bool Grammar::IsTerminated() const { return matcher_->IsTerminated(); }

bool Grammar::OnlyStopAllowed(std::span<int32_t> row) {
  if (matcher_->IsTerminated() || !matcher_->IsCompleted()) return false;
  FillBitmask(row);
  for (int32_t stop : stop_token_ids_) {
    if (stop >= 0 && stop / 32 < static_cast<int32_t>(row.size())) {
      row[static_cast<size_t>(stop / 32)] &= ~static_cast<int32_t>(1u << (stop % 32));
    }
  }
  for (int32_t word : row) {
    if (word != 0) return false;
  }
  return true;
}

XgrammarBackend::XgrammarBackend(std::unique_ptr<xgrammar::GrammarCompiler> compiler,
                                 int32_t vocab_size, std::vector<int32_t> stop_token_ids)
    : compiler_(std::move(compiler)),
      vocab_size_(vocab_size),
      stop_token_ids_(std::move(stop_token_ids)) {}

XgrammarBackend::~XgrammarBackend() = default;

absl::StatusOr<std::unique_ptr<XgrammarBackend>> XgrammarBackend::Create(
    const std::filesystem::path& model_dir, int32_t vocab_size,
    std::vector<int32_t> stop_token_ids) {
  auto tokenizer = frontend::Tokenizer::Load(model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  auto tokenizer_json = ReadFile(model_dir / "tokenizer.json");
  if (!tokenizer_json.ok()) return tokenizer_json.status();
  const int32_t tokenizer_vocab = (*tokenizer)->vocab_size();
  if (vocab_size < tokenizer_vocab) vocab_size = tokenizer_vocab;
  std::vector<std::string> encoded_vocab(static_cast<size_t>(tokenizer_vocab));
  // A special added token (<|eot_id|>, <|im_end|>) is "" for XGrammar, which then never allows
  // it inside the grammar: its byte-level spelling would otherwise read as the literal text
  // "<|eot_id|>", valid inside a JSON string, and the request would stop on it mid-string.
  for (int32_t id = 0; id < tokenizer_vocab; ++id) {
    if (!(*tokenizer)->IsSpecial(id)) {
      encoded_vocab[static_cast<size_t>(id)] = (*tokenizer)->IdToToken(id).value_or("");
    }
  }
  if (const std::optional<int32_t> eos = (*tokenizer)->eos_token_id();
      eos.has_value() &&
      std::find(stop_token_ids.begin(), stop_token_ids.end(), *eos) == stop_token_ids.end()) {
    stop_token_ids.push_back(*eos);
  }
  try {
    const nlohmann::json metadata = nlohmann::json::parse(
        xgrammar::TokenizerInfo::DetectMetadataFromHF(*tokenizer_json), nullptr, false);
    if (metadata.is_discarded()) {
      return absl::InvalidArgumentError("XGrammar could not read tokenizer.json's metadata");
    }
    const auto vocab_type = static_cast<xgrammar::VocabType>(metadata.value("vocab_type", 0));
    const bool add_prefix_space = metadata.value("add_prefix_space", false);
    xgrammar::TokenizerInfo info(encoded_vocab, vocab_type, vocab_size,
                                 std::vector<int32_t>(stop_token_ids), add_prefix_space);
    // Our compile cache (StructuredOutputManager) holds the compiled grammars; XGrammar's own
    // cache would hold a second copy. One compile thread per job: the manager runs jobs in
    // parallel.
    auto compiler = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/1,
                                                                /*cache_enabled=*/false);
    return std::unique_ptr<XgrammarBackend>(
        new XgrammarBackend(std::move(compiler), vocab_size, std::move(stop_token_ids)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("XGrammar could not read the tokenizer in ",
                                                   model_dir.string(), ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<XgrammarBackend>> XgrammarBackend::CreateFromVocab(
    const std::vector<std::string>& encoded_vocab, bool byte_level, int32_t vocab_size,
    std::vector<int32_t> stop_token_ids) {
  try {
    vocab_size = std::max(vocab_size, static_cast<int32_t>(encoded_vocab.size()));
    xgrammar::TokenizerInfo info(
        encoded_vocab, byte_level ? xgrammar::VocabType::BYTE_LEVEL : xgrammar::VocabType::RAW,
        vocab_size, std::vector<int32_t>(stop_token_ids));
    auto compiler = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/1,
                                                                /*cache_enabled=*/false);
    return std::unique_ptr<XgrammarBackend>(
        new XgrammarBackend(std::move(compiler), vocab_size, std::move(stop_token_ids)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("XGrammar could not read the vocabulary: ", XgrammarMessage(e.what())));
  }
}

absl::StatusOr<std::shared_ptr<const xgrammar::CompiledGrammar>> XgrammarBackend::Compile(
    const GrammarSpec& spec) const {
  try {
    xgrammar::CompiledGrammar compiled = [&] {
      switch (spec.kind) {
        case ConstraintKind::kJson:
          return compiler_->CompileJSONSchema(SchemaForXgrammar(spec.text), spec.any_whitespace);
        case ConstraintKind::kJsonObject:
          return compiler_->CompileJSONSchema(R"({"type": "object"})", spec.any_whitespace);
        case ConstraintKind::kRegex:
          return compiler_->CompileRegex(spec.text);
        case ConstraintKind::kChoice:
        case ConstraintKind::kGrammar:
          return compiler_->CompileGrammar(spec.text);
        case ConstraintKind::kStructuralTag:
          return compiler_->CompileStructuralTag(spec.text);
      }
      return compiler_->CompileBuiltinJSONGrammar();
    }();
    return std::make_shared<const xgrammar::CompiledGrammar>(std::move(compiled));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "structured outputs ", ConstraintKindName(spec.kind), ": ", XgrammarMessage(e.what())));
  }
}

std::unique_ptr<Grammar> XgrammarBackend::MakeGrammar(const xgrammar::CompiledGrammar& compiled,
                                                      std::optional<int32_t> eos_token_id) const {
  // Every token that may end the request ends a complete grammar: the model's stop tokens and
  // the request's EOS.
  std::vector<int32_t> stops = stop_token_ids_;
  if (eos_token_id.has_value() &&
      std::find(stops.begin(), stops.end(), *eos_token_id) == stops.end()) {
    stops.push_back(*eos_token_id);
  }
  auto matcher = std::make_unique<xgrammar::GrammarMatcher>(
      compiled, std::vector<int>(stops.begin(), stops.end()));
  return std::unique_ptr<Grammar>(new Grammar(std::move(matcher), vocab_size_, std::move(stops)));
}

size_t XgrammarBackend::MemorySize(const xgrammar::CompiledGrammar& compiled) {
  return compiled.MemorySizeBytes();
}

}  // namespace vllm::structured_output
