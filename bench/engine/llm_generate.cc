// Generates from a model with the in-process engine (LLMEngine, no server): the reference that
// tests compare the server's answers with.
//
//   build/release/bin/llm_generate [--model DIR] [--max-tokens N] [--temperature T] [--json]
//                                  [--prompt TEXT]... [--chat TEXT]... [IDS]...
//
// Prompts, in the order given:
//   IDS            token ids separated by commas, sent as they are;
//   --prompt TEXT  text tokenized as /v1/completions does (the post-processor adds BOS);
//   --chat TEXT    one user message rendered with the model's chat template
//                  (add_generation_prompt) and tokenized as /v1/chat/completions does.
// Each prompt runs on its own (one request in the engine at a time, as one client of the
// server sees it).
//
// Prints one line per prompt: the generated ids, comma-separated, then the finish reason; with
// --json one JSON object per line instead: {"prompt_token_ids", "token_ids", "text" (decoded
// by the server's incremental detokenizer, special tokens skipped), "finish_reason"}.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "frontend/engine/detokenizer.h"
#include "frontend/engine/llm_engine.h"
#include "frontend/jinja/chat_template.h"
#include "frontend/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

using namespace vllm;

// A prompt as given on the command line, before tokenization.
struct PromptArg {
  enum class Kind { kIds, kText, kChat } kind;
  std::string value;
};

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(s, &id)) {
      return absl::InvalidArgumentError("not a token id: '" + std::string(s) + "'");
    }
    ids.push_back(id);
  }
  return ids;
}

// The prompt as the API server would tokenize it (frontend/engine/async_llm.cc).
absl::StatusOr<std::vector<int32_t>> Tokenize(const PromptArg& p,
                                              const frontend::Tokenizer* tokenizer) {
  if (p.kind == PromptArg::Kind::kIds) return ParseIds(p.value);
  if (tokenizer == nullptr) return absl::FailedPreconditionError("the model has no tokenizer");
  std::string text = p.value;
  if (p.kind == PromptArg::Kind::kChat) {
    if (tokenizer->chat_template().empty()) {
      return absl::FailedPreconditionError("the model has no chat template");
    }
    auto chat_template = frontend::ChatTemplate::Parse(tokenizer->chat_template());
    if (!chat_template.ok()) return chat_template.status();
    auto rendered = chat_template->Render({{"user", p.value}}, /*add_generation_prompt=*/true,
                                          tokenizer->bos_token(), tokenizer->eos_token());
    if (!rendered.ok()) return rendered.status();
    text = std::move(*rendered);
    // The template writes BOS itself and Encode adds it again: the server strips one.
    const std::string& bos = tokenizer->bos_token();
    if (!bos.empty() && text.rfind(bos, 0) == 0) text.erase(0, bos.size());
  }
  return tokenizer->Encode(text, /*add_special_tokens=*/true);
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries the results; the engine's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("engine"));
  config::EngineArgs args;
  args.config.model.model = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";
  int32_t max_tokens = 32;
  double temperature = 0.0;
  bool json = false;
  std::vector<PromptArg> prompts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      args.config.model.model = argv[++i];
    } else if (a == "--max-tokens" && i + 1 < argc) {
      max_tokens = std::atoi(argv[++i]);
    } else if (a == "--temperature" && i + 1 < argc) {
      temperature = std::atof(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--prompt" && i + 1 < argc) {
      prompts.push_back({PromptArg::Kind::kText, argv[++i]});
    } else if (a == "--chat" && i + 1 < argc) {
      prompts.push_back({PromptArg::Kind::kChat, argv[++i]});
    } else if (a.starts_with("--")) {
      std::fprintf(stderr, "unknown flag or missing value: '%s'\n", a.c_str());
      return 2;
    } else {
      prompts.push_back({PromptArg::Kind::kIds, a});
    }
  }

  // The tokenizer is needed for text prompts and for --json's text.
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  bool need_tokenizer = json;
  for (const PromptArg& p : prompts) need_tokenizer |= p.kind != PromptArg::Kind::kIds;
  if (need_tokenizer) {
    auto t = frontend::Tokenizer::Load(args.config.model.model);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 1;
    }
    tokenizer = std::move(*t);
  }
  std::vector<core::EngineCoreRequest> requests;
  for (const PromptArg& p : prompts) {
    auto ids = Tokenize(p, tokenizer.get());
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
      return 2;
    }
    core::EngineCoreRequest r;
    r.request_id = "prompt-" + std::to_string(requests.size());
    r.prompt_token_ids = std::move(*ids);
    r.sampling_params.max_tokens = max_tokens;
    r.sampling_params.temperature = temperature;
    requests.push_back(std::move(r));
  }

  auto engine = frontend::LLMEngine::Create(args);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  for (auto& r : requests) {
    std::vector<core::EngineCoreRequest> one;
    one.push_back(std::move(r));
    auto outputs = (*engine)->Generate(std::move(one));
    if (!outputs.ok()) {
      std::fprintf(stderr, "%s\n", outputs.status().ToString().c_str());
      return 1;
    }
    const frontend::RequestOutput& o = outputs->front();
    const std::string finish_reason(core::FinishReasonName(*o.finish_reason));
    if (!json) {
      std::printf("%s %s\n", absl::StrJoin(o.output_token_ids, ",").c_str(), finish_reason.c_str());
      continue;
    }
    frontend::IncrementalDetokenizer detokenizer(*tokenizer, o.prompt_token_ids, {});
    std::string text = detokenizer.Append(o.output_token_ids);
    text += detokenizer.Flush();
    const nlohmann::json line = {{"prompt_token_ids", o.prompt_token_ids},
                                 {"token_ids", o.output_token_ids},
                                 {"text", text},
                                 {"finish_reason", finish_reason}};
    std::printf("%s\n",
                line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}
