// vLLM 0.33's file and prefix datasets for `vllm-launch bench serve`: `sharegpt` (a JSON file of
// conversations), `custom` (a JSON-lines file of prompts, chat template applied client-side)
// and `prefix_repetition` (synthetic prompts sharing a few prefixes), with vLLM's filters,
// shuffles and oversampling (vllm/benchmarks/datasets/datasets.py). The shuffles and the
// oversampling draw from Python's `random` (PyRandom below, bit for bit), so a file and a seed
// give the same prompts, in the same order, as vLLM's. Pure functions of their inputs;
// thread-compatible.
#ifndef VLLM_BENCH_SERVE_DATASET_FILES_H_
#define VLLM_BENCH_SERVE_DATASET_FILES_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/dataset.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
class Tokenizer;
}  // namespace vllm::frontend

namespace vllm::bench_serve {

// Python's `random` module (Mersenne Twister MT19937 seeded by init_by_array as
// `random.seed(int)`), for the draws vLLM's datasets make with it. Same seed, same numbers as
// CPython 3.
class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);
  // random.getrandbits(32).
  uint32_t NextU32();
  // random._randbelow(n) for 0 < n < 2^32 (rejection sampling on bit_length(n) bits).
  uint32_t Below(uint32_t n);
  // random.shuffle(items).
  template <typename T>
  void Shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i-- > 1;) {
      std::swap(items[i], items[Below(static_cast<uint32_t>(i + 1))]);
    }
  }

 private:
  std::array<uint32_t, 624> state_{};
  size_t index_ = 624;
};

// Options shared by the file datasets (vLLM's --num-prompts, --seed, --disable-shuffle,
// --no-oversample).
struct FileDatasetOptions {
  std::string path;
  int num_prompts = 1000;
  uint64_t seed = 0;
  bool disable_shuffle = false;
  bool no_oversample = false;
};

// vLLM's ShareGPTDataset: a JSON array of entries; those with a "conversations" list of at
// least two turns are kept, shuffled (random.seed(seed); random.shuffle), and walked in order:
// turn 0's "value" is the prompt, turn 1's the completion; both are tokenized (special tokens
// added, as HF's tokenizer(text)); an entry is skipped when the prompt has fewer than 4 tokens
// or more than 1024, the output (the completion's token count, or `output_len` when given)
// fewer than 4 (not checked with `output_len`), or prompt + output more than 2048. Stops at
// `num_prompts`, then oversamples (random.seed(seed); random.choice) unless `no_oversample`.
// NotFound when the file cannot be read; InvalidArgument when it is not such JSON, a turn's
// value is not a string, or no entry passes.
[[nodiscard]] absl::StatusOr<std::vector<SampleRequest>> LoadShareGptDataset(
    const FileDatasetOptions& options, const frontend::Tokenizer& tokenizer,
    std::optional<int> output_len);

// vLLM's CustomDataset: a `.jsonl` file (other names are refused, as vLLM), one JSON object per
// non-empty line with a string "prompt" and, optionally, "output_tokens"; shuffled as ShareGPT.
// Every request gets `output_len`, or with -1 its line's "output_tokens" (required then). With
// `apply_chat_template` the prompt becomes the tokenizer's chat template rendered for one user
// message with the generation prompt and the variables of `chat_template_kwargs` (a JSON
// object, vLLM's --chat-template-kwargs; null for none) (vLLM's default; --skip-chat-template
// turns it off);
// prompt_len is the token count of the final prompt (special tokens added), or 0 (the server's
// usage) without a tokenizer. Oversampled as ShareGPT.
[[nodiscard]] absl::StatusOr<std::vector<SampleRequest>> LoadCustomDataset(
    const FileDatasetOptions& options, const frontend::Tokenizer* tokenizer, int output_len,
    bool apply_chat_template, const nlohmann::ordered_json& chat_template_kwargs = nullptr);

// vLLM's PrefixRepetitionRandomDataset (--prefix-repetition-*): `num_prefixes` prefixes of
// `prefix_len` random token ids, each followed by `num_prompts / num_prefixes` suffixes of
// `suffix_len` ids (each part decoded and re-encoded to its length, as vLLM), the prompt the
// decoded concatenation; then shuffled (Python's random, from `seed`) unless `disable_shuffle`.
// Ids are uniform over the whole vocabulary, as vLLM's np.random.randint (drawn here from a
// generator seeded with `seed`, not numpy's). InvalidArgument when num_prompts < num_prefixes
// or a length is negative.
struct PrefixRepetitionOptions {
  int num_prompts = 1000;
  int prefix_len = 256;
  int suffix_len = 256;
  int num_prefixes = 10;
  int output_len = 128;
  uint64_t seed = 0;
  bool disable_shuffle = false;
};
[[nodiscard]] absl::StatusOr<std::vector<SampleRequest>> SamplePrefixRepetitionRequests(
    const PrefixRepetitionOptions& options, const frontend::Tokenizer& tokenizer);

// vLLM's gen_prompt_decode_to_target_len: decodes `ids`, re-encodes the text (no special
// tokens), and while the count differs from `target` (at most 10 times) cuts the ids or extends
// them with `draw_id()`, decoding again. Returns the last text and its ids.
struct FittedPrompt {
  std::string text;
  std::vector<int32_t> ids;
};
FittedPrompt FitDecodedPrompt(const frontend::Tokenizer& tokenizer, std::vector<int32_t> ids,
                              size_t target, const std::function<int32_t()>& draw_id);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_DATASET_FILES_H_
