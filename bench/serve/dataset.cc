#include "bench/serve/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/serve/dataset_files.h"
#include "frontend/tokenizer/tokenizer.h"

namespace vllm::bench_serve {
namespace {

// Uniform integer in [lo, hi]. Written out instead of std::uniform_int_distribution so the
// prompts for a seed are the same with every standard library.
int64_t UniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng() % span);
}

// Parses `text` as one schema (a JSON object); `where` names it in the error.
absl::StatusOr<std::shared_ptr<const nlohmann::json>> ParseSchema(const std::string& text,
                                                                  const std::string& where) {
  nlohmann::json schema = nlohmann::json::parse(text, nullptr, false);
  if (schema.is_discarded() || !schema.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--json-schema-path: ", where, " is not a JSON object"));
  }
  return std::make_shared<const nlohmann::json>(std::move(schema));
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat("--json-schema-path: cannot read ", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status LoadJsonLines(const std::filesystem::path& path, JsonSchemaList& schemas) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(absl::StrCat("--json-schema-path: cannot read ", path.string()));
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    auto schema = ParseSchema(line, absl::StrCat(path.string(), ":", line_number));
    if (!schema.ok()) return schema.status();
    schemas.push_back(*std::move(schema));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<SampleRequest>> SampleRandomRequests(
    const RandomDatasetOptions& options) {
  const double output_ratio = options.output_range_ratio.value_or(options.range_ratio);
  if (!(options.range_ratio >= 0.0 && options.range_ratio < 1.0) ||
      !(output_ratio >= 0.0 && output_ratio < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--random-range-ratio must be in [0, 1), got ",
                                                   options.range_ratio, " and ", output_ratio));
  }
  if (options.tokenizer == nullptr &&
      (options.vocab_min < 0 || options.vocab_max <= options.vocab_min)) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty token-id range [", options.vocab_min, ", ", options.vocab_max, ")"));
  }
  if (options.input_len <= 0 || options.output_len <= 0 || options.num_prompts < 0 ||
      options.prefix_len < 0) {
    return absl::InvalidArgumentError(
        "--random-input-len and --random-output-len must be positive, --num-prompts and "
        "--random-prefix-len >= 0");
  }
  const frontend::Tokenizer* tokenizer = options.tokenizer;
  std::vector<int32_t> allowed;  // the tokenizer's ids less its special ones
  int num_special = 0;           // vLLM's tokenizer.num_special_tokens_to_add()
  if (tokenizer != nullptr) {
    for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
      if (!tokenizer->IsSpecial(id)) allowed.push_back(id);
    }
    if (allowed.empty()) return absl::InvalidArgumentError("the tokenizer has no ordinary token");
    absl::StatusOr<std::vector<int32_t>> added = tokenizer->Encode("", true);
    if (added.ok()) num_special = static_cast<int>(added->size());
  }
  // As vLLM's get_sampling_params: [floor(len * (1 - r)), ceil(len * (1 + r))], the input
  // length less the special tokens, the output length at least 1.
  const int real_input_len = std::max(0, options.input_len - num_special);
  const int64_t input_low =
      static_cast<int64_t>(std::floor(real_input_len * (1.0 - options.range_ratio)));
  const int64_t input_high =
      static_cast<int64_t>(std::ceil(real_input_len * (1.0 + options.range_ratio)));
  const int64_t output_low = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(options.output_len * (1.0 - output_ratio))));
  const int64_t output_high = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(options.output_len * (1.0 + output_ratio))));
  if (options.prefix_len + input_low < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-input-len is too small: with the tokenizer's ", num_special,
                     " special tokens and range ratio ", options.range_ratio,
                     " a prompt (prefix + sampled) can have no token"));
  }
  std::mt19937_64 rng(options.seed);
  const std::function<int32_t()> draw_any = [&] {  // vLLM's rng.integers(0, vocab_size)
    return static_cast<int32_t>(UniformInt(rng, 0, tokenizer->vocab_size() - 1));
  };
  const auto draw_allowed = [&] {
    if (allowed.empty()) {
      return static_cast<int32_t>(UniformInt(rng, options.vocab_min, options.vocab_max - 1));
    }
    return allowed[UniformInt(rng, 0, static_cast<int64_t>(allowed.size()) - 1)];
  };
  std::vector<int32_t> prefix(options.prefix_len);
  for (int32_t& id : prefix) id = draw_allowed();
  if (tokenizer != nullptr && !prefix.empty()) {
    const size_t target = prefix.size();
    prefix = FitDecodedPrompt(*tokenizer, std::move(prefix), target, draw_any).ids;
  }
  std::vector<SampleRequest> requests(options.num_prompts);
  for (size_t index = 0; index < requests.size(); ++index) {
    SampleRequest& request = requests[index];
    const int64_t input_len = UniformInt(rng, input_low, input_high);
    request.expected_output_len = static_cast<int>(UniformInt(rng, output_low, output_high));
    request.prompt_token_ids = prefix;
    if (tokenizer == nullptr) {
      for (int64_t i = 0; i < input_len; ++i) request.prompt_token_ids.push_back(draw_allowed());
      request.prompt_len = static_cast<int>(request.prompt_token_ids.size());
      continue;
    }
    // vLLM: allowed[(offset + index + arange(input_len)) % len(allowed)], offset uniform in
    // [0, vocab_size).
    const uint64_t offset =
        static_cast<uint64_t>(UniformInt(rng, 0, tokenizer->vocab_size() - 1)) + index;
    for (int64_t i = 0; i < input_len; ++i) {
      request.prompt_token_ids.push_back(allowed[(offset + i) % allowed.size()]);
    }
    FittedPrompt fitted =
        FitDecodedPrompt(*tokenizer, std::move(request.prompt_token_ids),
                         static_cast<size_t>(options.prefix_len + input_len), draw_any);
    request.prompt_token_ids.clear();
    request.prompt = std::move(fitted.text);
    request.prompt_len = static_cast<int>(fitted.ids.size());
  }
  return requests;
}

