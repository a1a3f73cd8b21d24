// Fuzzes frontend::Tokenizer::FromJson on a tokenizer.json (optionally followed by a NUL
// byte and a tokenizer_config.json), then uses what loaded: Encode of a fixed text plus the
// input's last bytes, Decode of ids taken from the input (in and out of range), TokenToId /
// IdToToken, and the incremental detokenizer. Invariants: no crash, throw or leak, no input
// over -timeout or -rss_limit_mb (a hostile tokenizer.json must be refused, not loaded at any
// cost); FromJson fails only with InvalidArgument; Encode returns ids inside the vocabulary;
// Decode and the detokenizer's text are valid UTF-8; the detokenizer's deltas plus Flush()
// equal its text().
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/engine/detokenizer.h"
#include "frontend/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace vllm::fuzz {
namespace {

constexpr size_t kTextTail = 64;  // input bytes appended to the fixed text
constexpr size_t kMaxIds = 64;

void Exercise(const frontend::Tokenizer& tokenizer, std::string_view input) {
  const int32_t vocab = tokenizer.vocab_size();
  std::string text = "Hello, world! 1234 caf\xC3\xA9 \xE2\x9C\x93 <s>";
  text.append(input.substr(input.size() - std::min(input.size(), kTextTail)));
  for (bool special : {false, true}) {
    auto ids = tokenizer.Encode(text, special);
    if (!ids.ok()) {
      FUZZ_CHECK(ids.status().code() == absl::StatusCode::kInternal,
                 "Encode failed with " + ids.status().ToString());
      continue;
    }
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < vocab, "Encode id outside the vocab");
  }
  // Ids from the input's first bytes, two per id, spread over [-2, vocab + 2).
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < input.size() && ids.size() < kMaxIds; i += 2) {
    const uint32_t v = static_cast<uint8_t>(input[i]) | static_cast<uint8_t>(input[i + 1]) << 8;
    ids.push_back(static_cast<int32_t>(v % (static_cast<uint32_t>(vocab) + 4)) - 2);
  }
  for (bool skip : {false, true}) {
    const std::string decoded = tokenizer.Decode(ids, skip);
    FUZZ_CHECK(IsWellFormedUtf8(decoded), "Decode returned ill-formed UTF-8");
  }
  for (int32_t id : ids) {
    auto token = tokenizer.IdToToken(id);
    if (token.has_value()) (void)tokenizer.TokenToId(*token);
  }
  frontend::IncrementalDetokenizer detok(tokenizer, {}, frontend::DetokenizerOptions{});
  std::string streamed = detok.Append(ids);
  streamed += detok.Flush();
  FUZZ_CHECK(streamed == detok.text(), "detokenizer deltas differ from its text");
  FUZZ_CHECK(IsWellFormedUtf8(detok.text()), "detokenizer text is ill-formed UTF-8");
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view input = fuzz::AsText(data, size);
  const auto [tokenizer_json, config_json] = fuzz::SplitAtNul(input);
  auto tokenizer = frontend::Tokenizer::FromJson(tokenizer_json, config_json);
  if (!tokenizer.ok()) {
    FUZZ_CHECK(tokenizer.status().code() == absl::StatusCode::kInvalidArgument,
               "FromJson failed with " + tokenizer.status().ToString());
    return 0;
  }
  fuzz::Exercise(**tokenizer, input);
  return 0;
}
