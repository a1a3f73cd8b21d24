// Generates from a model with the in-process engine, token ids in and out (the tokenizer
// arrives with the API server): one prompt per argument, ids separated by commas.
//
//   build/release/bin/llm_generate [--model DIR] [--max-tokens N] [--temperature T] IDS...
//
// Prints one line per prompt: the generated ids, comma-separated, then the finish reason.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "frontend/llm_engine.h"

int main(int argc, char** argv) {
  using namespace vllm;
  frontend::EngineArgs args;
  args.model = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";
  int32_t max_tokens = 32;
  double temperature = 0.0;
  std::vector<core::EngineCoreRequest> requests;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      args.model = argv[++i];
    } else if (a == "--max-tokens" && i + 1 < argc) {
      max_tokens = std::atoi(argv[++i]);
    } else if (a == "--temperature" && i + 1 < argc) {
      temperature = std::atof(argv[++i]);
    } else {
      core::EngineCoreRequest r;
      r.request_id = "prompt-" + std::to_string(requests.size());
      for (absl::string_view s : absl::StrSplit(a, ',', absl::SkipEmpty())) {
        int32_t id = 0;
        if (!absl::SimpleAtoi(s, &id)) {
          std::fprintf(stderr, "not a token id: '%s'\n", std::string(s).c_str());
          return 2;
        }
        r.prompt_token_ids.push_back(id);
      }
      requests.push_back(std::move(r));
    }
  }
  for (auto& r : requests) {
    r.sampling_params.max_tokens = max_tokens;
    r.sampling_params.temperature = temperature;
  }
  auto engine = frontend::LLMEngine::Create(args);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  auto outputs = (*engine)->Generate(std::move(requests));
  if (!outputs.ok()) {
    std::fprintf(stderr, "%s\n", outputs.status().ToString().c_str());
    return 1;
  }
  for (const auto& o : *outputs) {
    std::printf("%s %s\n", absl::StrJoin(o.output_token_ids, ",").c_str(),
                std::string(core::FinishReasonName(*o.finish_reason)).c_str());
  }
  return 0;
}
