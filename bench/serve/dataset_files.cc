#include "bench/serve/dataset_files.h"

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "frontend/jinja/chat_template.h"
#include "frontend/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {
namespace {

constexpr size_t kN = 624;
// Dataset files are read whole; ShareGPT_V3 is ~0.7 GB.
constexpr uintmax_t kMaxDatasetBytes = uintmax_t{2} << 30;

// vLLM's is_valid_sequence with its defaults (min_len 4, max_prompt_len 1024, max_total_len
// 2048).
bool IsValidSequence(size_t prompt_len, size_t output_len, bool skip_min_output_len_check) {
  constexpr size_t kMinLen = 4, kMaxPromptLen = 1024, kMaxTotalLen = 2048;
  return !(prompt_len < kMinLen || (!skip_min_output_len_check && output_len < kMinLen) ||
           prompt_len > kMaxPromptLen || prompt_len + output_len > kMaxTotalLen);
}

absl::StatusOr<std::string> ReadDatasetFile(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read --dataset-path ", path));
  if (size > kMaxDatasetBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-path ", path, " is larger than 2 GiB (", size, " bytes)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --dataset-path ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// vLLM's maybe_oversample_requests: random.seed(seed), then random.choice over the sampled
// requests until there are `num_prompts`.
absl::Status Oversample(const FileDatasetOptions& options, std::vector<SampleRequest>& requests) {
  if (requests.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-path ", options.path, ": no prompt passes the dataset's filters"));
  }
  const size_t wanted = static_cast<size_t>(std::max(options.num_prompts, 0));
  if (options.no_oversample || requests.size() >= wanted) return absl::OkStatus();
  PyRandom random(options.seed);
  const size_t sampled = requests.size();
  while (requests.size() < wanted) {
    requests.push_back(requests[random.Below(static_cast<uint32_t>(sampled))]);
  }
  return absl::OkStatus();
}

// int(item["output_tokens"]) for the JSON value types Python's int() takes.
std::optional<int> PythonInt(const nlohmann::json& value) {
  if (value.is_number_integer()) return value.get<int>();
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (!std::isfinite(number) || std::abs(number) > 2e9) return std::nullopt;
    return static_cast<int>(number);  // int() truncates toward zero
  }
  int parsed = 0;
  if (value.is_string() &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(value.get<std::string>()), &parsed)) {
    return parsed;
  }
  return std::nullopt;
}

}  // namespace

PyRandom::PyRandom(uint64_t seed) {
  // random.seed(n): init_by_array with the 32-bit words of n, least significant first ([0] for
  // zero).
  std::vector<uint32_t> key = {static_cast<uint32_t>(seed)};
  if ((seed >> 32) != 0) key.push_back(static_cast<uint32_t>(seed >> 32));
  state_[0] = 19650218u;
  for (size_t i = 1; i < kN; ++i) {
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  size_t i = 1, j = 0;
  for (size_t k = std::max(kN, key.size()); k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] +
                static_cast<uint32_t>(j);
    if (++i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
    if (++j >= key.size()) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) -
                static_cast<uint32_t>(i);
    if (++i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
  }
  state_[0] = 0x80000000u;
  index_ = kN;
}

uint32_t PyRandom::NextU32() {
  constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
  constexpr size_t kM = 397;
  if (index_ >= kN) {
    for (size_t k = 0; k < kN; ++k) {
      const uint32_t y = (state_[k] & kUpper) | (state_[(k + 1) % kN] & kLower);
      state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) != 0 ? kMatrixA : 0u);
    }
    index_ = 0;
  }
  uint32_t y = state_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint32_t PyRandom::Below(uint32_t n) {
  if (n <= 1) return 0;
  const int bits = std::bit_width(n);
  uint32_t r = NextU32() >> (32 - bits);
  while (r >= n) r = NextU32() >> (32 - bits);
  return r;
}

FittedPrompt FitDecodedPrompt(const frontend::Tokenizer& tokenizer, std::vector<int32_t> ids,
                              size_t target, const std::function<int32_t()>& draw_id) {
  constexpr int kMaxRetries = 10;
  FittedPrompt fitted;
  for (int retry = 0;; ++retry) {
    fitted.text = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
    absl::StatusOr<std::vector<int32_t>> encoded =
        tokenizer.Encode(fitted.text, /*add_special_tokens=*/false);
    if (!encoded.ok()) break;
    ids = *std::move(encoded);
    if (retry >= kMaxRetries || ids.size() == target) break;
    if (ids.size() > target) {
      ids.resize(target);
    } else {
      while (ids.size() < target) ids.push_back(draw_id());
    }
  }
  fitted.ids = std::move(ids);
  return fitted;
}

