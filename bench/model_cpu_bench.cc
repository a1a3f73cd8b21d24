// CPU model throughput through the in-process engine (LLMEngine: scheduler + UniProcExecutor
// + model), printed as a Markdown table:
//   prefill  one prompt of P tokens, max_tokens 1: prompt tokens per second;
//   decode   B requests with 32-token prompts generating G tokens each, timed after every
//            request has its first token: generated tokens per second and ms per step.
// Batch-1 decode streams every weight once per token, so its floor is
// weight bytes ÷ memory bandwidth; the bandwidth is measured here with memcpy (read + write
// of a 1 GiB buffer) and the table reports the step time as a multiple of that floor.
//
// Models: the bundled models/kjv-llama-tiny (when present) and a dummy Llama-3-8B-shaped
// model (hidden 4096, 32 heads, 8 KV heads, intermediate 14336, vocab 128256) with
// --layers layers (default 2), random weights (--load-format dummy).
//
//   build/release/bin/model_cpu_bench [--layers N] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "frontend/llm_engine.h"
#include "ipc/status_macros.h"

namespace vllm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best of 3 memcpy passes over `bytes`: bytes moved (read + write) per second.
double MemcpyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    auto t1 = Clock::now();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / Seconds(t0, t1));
    std::swap(a, b);
  }
  return best;
}

std::filesystem::path WriteLlama8BConfig(int32_t layers) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("vllm-bench-llama8b-", layers);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << absl::StrFormat(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
"intermediate_size": 14336, "num_hidden_layers": %d, "num_attention_heads": 32,
"num_key_value_heads": 8, "max_position_embeddings": 8192, "rope_theta": 500000.0,
"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
"high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
"rms_norm_eps": 1e-5, "tie_word_embeddings": false, "bos_token_id": 128000,
"eos_token_id": 128001, "torch_dtype": "bfloat16"})",
      layers);
  return dir;
}

core::EngineCoreRequest Request(const std::string& id, int32_t prompt_len, int32_t max_tokens,
                                int32_t vocab) {
  core::EngineCoreRequest r;
  r.request_id = id;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt_token_ids.push_back((i * 7919 + 13) % vocab);
  r.sampling_params.temperature = 0.0;
  r.sampling_params.max_tokens = max_tokens;
  r.sampling_params.ignore_eos = true;
  return r;
}

struct Row {
  std::string model, what;
  double tokens_per_s = 0, ms_per_step = 0;
  double floor_x = 0;  // step time ÷ (weight bytes ÷ memcpy bandwidth)
};

absl::Status Measure(const std::string& name, const frontend::EngineArgs& args, bool quick,
                     double bandwidth, std::vector<Row>* rows) {
  VLLM_ASSIGN_OR_RETURN(auto engine, frontend::LLMEngine::Create(args));
  const int32_t vocab = engine->model_config().vocab_size;
  const double floor_s = static_cast<double>(engine->weight_bytes()) / bandwidth;
  int64_t id = 0;
  // Prefill.
  const int32_t prompt = quick ? 128 : 512;
  {
    auto t0 = Clock::now();
    VLLM_RETURN_IF_ERROR(
        engine->Generate({Request(absl::StrCat("p", id++), prompt, 1, vocab)}).status());
    rows->push_back({name, absl::StrCat("prefill ", prompt), prompt / Seconds(t0, Clock::now())});
  }
  // Decode at several batch sizes.
  const int32_t gen = quick ? 8 : 32;
  for (int32_t batch : {1, 8, 32}) {
    for (int32_t i = 0; i < batch; ++i) {
      VLLM_RETURN_IF_ERROR(engine->AddRequest(Request(absl::StrCat("d", id++), 32, gen, vocab)));
    }
    // Until every request has its first token (prefill done).
    int32_t started = 0;
    while (started < batch) {
      VLLM_ASSIGN_OR_RETURN(auto progressed, engine->Step());
      for (const auto& r : progressed) started += r.output_token_ids.size() == 1;
    }
    int64_t tokens = 0, steps = 0;
    auto t0 = Clock::now();
    while (engine->HasUnfinishedRequests()) {
      VLLM_ASSIGN_OR_RETURN(auto progressed, engine->Step());
      tokens += static_cast<int64_t>(progressed.size());
      ++steps;
    }
    const double s = Seconds(t0, Clock::now());
    const double step_s = s / static_cast<double>(steps);
    rows->push_back({name, absl::StrCat("decode batch ", batch), tokens / s, 1e3 * step_s,
                     step_s / floor_s});
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  int32_t layers = 2;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--layers N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  const double bandwidth = MemcpyBandwidth(size_t{1} << 30);
  std::vector<Row> rows;
  struct Model {
    std::string name;
    frontend::EngineArgs args;
  };
  std::vector<Model> models;
  const std::filesystem::path bundled =
      std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
  if (std::filesystem::exists(bundled / "config.json")) {
    frontend::EngineArgs a;
    a.model = bundled;
    models.push_back({"kjv-llama-tiny", a});
  }
  frontend::EngineArgs big;
  big.model = WriteLlama8BConfig(layers);
  big.load_format = worker::LoadFormat::kDummy;
  big.max_model_len = 2048;
  big.kv_cache_memory_bytes = int64_t{1} << 30;
  models.push_back({absl::StrCat("llama-3-8b shape, ", layers, " layers (dummy)"), big});
  for (const Model& m : models) {
    if (absl::Status s = Measure(m.name, m.args, quick, bandwidth, &rows); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", m.name.c_str(), s.ToString().c_str());
      return 1;
    }
  }
  std::printf("memcpy bandwidth: %.1f GB/s (bytes read + written per second)\n\n",
              bandwidth / 1e9);
  std::printf("| model | run | tokens/s | ms/step | step ÷ weight-streaming floor |\n");
  std::printf("|---|---|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const bool decode = r.ms_per_step > 0;
    std::printf("| %s | %s | %.1f | %s | %s |\n", r.model.c_str(), r.what.c_str(),
                r.tokens_per_s, decode ? absl::StrFormat("%.2f", r.ms_per_step).c_str() : "—",
                decode ? absl::StrFormat("%.2f×", r.floor_x).c_str() : "—");
  }
  return 0;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) { return vllm::bench::Main(argc, argv); }
