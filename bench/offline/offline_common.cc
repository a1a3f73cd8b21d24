#include "bench/offline/offline_common.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "frontend/engine/detokenizer.h"
#include "launcher/serve_args.h"
#include "launcher/serve_env.h"
#include "launcher/vllm_serve_flags.h"

namespace vllm::bench_offline {
namespace {

// The flag an argument names ("--x" of "--x=v"); empty for a value or a positional.
std::string_view FlagName(std::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return {};
  if (arg.size() > 2 && (arg[1] >= '0' && arg[1] <= '9')) return {};  // "-1": a value
  return arg.substr(0, arg.find('='));
}

// Flags of `vllm serve` that are not the engine's (vLLM's bench commands parse EngineArgs
// only): the Frontend group, the process layout, and our own server flags.
constexpr std::string_view kServerOnlyFlags[] = {
    "--headless",
    "--api-server-count",
    "--grpc",
    "--shutdown-timeout",
    "--cluster-key-file",
    "--data-parallel-lockstep",
    "--max-connections",
    "--rejoin-head",
    "--no-rejoin-head",
    "--restart-dead-engines",
};

// The long name of a server-only flag `name` (a long name or a vLLM alias), or empty.
std::string ServerOnlyFlag(std::string_view name) {
  for (std::string_view s : kServerOnlyFlags) {
    if (name == s) return std::string(s);
  }
  for (const launcher::VllmServeFlag& flag : launcher::VllmServeFlags()) {
    if (flag.group != "Frontend" && flag.name != "--api-server-count") continue;
    if (flag.name == name) return std::string(flag.name);
    for (absl::string_view alias :
         absl::StrSplit(std::string(flag.aliases), ',', absl::SkipEmpty())) {
      if (std::string_view(alias.data(), alias.size()) == name) return std::string(flag.name);
    }
  }
  return {};
}

bool HasFlag(const std::vector<std::string>& args, std::string_view name) {
  for (const std::string& a : args) {
    if (FlagName(a) == name) return true;
  }
  return false;
}

}  // namespace

absl::Status RefuseFlags(const std::vector<std::string>& args,
                         const std::vector<RefusedFlag>& refused, std::string_view command) {
  for (const std::string& a : args) {
    const std::string_view name = FlagName(a);
    for (const RefusedFlag& r : refused) {
      if (name == r.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(r.name), ": vLLM's flag of `", std::string(command),
                         "` is not supported by vllm-launch: ", std::string(r.reason)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineFlags> ParseEngineFlags(const std::vector<std::string>& args,
                                             std::string_view command,
                                             bool prefix_caching_default) {
  for (const std::string& a : args) {
    const std::string_view name = FlagName(a);
    if (name.empty()) continue;
    const std::string server_flag = ServerOnlyFlag(name);
    if (!server_flag.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          server_flag, ": a flag of `vllm-launch serve`, not of `", std::string(command),
          "` (vLLM's offline benchmarks take the engine's flags only)"));
    }
  }
  auto parsed = launcher::ParseServeArgs(args, VLLM_DEFAULT_MODEL);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->args) {  // --version
    return absl::InvalidArgumentError(
        absl::StrCat("`", std::string(command), "` takes no --version"));
  }
  // vLLM's environment variables, as `vllm-launch serve` reads them (VLLM_CPU_KVCACHE_SPACE, ...).
  if (absl::Status env = launcher::ApplyVllmEnvAtStartup(*parsed->args); !env.ok()) return env;
  EngineFlags out;
  out.config = std::move(parsed->args->config);
  out.model_id = out.config.model.model.string();
  if (!HasFlag(args, "--model") && !HasFlag(args, "--config") &&
      out.model_id != VLLM_DEFAULT_MODEL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`", std::string(command), "` takes the model as --model, not as a positional argument ('",
        out.model_id, "')"));
  }
  const config::ParallelConfig& p = out.config.parallel;
  if (p.data_parallel_size > 1) {
    return absl::InvalidArgumentError(
        "Data parallel is only supported with external launcher mode with synchronous engine in "
        "offline benchmark, please use benchmark serving instead (vllm-launch has no external "
        "launcher mode: --data-parallel-size must be 1)");
  }
  if (p.nnodes > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes: `", std::string(command),
                     "` runs the engine in this process, on this node alone"));
  }
  if (!prefix_caching_default && !HasFlag(args, "--enable-prefix-caching") &&
      !HasFlag(args, "--no-enable-prefix-caching") && !HasFlag(args, "--config")) {
    out.config.cache.enable_prefix_caching = false;
  }
  return out;
}

absl::StatusOr<BatchResult> RunBatch(frontend::LLMEngine& engine,
                                     const std::vector<OfflinePrompt>& prompts,
                                     const BatchOptions& options) {
  if (options.detokenize && options.tokenizer == nullptr) {
    return absl::FailedPreconditionError("detokenizing needs the model's tokenizer");
  }
  struct Sequence {
    size_t decoded = 0;  // output ids fed to the detokenizer
    std::optional<frontend::IncrementalDetokenizer> detokenizer;
  };
  absl::flat_hash_map<std::string, Sequence> sequences;
  BatchResult result;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    result.prompt_tokens += static_cast<int64_t>(prompts[i].token_ids.size());
    for (int32_t k = 0; k < options.n; ++k) {
      core::EngineCoreRequest r;
      r.request_id = absl::StrCat(options.request_id_prefix, i, "_", k);
      r.prompt_token_ids = prompts[i].token_ids;
      r.sampling_params.temperature = 1.0;
      r.sampling_params.top_p = 1.0;
      r.sampling_params.ignore_eos = true;
      r.sampling_params.max_tokens = prompts[i].max_tokens;
      Sequence& s = sequences[r.request_id];
      if (options.detokenize) {
        s.detokenizer.emplace(*options.tokenizer, r.prompt_token_ids,
                              frontend::DetokenizerOptions{});
      }
      if (absl::Status added = engine.AddRequest(std::move(r)); !added.ok()) return added;
    }
  }
  while (engine.HasUnfinishedRequests()) {
    absl::StatusOr<std::vector<frontend::RequestOutput>> step = engine.Step();
    if (!step.ok()) return step.status();
    for (const frontend::RequestOutput& o : *step) {
      auto it = sequences.find(o.request_id);
      if (it == sequences.end()) continue;
      Sequence& s = it->second;
      if (s.detokenizer) {
        const std::span<const int32_t> ids(o.output_token_ids);
        s.detokenizer->Append(ids.subspan(s.decoded));
        if (o.finished()) s.detokenizer->Flush();
      }
      s.decoded = o.output_token_ids.size();
      if (o.finished()) result.output_tokens += static_cast<int64_t>(s.decoded);
    }
  }
  result.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string PyFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  // Shortest round trip, then Python's choice of notation: scientific below 1e-4 and from
  // 1e16 on, with at least one digit after the point in fixed notation.
  const double magnitude = std::fabs(value);
  const bool scientific = magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16);
  auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof(buffer), value,
                    scientific ? std::chars_format::scientific : std::chars_format::fixed);
  (void)ec;
  std::string text(buffer, end);
  if (scientific) {
    // to_chars writes "1e-05" as Python does; Python writes "1e+16" as well.
    return text;
  }
  if (text.find('.') == std::string::npos) text += ".0";
  return text;
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& value) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat("--output-json: cannot write ", path));
  out << value.dump(4, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!out.flush()) return absl::InternalError(absl::StrCat("--output-json: cannot write ", path));
  return absl::OkStatus();
}

void PrintProgress(std::string_view desc, int64_t done, int64_t total) {
  std::fprintf(stderr, "\r%.*s: %lld/%lld", static_cast<int>(desc.size()), desc.data(),
               static_cast<long long>(done), static_cast<long long>(total));
  if (done >= total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace vllm::bench_offline
