// The serving stack's own cost per request: the same requests, one at a time, through the
// in-process engine (LLMEngine, no server) and through `vllm-launch` over HTTP. The difference
// is what the API server (HTTP, JSON), the frontend (AsyncLLM, detokenizer), the ZMQ hop to the
// engine-core process and the HTTP client add; the engine's own work is in both.
//
//   build/release/bin/serve_overhead [--launch PATH] [--model DIR] [--requests N] [--rounds N]
//       [--warmup N] [--prompt-len N] [--max-tokens N] [-tp N] [--kv-cache-memory SIZE]
//       [--block-size N] [--device cpu|cuda|auto] [--blas-threads N] [--gap-us N] [--seed N]
//       [--json FILE] [--server-log FILE]
//
// Defaults: the bundled model, 300 requests per mode in 5 rounds, 20 warm-up requests per
// round and mode (not timed), 8-token prompts, 1 output token, TP 1, 1 GiB of KV cache, block
// size 16, the CPU, 1 OpenBLAS thread per engine on both sides (--blas-threads 0: the server's
// default, cores / TP; OpenBLAS's pool spins while it waits, so with 2 threads on 2 cores the
// engine's time swings with any other load on the machine), 1 ms idle before each request
// (--gap-us; see Pause). Each round runs three modes in this order, on the same distinct random
// token-id prompts (greedy, ignore_eos, prefix caching off on both sides):
//   in-process      LLMEngine::AddRequest, then Step() until the request finishes;
//   keep-alive      POST /v1/completions over one HTTP/1.1 keep-alive connection, timed from
//                   the first byte written to the last byte of the response read;
//   new connection  the same with a TCP connect (and close) per request, inside the timing.
// Each round builds a fresh engine and destroys it before it starts a fresh server (which it
// stops with SIGINT at the end of the round), so the two never share the CPU; the rounds spread
// every mode over the whole run, so a change in the machine's load hits all modes alike.
// The server's own view, vllm:e2e_request_latency_seconds (from the parsed request to the
// engine's last output reaching the API server), comes from /metrics before and after each
// HTTP mode: its mean splits the overhead into the HTTP/JSON side and the AsyncLLM/ZMQ side.
//
// Prints a Markdown table (mode | requests | mean | p50 | p90 | p99, in ms) and the overhead
// lines; `--json FILE` writes the same figures. Exits non-zero when a request fails or the
// server does not start or stop (SIGINT, then exit 0 within 10 s).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "frontend/engine/llm_engine.h"
#include "kernels/cpu/ops.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  std::string launch;  // empty: vllm-launch next to this binary
  std::string model = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";
  int requests = 300;
  int warmup = 20;  // per round
  int rounds = 5;
  int prompt_len = 8;
  int max_tokens = 1;
  int tp = 1;
  std::string kv_cache_memory = "1GiB";
  int block_size = 16;
  std::string device = "cpu";
  uint64_t seed = 0;
  std::string json_path;
  std::string server_log = "/dev/null";
  // OpenBLAS threads per engine (both sides); 0: the server's default (cores / TP).
  int blas_threads = 1;
  int gap_us = 1000;  // idle time before each request
};

// Latencies of one mode, in milliseconds, pooled over the rounds.
struct ModeResult {
  std::string name;
  std::vector<double> ms;
  // HTTP modes: vllm:e2e_request_latency_seconds over the timed requests, from /metrics.
  double server_e2e_sum_ms = 0;
  double server_e2e_count = 0;
  std::optional<double> ServerE2eMeanMs() const {
    if (server_e2e_count <= 0) return std::nullopt;
    return server_e2e_sum_ms / server_e2e_count;
  }
};

