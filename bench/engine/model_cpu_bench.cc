// CPU model throughput through the in-process engine (LLMEngine: scheduler + UniProcExecutor
// + model), printed as a Markdown table:
//   prefill  one prompt of P tokens, max_tokens 1: prompt tokens per second;
//   decode   B requests with 32-token prompts generating G tokens each, timed after every
//            request has its first token: generated tokens per second and ms per step.
// A decode step streams every layer weight and the lm_head once (not the embedding table, of
// which it reads a row per token) and, in attention, every cached K and V of each sequence
// (context length × layers × 2 × kv_heads × head_dim × 4 bytes), so its memory floor is
// those bytes ÷ the read bandwidth (ReadBandwidth); its compute floor is 2 × those
// parameters × batch ÷ the sgemm peak. The table reports each decode step as a multiple of
// the memory floor, the compute floor, and the step ÷ the larger of the two. Prefill is reported in
// GFLOP/s (2 × layer parameters per token) against the sgemm peak measured in the same run
// (kernels::cpu::Linear, 2048³).
//
// Models: the bundled models/kjv-llama-tiny (when present) and a dummy Llama-3-8B-shaped
// model (hidden 4096, 32 heads, 8 KV heads, intermediate 14336, vocab 128256) with
// --layers layers (default 2), random weights (--load-format dummy).
//
//   build/release/bin/model_cpu_bench [--layers N] [--quick] [--tiny-only]
// (--tiny-only: the bundled model alone, for quick A/B runs of the kernels.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "frontend/engine/llm_engine.h"
#include "kernels/cpu/ops.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The fastest weight stream we know of: one m = 1 Linear (OpenBLAS sgemv) over a 1 GiB
// weight matrix, best of 3: weight bytes read per second. (Plain read loops, memchr
// included, measured ~25 % slower here than sgemv.)
double ReadBandwidth(size_t bytes) {
  const int64_t k = 8192, n = static_cast<int64_t>(bytes / sizeof(float)) / k;
  std::vector<float> w(static_cast<size_t>(n * k), 0.001f), x(k, 1.0f), y(n);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    kernels::cpu::Linear(x.data(), w.data(), nullptr, y.data(), 1, n, k);
    best = std::max(best, static_cast<double>(n * k * sizeof(float)) / Seconds(t0, Clock::now()));
  }
  return best;
}

// GFLOP/s of one 2048³ sgemm through our Linear (best of 3).
double SgemmPeak() {
  const int64_t n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    kernels::cpu::Linear(a.data(), b.data(), nullptr, c.data(), n, n, n);
    best = std::max(best, 2.0 * n * n * n / Seconds(t0, Clock::now()) / 1e9);
  }
  return best;
}

// Parameters a step streams: every layer, the final norm and the lm_head (or the tied table).
double LayerParams(const worker::HfConfig& c) {
  const double h = c.hidden_size, d = c.head_dim;
  const double qkv = h * d * (c.num_attention_heads + 2.0 * c.num_key_value_heads);
  const double o = d * c.num_attention_heads * h;
  const double mlp = 3.0 * h * c.intermediate_size;
  return c.num_hidden_layers * (qkv + o + mlp + 2 * h) + h;
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
  double floor_x = 0;     // step time ÷ ((weight + K/V bytes read) ÷ read bandwidth)
  double compute_ms = 0;  // 2 × streamed parameters × batch ÷ sgemm peak
  double bound_x = 0;     // step time ÷ max(memory floor, compute floor)
  double gflops = 0;      // prefill: 2 × layer parameters × tokens/s
};

