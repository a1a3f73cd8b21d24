// Fuzzes the text path every prompt and every generated token takes, on real tokenizers
// loaded once: the bundled model's (models/kjv-llama-tiny) and the Llama 3, Qwen2,
// byte-fallback and SentencePiece-style (Llama 2, Metaspace) fixtures
// (tests/fixtures/tokenizer/). The first input byte holds the flags (the byte modulo the
// number of tokenizers picks one; bit 2 add_special_tokens, 3 skip_special_tokens, 4 a
// prompt for the detokenizer, 5 stop strings, 6-7 prompt length - 1); the rest is the text,
// and ids for Decode and the detokenizer are read from the same bytes.
// Invariants:
//   - Encode succeeds and returns ids inside the vocabulary;
//   - Decode of any ids (in or out of range) is valid UTF-8;
//   - byte-level tokenizers are lossless: Decode(Encode(text)) == text for valid UTF-8 text
//     (special tokens kept);
//   - the incremental detokenizer's deltas plus Flush() equal its text(), which is valid
//     UTF-8; with no prompt, no stop strings and ids whose decoding does not end inside a
//     character, text() == Decode(ids) (byte-level decoding is prefix-stable).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "frontend/engine/detokenizer.h"
#include "frontend/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace vllm::fuzz {
namespace {

struct Loaded {
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  bool byte_level = false;  // lossless and prefix-stable
};

std::vector<Loaded>& Tokenizers() {
  static std::vector<Loaded> all;
  return all;
}

void LoadAll() {
  const std::string root = VLLM_SOURCE_DIR;
  const struct {
    const char* dir;
    bool byte_level;
  } kDirs[] = {{"/models/kjv-llama-tiny", true},
               {"/tests/fixtures/tokenizer/llama3_bpe", true},
               {"/tests/fixtures/tokenizer/qwen2_bpe", true},
               {"/tests/fixtures/tokenizer/fallback_bpe", false},
               {"/tests/fixtures/tokenizer/llama2_sp", false},
               {"/tests/fixtures/tokenizer/metaspace_sp", false},
               {"/tests/fixtures/tokenizer/metaspace_split_sp", false}};
  for (const auto& d : kDirs) {
    auto t = frontend::Tokenizer::Load(root + d.dir);
    FUZZ_CHECK(t.ok(), std::string("cannot load ") + d.dir + ": " + t.status().ToString());
    Tokenizers().push_back(Loaded{*std::move(t), d.byte_level});
  }
}

// Ids for Decode and for the detokenizer; more would only repeat the same work.
constexpr size_t kMaxIds = 256;
constexpr size_t kMaxDetokenizerIds = 64;

// Ids read from the text's bytes, two per id, spread over [-2, vocab + 2).
std::vector<int32_t> IdsFrom(std::string_view bytes, int32_t vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bytes.size() && ids.size() < kMaxIds; i += 2) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) | static_cast<uint8_t>(bytes[i + 1]) << 8;
    ids.push_back(static_cast<int32_t>(v % (static_cast<uint32_t>(vocab) + 4)) - 2);
  }
  return ids;
}

void CheckDetokenizer(const Loaded& t, std::span<const int32_t> prompt,
                      std::span<const int32_t> ids, bool skip_special, bool with_stop) {
  frontend::DetokenizerOptions options;
  options.skip_special_tokens = skip_special;
  if (with_stop) options.stop = {"\n\n", "the", "\xC3\xA9"};
  frontend::IncrementalDetokenizer detok(*t.tokenizer, prompt, options);
  std::string streamed;
  // Steps of 1, 2, 3, ... ids, as a scheduler would deliver them.
  for (size_t at = 0, step = 1; at < ids.size(); at += step, ++step) {
    streamed += detok.Append(ids.subspan(at, std::min(step, ids.size() - at)));
  }
  streamed += detok.Flush();
  FUZZ_CHECK(streamed == detok.text(), "detokenizer deltas differ from its text");
  FUZZ_CHECK(IsWellFormedUtf8(detok.text()), "detokenizer text is ill-formed UTF-8");
  if (t.byte_level && prompt.empty() && !with_stop) {
    const std::string full = t.tokenizer->Decode(ids, skip_special);
    if (!full.ends_with(base::kReplacementChar)) {
      FUZZ_CHECK(detok.text() == full, "detokenizer text differs from Decode of all ids");
    }
  }
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vllm::fuzz::LoadAll();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const fuzz::Loaded& t = fuzz::Tokenizers()[flags % fuzz::Tokenizers().size()];
  const bool add_special = flags & 0x04;
  const bool skip_special = flags & 0x08;
  const std::string_view text = fuzz::AsText(data + 1, size - 1);
  const frontend::Tokenizer& tokenizer = *t.tokenizer;

  auto encoded = tokenizer.Encode(text, add_special);
  FUZZ_CHECK(encoded.ok(), "Encode failed: " + encoded.status().ToString());
  for (int32_t id : *encoded) {
    FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size(), "Encode id outside the vocab");
  }
  const std::string decoded = tokenizer.Decode(*encoded, skip_special);
  FUZZ_CHECK(fuzz::IsWellFormedUtf8(decoded), "Decode(Encode(text)) is ill-formed UTF-8");
  if (t.byte_level && !add_special && !skip_special && fuzz::IsWellFormedUtf8(text)) {
    FUZZ_CHECK(decoded == text, "Decode(Encode(text)) != text for a byte-level tokenizer");
  }

  const std::vector<int32_t> ids = fuzz::IdsFrom(text, tokenizer.vocab_size());
  FUZZ_CHECK(fuzz::IsWellFormedUtf8(tokenizer.Decode(ids, skip_special)),
             "Decode returned ill-formed UTF-8");
  // The detokenizer decodes twice per id: a prefix of the ids is enough.
  const std::span<const int32_t> some =
      std::span<const int32_t>(ids).first(std::min(ids.size(), fuzz::kMaxDetokenizerIds));
  const size_t prompt_len = (flags & 0x10) ? std::min<size_t>(some.size(), (flags >> 6) + 1) : 0;
  fuzz::CheckDetokenizer(t, some.first(prompt_len), some.subspan(prompt_len), skip_special,
                         /*with_stop=*/flags & 0x20);
  return 0;
}