double Percentile(std::vector<double> v, double p) {  // nearest rank
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// "4GiB", "512MiB", "64KiB" or plain bytes.
absl::StatusOr<int64_t> ParseBytes(const std::string& text) {
  static constexpr std::pair<const char*, int64_t> kSuffixes[] = {
      {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20}, {"KiB", int64_t{1} << 10}};
  for (const auto& [suffix, scale] : kSuffixes) {
    if (text.ends_with(suffix)) {
      int64_t n = 0;
      if (absl::SimpleAtoi(text.substr(0, text.size() - std::strlen(suffix)), &n) && n > 0) {
        return n * scale;
      }
    }
  }
  int64_t n = 0;
  if (absl::SimpleAtoi(text, &n) && n > 0) return n;
  return absl::InvalidArgumentError("--kv-cache-memory: not a size: '" + text + "'");
}

// Distinct prompts of `len` token ids in [10, vocab) (clear of the usual special ids).
std::vector<std::vector<int32_t>> MakePrompts(int count, int len, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(10, vocab - 1);
  std::vector<std::vector<int32_t>> prompts(count);
  for (auto& p : prompts) {
    for (int i = 0; i < len; ++i) p.push_back(id(rng));
  }
  return prompts;
}

// The idle time before each request, in every mode. Without it the in-process loop never
// sleeps, and on a loaded machine the kernel's scheduler preempts such a thread for a whole
// tick (4 ms) about every other request, while the HTTP modes, which sleep on their sockets,
// are spared: the comparison would measure the scheduler.
void Pause(const Options& o) {
  if (o.gap_us > 0) usleep(static_cast<useconds_t>(o.gap_us));
}

// ---- in-process ------------------------------------------------------------------------------

// Runs `prompts` (the first o.warmup untimed) and appends the latencies to `result`.
absl::Status RunInProcess(const Options& o, const std::vector<std::vector<int32_t>>& prompts,
                          frontend::LLMEngine& engine, ModeResult& result) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    core::EngineCoreRequest r;
    r.request_id = absl::StrCat("inproc-", i);
    r.prompt_token_ids = prompts[i];
    r.sampling_params.max_tokens = o.max_tokens;
    r.sampling_params.temperature = 0.0;
    r.sampling_params.ignore_eos = true;
    const std::string id = r.request_id;
    Pause(o);
    const Clock::time_point t0 = Clock::now();
    if (absl::Status s = engine.AddRequest(std::move(r)); !s.ok()) return s;
    bool finished = false;
    while (!finished) {
      absl::StatusOr<std::vector<frontend::RequestOutput>> outs = engine.Step();
      if (!outs.ok()) return outs.status();
      for (const frontend::RequestOutput& out : *outs) {
        if (out.request_id != id || !out.finished()) continue;
        if (static_cast<int>(out.output_token_ids.size()) != o.max_tokens) {
          return absl::InternalError(absl::StrCat(id, ": ", out.output_token_ids.size(),
                                                  " tokens, expected ", o.max_tokens));
        }
        finished = true;
      }
    }
    if (i >= static_cast<size_t>(o.warmup)) result.ms.push_back(MsSince(t0));
  }
  return absl::OkStatus();
}

// ---- the server ------------------------------------------------------------------------------

// `vllm-launch` on an ephemeral port; SIGKILLed by ChildProcess if not stopped cleanly.
struct Server {
  std::optional<ChildProcess> process;
  int stdout_fd = -1;
  int port = 0;
  ~Server() {
    if (stdout_fd >= 0) close(stdout_fd);
  }
};