absl::StatusOr<std::vector<SampleRequest>> LoadPromptsFile(const std::string& path, int num_prompts,
                                                           int default_output_len) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --dataset-path ", path));
  std::vector<SampleRequest> prompts;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const std::string stripped(absl::StripAsciiWhitespace(line));
    if (stripped.empty()) continue;
    SampleRequest request;
    request.expected_output_len = default_output_len;
    if (stripped.front() == '{') {
      const nlohmann::json object = nlohmann::json::parse(stripped, nullptr, false);
      if (object.is_discarded() || !object.is_object() || !object.contains("prompt") ||
          !object["prompt"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", line_number, ": expected a JSON object with a string \"prompt\""));
      }
      request.prompt = object["prompt"].get<std::string>();
      if (object.contains("output_len") && object["output_len"].is_number_integer()) {
        request.expected_output_len = object["output_len"].get<int>();
      }
    } else {
      request.prompt = stripped;
    }
    prompts.push_back(std::move(request));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " has no prompts"));
  std::vector<SampleRequest> requests;
  requests.reserve(num_prompts);
  for (int i = 0; i < num_prompts; ++i) requests.push_back(prompts[i % prompts.size()]);
  return requests;
}

absl::StatusOr<JsonSchemaList> LoadJsonSchemas(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_directory = fs::is_directory(path, ec);
  JsonSchemaList schemas;
  if (is_directory) {
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".json" && entry.is_regular_file()) {
        files.push_back(entry.path());
      }
    }
    if (ec) {
      return absl::NotFoundError(
          absl::StrCat("--json-schema-path: cannot list ", path, ": ", ec.message()));
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      absl::StatusOr<std::string> text = ReadFile(file);
      if (!text.ok()) return text.status();
      auto schema = ParseSchema(*text, file.string());
      if (!schema.ok()) return schema.status();
      schemas.push_back(*std::move(schema));
    }
  } else if (absl::EndsWith(path, ".jsonl")) {
    if (absl::Status status = LoadJsonLines(path, schemas); !status.ok()) return status;
  } else {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return text.status();
    auto schema = ParseSchema(*text, path);
    if (!schema.ok()) return schema.status();
    schemas.push_back(*std::move(schema));
  }
  if (schemas.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--json-schema-path: no schema in ", path));
  }
  return schemas;
}

absl::Status AssignJsonSchemas(const JsonSchemaList& schemas, double ratio, uint64_t seed,
                               std::vector<SampleRequest>& requests) {
  if (!(ratio >= 0.0 && ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--structured-output-ratio must be in [0, 1], got ", ratio));
  }
  if (schemas.empty()) return absl::InvalidArgumentError("no JSON schema to assign");
  // As vLLM: random.sample(range(n), int(n * ratio)), here a seeded partial Fisher-Yates.
  const size_t count = static_cast<size_t>(static_cast<double>(requests.size()) * ratio);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < count; ++i) {
    const size_t j = static_cast<size_t>(
        UniformInt(rng, static_cast<int64_t>(i), static_cast<int64_t>(order.size() - 1)));
    std::swap(order[i], order[j]);
    requests[order[i]].json_schema = schemas[order[i] % schemas.size()];
  }
  return absl::OkStatus();
}

}  // namespace vllm::bench_serve