absl::Status Measure(const std::string& name, const config::EngineArgs& args, bool quick,
                     double bandwidth, double peak_gflops, std::vector<Row>* rows) {
  VLLM_ASSIGN_OR_RETURN(auto engine, frontend::LLMEngine::Create(args));
  const int32_t vocab = engine->model_config().vocab_size;
  const worker::HfConfig& config = engine->model_config();
  const double layer_params = LayerParams(config);
  const double streamed_params =
      layer_params + static_cast<double>(config.vocab_size) * config.hidden_size;
  const double streamed_bytes = 4.0 * streamed_params;
  // K and V bytes attention reads per cached token of one sequence.
  const double kv_bytes_per_token =
      4.0 * config.num_hidden_layers * 2.0 * config.num_key_value_heads * config.head_dim;
  int64_t id = 0;
  // Prefill.
  const int32_t prompt = quick ? 128 : 512;
  {
    auto t0 = Clock::now();
    VLLM_RETURN_IF_ERROR(
        engine->Generate({Request(absl::StrCat("p", id++), prompt, 1, vocab)}).status());
    const double tokens_per_s = prompt / Seconds(t0, Clock::now());
    Row row{name, absl::StrCat("prefill ", prompt), tokens_per_s};
    row.gflops = 2.0 * layer_params * tokens_per_s / 1e9;
    rows->push_back(row);
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
    double context_tokens = 0;  // Σ over steps and sequences of the keys attention read
    auto t0 = Clock::now();
    while (engine->HasUnfinishedRequests()) {
      VLLM_ASSIGN_OR_RETURN(auto progressed, engine->Step());
      tokens += static_cast<int64_t>(progressed.size());
      ++steps;
      // The step cached the previous output token and attended over everything before it.
      for (const auto& r : progressed) {
        context_tokens +=
            static_cast<double>(r.prompt_token_ids.size() + r.output_token_ids.size() - 1);
      }
    }
    const double s = Seconds(t0, Clock::now());
    const double step_s = s / static_cast<double>(steps);
    const double memory_floor_s =
        (streamed_bytes + kv_bytes_per_token * context_tokens / static_cast<double>(steps)) /
        bandwidth;
    const double compute_floor_s = 2.0 * streamed_params * batch / (peak_gflops * 1e9);
    rows->push_back({name, absl::StrCat("decode batch ", batch), tokens / s, 1e3 * step_s,
                     step_s / memory_floor_s, 1e3 * compute_floor_s,
                     step_s / std::max(memory_floor_s, compute_floor_s)});
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  int32_t layers = 2;
  bool quick = false;
  bool tiny_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--tiny-only") == 0) {
      tiny_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [--layers N] [--quick] [--tiny-only]\n", argv[0]);
      return 2;
    }
  }
  const double bandwidth = ReadBandwidth(size_t{1} << 30);
  const double peak = SgemmPeak();
  std::vector<Row> rows;
  struct Model {
    std::string name;
    config::EngineArgs args;
  };
  std::vector<Model> models;
  const std::filesystem::path bundled =
      std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
  if (std::filesystem::exists(bundled / "config.json")) {
    config::EngineArgs a;
    a.config.model.model = bundled;
    models.push_back({"kjv-llama-tiny", a});
  }
  config::EngineArgs big;
  big.config.model.model = WriteLlama8BConfig(layers);
  big.config.load.load_format = config::LoadFormat::kDummy;
  big.config.model.max_model_len = 2048;
  big.config.cache.kv_cache_memory_bytes = int64_t{1} << 30;
  if (!tiny_only) {
    models.push_back({absl::StrCat("llama-3-8b shape, ", layers, " layers (dummy)"), big});
  }
  for (const Model& m : models) {
    if (absl::Status s = Measure(m.name, m.args, quick, bandwidth, peak, &rows); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", m.name.c_str(), s.ToString().c_str());
      return 1;
    }
  }
  std::printf("weight streaming (sgemv, 1 GiB): %.1f GB/s; sgemm 2048³ peak: %.1f GFLOP/s\n\n",
              bandwidth / 1e9, peak);
  std::printf(
      "| model | run | tokens/s | ms/step | decode: step ÷ streaming floor (weights + K/V) | "
      "decode: compute floor ms | decode: step ÷ max(floors) | prefill: GFLOP/s (÷ sgemm "
      "peak) |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const bool decode = r.ms_per_step > 0;
    std::printf(
        "| %s | %s | %.1f | %s | %s | %s | %s | %s |\n", r.model.c_str(), r.what.c_str(),
        r.tokens_per_s, decode ? absl::StrFormat("%.2f", r.ms_per_step).c_str() : "—",
        decode ? absl::StrFormat("%.2f×", r.floor_x).c_str() : "—",
        decode ? absl::StrFormat("%.2f", r.compute_ms).c_str() : "—",
        decode ? absl::StrFormat("%.2f×", r.bound_x).c_str() : "—",
        decode ? "—" : absl::StrFormat("%.1f (%.0f %%)", r.gflops, 100 * r.gflops / peak).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  // stdout carries the results; the engine's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("engine"));
  return vllm::bench::Main(argc, argv);
}