absl::StatusOr<std::unique_ptr<Server>> StartServer(const Options& o) {
  std::vector<std::string> argv = {o.launch,
                                   "--model",
                                   o.model,
                                   "--port",
                                   "0",
                                   "--host",
                                   "127.0.0.1",
                                   "-tp",
                                   std::to_string(o.tp),
                                   "--kv-cache-memory",
                                   o.kv_cache_memory,
                                   "--block-size",
                                   std::to_string(o.block_size),
                                   "--device",
                                   o.device,
                                   "--no-enable-prefix-caching"};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  const std::string log = o.server_log;
  // The child only calls async-signal-safe functions before exec (this process may own
  // threads from the in-process run's engine).
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  absl::StatusOr<ChildProcess> child = ChildProcess::Fork([&]() {
    dup2(fds[1], STDOUT_FILENO);
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log_fd >= 0) dup2(log_fd, STDERR_FILENO);
    execv(args[0], args.data());
    return 127;
  });
  close(fds[1]);
  if (!child.ok()) {
    close(fds[0]);
    return child.status();
  }
  auto server = std::make_unique<Server>();
  server->process.emplace(std::move(*child));
  server->stdout_fd = fds[0];
  // Wait for "vllm-launch: ready at http://HOST:PORT/v1".
  std::string buffer;
  const absl::Time deadline = absl::Now() + absl::Minutes(5);
  while (true) {
    if (size_t nl = buffer.find('\n'); nl != std::string::npos) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (!line.starts_with("vllm-launch: ready at")) continue;
      const size_t colon = line.rfind(':');
      const size_t slash = line.rfind("/v1");
      if (colon == std::string::npos || slash == std::string::npos || slash < colon ||
          !absl::SimpleAtoi(line.substr(colon + 1, slash - colon - 1), &server->port)) {
        return absl::InternalError("unexpected ready line: " + line);
      }
      return server;
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("the server did not start");
    if (absl::Status s = server->process->CheckNotFailed(); !s.ok()) return s;
    pollfd p{server->stdout_fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(server->stdout_fd, chunk, sizeof chunk);
    if (n == 0) {
      return absl::UnavailableError("the server exited before its ready line (see --server-log)");
    }
    if (n > 0) buffer.append(chunk, static_cast<size_t>(n));
  }
}

absl::Status StopServer(Server& server) {
  kill(server.process->pid(), SIGINT);
  return server.process->Wait(absl::Seconds(10));
}

// ---- HTTP ------------------------------------------------------------------------------------

// A blocking HTTP/1.1 client for one server on the loopback; reconnects when asked.
class HttpClient {
 public:
  explicit HttpClient(int port)
      : endpoint_(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)) {}

  // Sends one request and reads the whole response. `keep_alive` false: a fresh connection,
  // closed afterwards. Fails on a connection error or a non-200 status.
  absl::StatusOr<std::string> Request(http::verb verb, const std::string& target,
                                      const std::string& body, bool keep_alive) {
    beast::error_code ec;
    if (!keep_alive || !socket_.is_open()) {
      if (socket_.is_open()) socket_.close(ec);
      socket_.connect(endpoint_, ec);
      if (ec) return absl::UnavailableError("connect: " + ec.message());
      socket_.set_option(tcp::no_delay(true), ec);
    }
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(keep_alive);
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    http::write(socket_, req, ec);
    if (ec) return absl::UnavailableError("write: " + ec.message());
    http::response<http::string_body> res;
    http::read(socket_, buffer_, res, ec);
    if (ec) return absl::UnavailableError("read: " + ec.message());
    if (!keep_alive || !res.keep_alive()) socket_.close(ec);
    if (res.result() != http::status::ok) {
      return absl::InternalError(
          absl::StrCat("HTTP ", res.result_int(), " for ", target, ": ", res.body()));
    }
    return std::move(res.body());
  }

 private:
  asio::io_context io_;
  tcp::endpoint endpoint_;
  tcp::socket socket_{io_};
  beast::flat_buffer buffer_;
};

// Sum and count of vllm:e2e_request_latency_seconds over all its label sets.
struct E2eHistogram {
  double sum = 0;
  double count = 0;
};

absl::StatusOr<E2eHistogram> ScrapeE2e(HttpClient& client) {
  absl::StatusOr<std::string> text = client.Request(http::verb::get, "/metrics", "", false);
  if (!text.ok()) return text.status();
  E2eHistogram h;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    const bool is_sum = absl::StartsWith(line, "vllm:e2e_request_latency_seconds_sum");
    const bool is_count = absl::StartsWith(line, "vllm:e2e_request_latency_seconds_count");
    if (!is_sum && !is_count) continue;
    double v = 0;
    if (!absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) continue;
    (is_sum ? h.sum : h.count) += v;
  }
  return h;
}