absl::StatusOr<std::vector<SampleRequest>> LoadShareGptDataset(const FileDatasetOptions& options,
                                                               const frontend::Tokenizer& tokenizer,
                                                               std::optional<int> output_len) {
  absl::StatusOr<std::string> text = ReadDatasetFile(options.path);
  if (!text.ok()) return text.status();
  nlohmann::json data = nlohmann::json::parse(*text, nullptr, false);
  text->clear();
  if (data.is_discarded() || !data.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("--dataset-path ", options.path,
                                                   ": expected a JSON array of ShareGPT entries"));
  }
  // Entries with "conversations" of at least two turns, shuffled with Python's random.
  std::vector<const nlohmann::json*> entries;
  for (const nlohmann::json& entry : data) {
    if (!entry.is_object()) continue;
    const auto turns = entry.find("conversations");
    if (turns != entry.end() && turns->is_array() && turns->size() >= 2) {
      entries.push_back(&*turns);
    }
  }
  PyRandom random(options.seed);
  if (!options.disable_shuffle) random.Shuffle(entries);
  std::vector<SampleRequest> requests;
  for (size_t e = 0; e < entries.size() && static_cast<int>(requests.size()) < options.num_prompts;
       ++e) {
    const nlohmann::json& turns = *entries[e];
    const auto value = [&](size_t turn) -> const nlohmann::json* {
      if (!turns[turn].is_object()) return nullptr;
      const auto it = turns[turn].find("value");
      return it != turns[turn].end() && it->is_string() ? &*it : nullptr;
    };
    const nlohmann::json* prompt = value(0);
    const nlohmann::json* completion = value(1);
    if (prompt == nullptr || completion == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dataset-path ", options.path, ": a conversation turn has no string \"value\""));
    }
    SampleRequest request;
    request.prompt = prompt->get<std::string>();
    absl::StatusOr<std::vector<int32_t>> prompt_ids = tokenizer.Encode(request.prompt, true);
    if (!prompt_ids.ok()) return prompt_ids.status();
    size_t new_output_len = 0;
    if (output_len.has_value()) {
      new_output_len = static_cast<size_t>(std::max(*output_len, 0));
    } else {
      absl::StatusOr<std::vector<int32_t>> completion_ids =
          tokenizer.Encode(completion->get<std::string>(), true);
      if (!completion_ids.ok()) return completion_ids.status();
      new_output_len = completion_ids->size();
    }
    if (!IsValidSequence(prompt_ids->size(), new_output_len, output_len.has_value())) continue;
    request.prompt_len = static_cast<int>(prompt_ids->size());
    request.expected_output_len = static_cast<int>(new_output_len);
    requests.push_back(std::move(request));
  }
  if (absl::Status status = Oversample(options, requests); !status.ok()) return status;
  return requests;
}

