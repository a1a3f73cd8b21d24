// The reference fixtures (tests/fixtures/models/<name>/, made by tools/fixtures/make_reference.py):
// loading reference.json, greedy requests, and the model's last-position logits for a token
// sequence. Header-only: tests that include it link worker/ (and nlohmann_json) already.
#ifndef VLLM_TESTS_SUPPORT_FIXTURES_H_
#define VLLM_TESTS_SUPPORT_FIXTURES_H_

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/engine_core_types.h"
#include "nlohmann/json.hpp"
#include "worker/llama_model.h"

namespace vllm::testing {

// Parses a JSON file; throws (nlohmann) on a malformed one: fixtures are ours.
inline nlohmann::json ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

inline std::filesystem::path FixtureModels() {
  return std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";
}

// transformers' outputs for one fixture model.
struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<std::vector<float>> prompt_logits;  // last prompt position
  std::vector<std::vector<float>> final_logits;   // the step that produced greedy.back()
  int32_t max_new_tokens = 0;
};

// Throws (nlohmann) on a malformed file: the fixtures are ours, a bad one is a test bug.
inline Reference LoadReference(const std::filesystem::path& model_dir) {
  const nlohmann::json j = ReadJson(model_dir / "reference.json");
  Reference r;
  r.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  r.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
  r.prompt_logits = j.at("prompt_logits").get<std::vector<std::vector<float>>>();
  r.final_logits = j.at("final_logits").get<std::vector<std::vector<float>>>();
  r.max_new_tokens = j.at("max_new_tokens").get<int32_t>();
  return r;
}

// A greedy request that ignores EOS (the references generate a fixed number of tokens).
inline core::EngineCoreRequest GreedyRequest(const std::string& id, std::vector<int32_t> prompt,
                                             int32_t max_tokens) {
  core::EngineCoreRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.sampling_params.temperature = 0.0;
  r.sampling_params.max_tokens = max_tokens;
  r.sampling_params.ignore_eos = true;
  return r;
}

// Runs `model` on one sequence in a fresh cache and returns its last position's logits
// (empty if the forward pass failed).
inline std::vector<float> LastLogits(worker::LlamaModel& model,
                                     const std::vector<int32_t>& tokens) {
  constexpr int32_t kBlockSize = 16;
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlockSize - 1) / kBlockSize;
  absl::StatusOr<worker::KVCache> allocated = model.AllocateKVCache(num_blocks, kBlockSize);
  if (!allocated.ok()) return {};
  worker::KVCache& cache = *allocated;
  std::vector<int32_t> positions(n), block_table(num_blocks);
  std::vector<int64_t> slots(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = slots[i] = i;
  for (int32_t b = 0; b < num_blocks; ++b) block_table[b] = b;
  const int32_t query_start_loc[2] = {0, n};
  const int32_t seq_lens[1] = {n};
  const int32_t logits_index[1] = {n - 1};
  worker::ForwardBatch batch;
  batch.token_ids = tokens;
  batch.positions = positions;
  batch.slot_mapping = slots;
  batch.logits_indices = logits_index;
  batch.attention = {1, query_start_loc, seq_lens, block_table.data(), num_blocks, kBlockSize};
  std::vector<float> logits;
  if (!model.Forward(batch, cache, &logits).ok()) logits.clear();
  return logits;
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_FIXTURES_H_