// Sends `prompts` (the first o.warmup untimed) and appends the latencies and the server's
// e2e histogram over the timed ones to `result`.
absl::Status RunHttp(const Options& o, const std::vector<std::vector<int32_t>>& prompts, int port,
                     bool keep_alive, ModeResult& result) {
  HttpClient client(port);
  HttpClient metrics_client(port);
  E2eHistogram before;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (i == static_cast<size_t>(o.warmup)) {
      absl::StatusOr<E2eHistogram> h = ScrapeE2e(metrics_client);
      if (!h.ok()) return h.status();
      before = *h;
    }
    const std::string body = json{
        {"model", o.model},
        {"prompt", prompts[i]},
        {"max_tokens", o.max_tokens},
        {"temperature", 0.0},
        {"ignore_eos", true}}.dump();
    Pause(o);
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::string> response =
        client.Request(http::verb::post, "/v1/completions", body, keep_alive);
    const double ms = MsSince(t0);
    if (!response.ok()) return response.status();
    const json parsed = json::parse(*response, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.contains("usage") ||
        parsed["usage"].value("completion_tokens", -1) != o.max_tokens) {
      return absl::InternalError("unexpected response: " + *response);
    }
    if (i >= static_cast<size_t>(o.warmup)) result.ms.push_back(ms);
  }
  absl::StatusOr<E2eHistogram> after = ScrapeE2e(metrics_client);
  if (!after.ok()) return after.status();
  result.server_e2e_sum_ms += 1000.0 * (after->sum - before.sum);
  result.server_e2e_count += after->count - before.count;
  return absl::OkStatus();
}

// ---- driver ----------------------------------------------------------------------------------

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  const std::string self = argv[0];
  o.launch = self.substr(0, self.rfind('/') + 1) + "vllm-launch";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    auto int_flag = [&](int* out) {
      return has_value && absl::SimpleAtoi(argv[++i], out) && *out >= 0;
    };
    bool ok = true;
    if (a == "--launch" && has_value) {
      o.launch = argv[++i];
    } else if (a == "--model" && has_value) {
      o.model = argv[++i];
    } else if (a == "--requests") {
      ok = int_flag(&o.requests) && o.requests > 0;
    } else if (a == "--rounds") {
      ok = int_flag(&o.rounds) && o.rounds > 0;
    } else if (a == "--warmup") {
      ok = int_flag(&o.warmup);
    } else if (a == "--prompt-len") {
      ok = int_flag(&o.prompt_len) && o.prompt_len > 0;
    } else if (a == "--max-tokens") {
      ok = int_flag(&o.max_tokens) && o.max_tokens > 0;
    } else if (a == "-tp" || a == "--tensor-parallel-size") {
      ok = int_flag(&o.tp) && o.tp > 0;
    } else if (a == "--kv-cache-memory" && has_value) {
      o.kv_cache_memory = argv[++i];
    } else if (a == "--block-size") {
      ok = int_flag(&o.block_size) && o.block_size > 0;
    } else if (a == "--device" && has_value) {
      o.device = argv[++i];
    } else if (a == "--seed" && has_value) {
      ok = absl::SimpleAtoi(argv[++i], &o.seed);
    } else if (a == "--json" && has_value) {
      o.json_path = argv[++i];
    } else if (a == "--gap-us") {
      ok = int_flag(&o.gap_us);
    } else if (a == "--blas-threads") {
      ok = int_flag(&o.blas_threads);
    } else if (a == "--server-log" && has_value) {
      o.server_log = argv[++i];
    } else {
      ok = false;
    }
    if (!ok) return absl::InvalidArgumentError("bad flag or value: '" + a + "'");
  }
  if (o.requests < o.rounds) return absl::InvalidArgumentError("--requests < --rounds");
  return o;
}