absl::StatusOr<std::vector<SampleRequest>> LoadCustomDataset(const FileDatasetOptions& options,
                                                             const frontend::Tokenizer* tokenizer,
                                                             int output_len,
                                                             bool apply_chat_template,
                                                             const nlohmann::ordered_json& kwargs) {
  if (!absl::EndsWith(options.path, ".jsonl")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset-name custom: only JSONL files (*.jsonl) are supported, as vLLM; got ",
        options.path));
  }
  std::optional<frontend::ChatTemplate> chat_template;
  if (apply_chat_template) {
    if (tokenizer == nullptr || tokenizer->chat_template().empty()) {
      return absl::InvalidArgumentError(
          "--dataset-name custom applies the model's chat template to each prompt (as vLLM): "
          "give --tokenizer DIR with a chat template, or --skip-chat-template");
    }
    absl::StatusOr<frontend::ChatTemplate> parsed =
        frontend::ChatTemplate::Parse(tokenizer->chat_template());
    if (!parsed.ok()) return parsed.status();
    chat_template = *std::move(parsed);
  }
  absl::StatusOr<std::string> text = ReadDatasetFile(options.path);
  if (!text.ok()) return text.status();
  std::vector<nlohmann::json> rows;
  std::istringstream lines(*text);
  std::string line;
  for (int line_number = 1; std::getline(lines, line); ++line_number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object() || !row.contains("prompt") ||
        !row["prompt"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.path, ":", line_number, ": expected a JSON object with a string \"prompt\""));
    }
    rows.push_back(std::move(row));
  }
  PyRandom random(options.seed);
  if (!options.disable_shuffle) random.Shuffle(rows);
  std::vector<SampleRequest> requests;
  for (const nlohmann::json& row : rows) {
    if (static_cast<int>(requests.size()) >= options.num_prompts) break;
    SampleRequest request;
    request.prompt = row["prompt"].get<std::string>();
    request.expected_output_len = output_len;
    if (output_len == -1) {
      const auto tokens = row.find("output_tokens");
      std::optional<int> parsed = tokens == row.end() ? std::nullopt : PythonInt(*tokens);
      if (!parsed.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("--custom-output-len -1: every line of ",
                                                       options.path,
                                                       " needs an integer \"output_tokens\""));
      }
      request.expected_output_len = *parsed;
    }
    if (chat_template.has_value()) {
      const nlohmann::ordered_json messages =
          nlohmann::ordered_json::array({{{"role", "user"}, {"content", request.prompt}}});
      absl::StatusOr<std::string> rendered = chat_template->RenderJson(
          messages, nullptr, kwargs.is_null() ? nlohmann::ordered_json::object() : kwargs,
          /*add_generation_prompt=*/true, tokenizer->bos_token(), tokenizer->eos_token());
      if (!rendered.ok()) return rendered.status();
      request.prompt = *std::move(rendered);
    }
    if (tokenizer != nullptr) {
      absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(request.prompt, true);
      if (!ids.ok()) return ids.status();
      request.prompt_len = static_cast<int>(ids->size());
    }
    requests.push_back(std::move(request));
  }
  if (absl::Status status = Oversample(options, requests); !status.ok()) return status;
  return requests;
}

absl::StatusOr<std::vector<SampleRequest>> SamplePrefixRepetitionRequests(
    const PrefixRepetitionOptions& options, const frontend::Tokenizer& tokenizer) {
  if (options.num_prefixes <= 0 || options.prefix_len < 0 || options.suffix_len < 0 ||
      options.output_len <= 0) {
    return absl::InvalidArgumentError(
        "--prefix-repetition-num-prefixes and --prefix-repetition-output-len must be positive, "
        "--prefix-repetition-prefix-len and --prefix-repetition-suffix-len >= 0");
  }
  const int per_prefix = options.num_prompts / options.num_prefixes;
  if (per_prefix <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_requests (", options.num_prompts, ") must be greater than or equal to num_prefixes (",
        options.num_prefixes, ")"));
  }
  std::mt19937_64 rng(options.seed);
  const uint64_t vocab = static_cast<uint64_t>(std::max(tokenizer.vocab_size(), 1));
  const std::function<int32_t()> draw_id = [&] { return static_cast<int32_t>(rng() % vocab); };
  const auto exact_length = [&](int length) {
    std::vector<int32_t> ids(static_cast<size_t>(length));
    for (int32_t& id : ids) id = draw_id();
    return FitDecodedPrompt(tokenizer, std::move(ids), static_cast<size_t>(length), draw_id).ids;
  };
  std::vector<SampleRequest> requests;
  for (int p = 0; p < options.num_prefixes; ++p) {
    const std::vector<int32_t> prefix = exact_length(options.prefix_len);
    for (int s = 0; s < per_prefix; ++s) {
      std::vector<int32_t> combined = prefix;
      const std::vector<int32_t> suffix = exact_length(options.suffix_len);
      combined.insert(combined.end(), suffix.begin(), suffix.end());
      SampleRequest request;
      request.prompt = tokenizer.Decode(combined, /*skip_special_tokens=*/false);
      request.prompt_len = static_cast<int>(combined.size());
      request.expected_output_len = options.output_len;
      requests.push_back(std::move(request));
    }
  }
  if (!options.disable_shuffle) PyRandom(options.seed).Shuffle(requests);
  return requests;
}

}  // namespace vllm::bench_serve