absl::StatusOr<config::EngineArgs> EngineArgsFor(const Options& o) {
  config::EngineArgs args;
  args.config.model.model = o.model;
  absl::StatusOr<int64_t> kv = ParseBytes(o.kv_cache_memory);
  if (!kv.ok()) return kv.status();
  args.config.cache.kv_cache_memory_bytes = *kv;
  args.config.cache.block_size = o.block_size;
  args.config.cache.enable_prefix_caching = false;
  args.config.parallel.tensor_parallel_size = o.tp;
  args.worker_binary = o.launch;
  absl::StatusOr<config::Device> device = config::ParseDevice(o.device);
  if (!device.ok()) return device.status();
  args.config.device.device = *device;
  return args;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

void Report(const Options& o, const std::vector<ModeResult>& modes, const std::string& load) {
  std::printf(
      "serve_overhead: %s, %d-token prompts, %d output token(s), TP %d, %s, %d requests one at "
      "a time per mode in %d rounds (+%d warm-up each); load average %s\n\n",
      o.model.c_str(), o.prompt_len, o.max_tokens, o.tp, o.device.c_str(), o.requests, o.rounds,
      o.warmup, load.c_str());
  std::printf("| mode | requests | mean ms | p50 ms | p90 ms | p99 ms |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const ModeResult& m : modes) {
    std::printf("| %s | %zu | %.3f | %.3f | %.3f | %.3f |\n", m.name.c_str(), m.ms.size(),
                Mean(m.ms), Percentile(m.ms, 50), Percentile(m.ms, 90), Percentile(m.ms, 99));
  }
  std::printf("\n");
  const ModeResult& base = modes.front();
  for (size_t i = 1; i < modes.size(); ++i) {
    const ModeResult& m = modes[i];
    const double p50_overhead = Percentile(m.ms, 50) - Percentile(base.ms, 50);
    std::printf("overhead, %s − in-process: p50 %.3f ms, mean %.3f ms\n", m.name.c_str(),
                p50_overhead, Mean(m.ms) - Mean(base.ms));
    // The client's and the server's means cover the same requests, so a slow one (a preempted
    // process) counts in both and their difference is steadier than one across modes.
    if (const std::optional<double> server = m.ServerE2eMeanMs(); server.has_value()) {
      std::printf(
          "  server's e2e mean %.3f ms (vllm:e2e_request_latency_seconds): HTTP + JSON + client "
          "= client mean − server mean = %.3f ms; the rest of the p50 overhead, AsyncLLM + ZMQ "
          "+ engine-core process, %.3f ms\n",
          *server, Mean(m.ms) - *server, p50_overhead - (Mean(m.ms) - *server));
    }
  }
}

absl::Status WriteJson(const Options& o, const std::vector<ModeResult>& modes,
                       const std::string& load) {
  json out = {{"model", o.model},     {"prompt_len", o.prompt_len}, {"max_tokens", o.max_tokens},
              {"tp", o.tp},           {"device", o.device},         {"warmup", o.warmup},
              {"load_average", load}, {"modes", json::array()}};
  out["rounds"] = o.rounds;
  out["blas_threads"] = o.blas_threads;
  out["gap_us"] = o.gap_us;
  out["kv_cache_memory"] = o.kv_cache_memory;
  out["block_size"] = o.block_size;
  for (const ModeResult& m : modes) {
    json j = {{"mode", m.name},
              {"requests", m.ms.size()},
              {"mean_ms", Mean(m.ms)},
              {"p50_ms", Percentile(m.ms, 50)},
              {"p90_ms", Percentile(m.ms, 90)},
              {"p99_ms", Percentile(m.ms, 99)},
              {"overhead_p50_ms", Percentile(m.ms, 50) - Percentile(modes.front().ms, 50)},
              {"overhead_mean_ms", Mean(m.ms) - Mean(modes.front().ms)}};
    if (m.ServerE2eMeanMs().has_value()) {
      j["server_e2e_mean_ms"] = *m.ServerE2eMeanMs();
      j["http_json_client_mean_ms"] = Mean(m.ms) - *m.ServerE2eMeanMs();
    }
    out["modes"].push_back(std::move(j));
  }
  std::ofstream f(o.json_path);
  f << out.dump(2) << "\n";
  if (!f) return absl::InternalError("cannot write " + o.json_path);
  return absl::OkStatus();
}

// One round: a fresh in-process engine, then (after it is gone, so the two never share the
// CPU) a fresh server for both HTTP modes; the same prompts everywhere.
absl::Status RunRound(const Options& o, const config::EngineArgs& args, int round,
                      std::vector<ModeResult>& modes) {
  std::vector<std::vector<int32_t>> prompts;
  {
    auto engine = frontend::LLMEngine::Create(args);
    if (!engine.ok()) return engine.status();
    // The worker leaves OpenBLAS alone when OPENBLAS_NUM_THREADS is set (main sets it for the
    // server and any worker process), and this process's OpenBLAS read its environment at load
    // time: set the count here.
    if (o.blas_threads > 0) kernels::cpu::SetBlasNumThreads(o.blas_threads);
    const int per_round = o.warmup + o.requests / o.rounds + (round < o.requests % o.rounds);
    prompts = MakePrompts(per_round, o.prompt_len, (*engine)->model_config().vocab_size,
                          o.seed + static_cast<uint64_t>(round));
    if (absl::Status s = RunInProcess(o, prompts, **engine, modes[0]); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<Server>> server = StartServer(o);
  if (!server.ok()) return server.status();
  for (size_t m = 1; m < modes.size(); ++m) {
    const bool keep_alive = m == 1;
    if (absl::Status s = RunHttp(o, prompts, (*server)->port, keep_alive, modes[m]); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = StopServer(**server); !s.ok()) {
    return absl::InternalError("stopping the server (SIGINT): " + std::string(s.message()));
  }
  return absl::OkStatus();
}

absl::Status Run(const Options& o) {
  absl::StatusOr<config::EngineArgs> args = EngineArgsFor(o);
  if (!args.ok()) return args.status();
  const std::string load = LoadAverage();
  std::vector<ModeResult> modes(3);
  modes[0].name = "in-process LLMEngine";
  modes[1].name = "HTTP, one keep-alive connection";
  modes[2].name = "HTTP, new connection per request";
  for (int round = 0; round < o.rounds; ++round) {
    if (absl::Status s = RunRound(o, *args, round, modes); !s.ok()) return s;
  }
  const std::string loads = load + " before, " + LoadAverage() + " after";
  Report(o, modes, loads);
  if (!o.json_path.empty()) return WriteJson(o, modes, loads);
  return absl::OkStatus();
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  // stdout carries the results; the engine's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("engine"));
  absl::StatusOr<vllm::bench::Options> o = vllm::bench::ParseArgs(argc, argv);
  if (!o.ok()) {
    std::fprintf(
        stderr,
        "%s\nusage: %s [--launch PATH] [--model DIR] [--requests N] [--rounds N] [--warmup N] "
        "[--prompt-len N] [--max-tokens N] [-tp N] [--kv-cache-memory SIZE] "
        "[--block-size N] [--device cpu|cuda|auto] [--blas-threads N] [--gap-us N] [--seed N] "
        "[--json FILE] "
        "[--server-log FILE]\n",
        std::string(o.status().message()).c_str(), argv[0]);
    return 2;
  }
  if (o->blas_threads > 0) {
    setenv("OPENBLAS_NUM_THREADS", std::to_string(o->blas_threads).c_str(), 1);
  }
  if (absl::Status s = vllm::bench::Run(*o); !s.ok()) {
    std::fprintf(stderr, "serve_overhead: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
