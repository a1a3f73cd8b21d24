// Every `vllm serve` flag of vLLM 0.33 (tests/fixtures/vllm_0_33/serve_flags.tsv, listed from
// vLLM's argument parser) is either parsed into our configuration with vLLM's spelling
// (aliases, --no-X negations) or refused at start-up with a message naming it and the reason:
// a flag vLLM adds shows up here as a failing row. Also vLLM's human-readable integers.
#include "launcher/vllm_serve_flags.h"

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {
namespace {

using ::testing::HasSubstr;

struct Row {
  std::string name, aliases, kind, group;
};

std::vector<Row> ReadTable() {
  std::ifstream in(std::string(VLLM_SOURCE_DIR) + "/tests/fixtures/vllm_0_33/serve_flags.tsv");
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    if (cols.size() != 4) {
      ADD_FAILURE() << "bad row: " << line;
      continue;
    }
    rows.push_back({cols[0], cols[1], cols[2], cols[3]});
  }
  return rows;
}

absl::StatusOr<ParsedServeArgs> Parse(const std::vector<std::string>& argv) {
  return ParseServeArgs(argv, "models/kjv-llama-tiny");
}

std::string KindName(VllmFlagKind k) {
  switch (k) {
    case VllmFlagKind::kBool:
      return "bool";
    case VllmFlagKind::kNegatable:
      return "negatable";
    case VllmFlagKind::kOptional:
      return "optional";
    case VllmFlagKind::kList:
      return "list";
    case VllmFlagKind::kValue:
      return "value";
  }
  return "?";
}

TEST(VllmServeFlagsTest, CompiledTableIsTheTestData) {
  const std::vector<Row> rows = ReadTable();
  ASSERT_EQ(rows.size(), VllmServeFlags().size());
  EXPECT_GE(rows.size(), 300u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const VllmServeFlag& f = VllmServeFlags()[i];
    EXPECT_EQ(rows[i].name, std::string(f.name));
    EXPECT_EQ(rows[i].aliases, std::string(f.aliases)) << rows[i].name;
    EXPECT_EQ(rows[i].kind, KindName(f.kind)) << rows[i].name;
    EXPECT_EQ(rows[i].group, std::string(f.group)) << rows[i].name;
  }
}

// Flags we support whose value "1" is not valid, or that need others beside them.
const std::map<std::string, std::vector<std::string>>& Samples() {
  static const auto* samples = new std::map<std::string, std::vector<std::string>>{
      {"--dtype", {"--dtype", "float32"}},
      {"--allowed-origins", {"--allowed-origins", R"(["*"])"}},
      {"--allowed-methods", {"--allowed-methods", R"(["GET"])"}},
      {"--allowed-headers", {"--allowed-headers", R"(["X-A"])"}},
      {"--uvicorn-log-level", {"--uvicorn-log-level", "debug"}},
      {"--load-format", {"--load-format", "dummy"}},
      {"--device", {"--device", "cpu"}},
      {"--scheduling-policy", {"--scheduling-policy", "priority"}},
      {"--distributed-executor-backend", {"--distributed-executor-backend", "mp"}},
      {"--kv-events-config", {"--kv-events-config", R"({"enable_kv_cache_events": false})"}},
      {"--kv-transfer-config",
       {"--kv-transfer-config",
        R"({"kv_connector": "OffloadingConnector", "kv_role": "kv_both"})"}},
      {"--speculative-config",
       {"--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 2})"}},
      {"--structured-outputs-config",
       {"--structured-outputs-config", R"({"backend": "xgrammar"})"}},
      {"--reasoning-parser", {"--reasoning-parser", "qwen3"}},
      {"--tool-call-parser", {"--tool-call-parser", "hermes"}},
      {"--enable-auto-tool-choice", {"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}},
      {"--data-parallel-rpc-port",
       {"--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "13345"}},
      {"--data-parallel-rank", {"-dp", "2", "--data-parallel-rank", "1"}},
      {"--data-parallel-start-rank", {"-dp", "2", "-dpl", "1", "--data-parallel-start-rank", "1"}},
      {"--data-parallel-external-lb", {"-dp", "2", "-dpn", "1", "--data-parallel-external-lb"}},
      {"--data-parallel-hybrid-lb", {"-dp", "4", "-dpl", "2", "--data-parallel-hybrid-lb"}},
      {"--headless", {"--headless", "-dp", "2", "-dpl", "1", "-dpr", "1"}},
      {"--node-rank", {"--node-rank", "0"}},
      {"--kv-offloading-backend", {"--kv-offloading-backend", "native"}},
      {"--kv-offloading-size", {"--kv-offloading-size", "1"}},
      {"--gpu-memory-utilization", {"--gpu-memory-utilization", "0.5"}},
      {"--max-model-len", {"--max-model-len", "1k"}},
      {"--tokenizer", {"--tokenizer", "models/kjv-llama-tiny"}},
      {"--override-generation-config", {"--override-generation-config", R"({"temperature": 0.5})"}},
      {"--chat-template-content-format", {"--chat-template-content-format", "openai"}},
      {"--default-chat-template-kwargs", {"--default-chat-template-kwargs", R"({"x": 1})"}},
      {"--enable-log-outputs", {"--enable-log-outputs", "--enable-log-requests"}},
  };
  return *samples;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> SampleArgv(const Row& row) {
  if (row.name == "--config") return {"--config", WriteFile("sample.yaml", "port: 8001\n")};
  if (auto it = Samples().find(row.name); it != Samples().end()) return it->second;
  if (row.kind == "bool" || row.kind == "negatable") return {row.name};
  return {row.name, "1"};
}

constexpr char kRefused[] = "vLLM's flag is not supported by vllm-launch: ";

// The whole table: each flag parses or is refused by name with a reason; so do its aliases
// and, where vLLM has it, its --no-X negation.
TEST(VllmServeFlagsTest, EveryVllmFlagIsParsedOrRefusedByName) {
  int supported = 0, refused = 0;
  std::vector<std::string> refused_names;
  for (const Row& row : ReadTable()) {
    const std::vector<std::string> argv = SampleArgv(row);
    auto p = Parse(argv);
    if (p.ok()) {
      ++supported;
      EXPECT_TRUE(p->args.has_value()) << row.name;
    } else {
      ++refused;
      refused_names.push_back(row.name);
      EXPECT_THAT(p.status().message(), HasSubstr(row.name + ": " + kRefused))
          << absl::StrJoin(argv, " ");
    }
    if (!row.aliases.empty() && !absl::StartsWith(row.aliases, "--")) {
      std::vector<std::string> aliased = argv;
      for (std::string& a : aliased) {
        if (a == row.name) a = std::vector<std::string>(absl::StrSplit(row.aliases, ','))[0];
      }
      auto q = Parse(aliased);
      EXPECT_EQ(q.ok(), p.ok()) << absl::StrJoin(aliased, " ") << ": " << q.status();
    }
    if (row.kind == "negatable") {
      const std::string no = "--no-" + row.name.substr(2);
      auto q = Parse({no});
      if (p.ok()) {
        EXPECT_TRUE(q.ok()) << no << ": " << q.status();
      } else {
        EXPECT_THAT(q.status().message(), HasSubstr(no + ": " + kRefused));
      }
    }
  }
  std::printf("vLLM 0.33 serve flags: %d supported, %d refused: %s\n", supported, refused,
              absl::StrJoin(refused_names, " ").c_str());
  EXPECT_GE(supported, 40);
}

TEST(VllmServeFlagsTest, NegationsOfTheIssue) {
  auto p = Parse({"--enforce-eager", "--no-enforce-eager"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->args->config.model.enforce_eager);
  EXPECT_TRUE(Parse({"--no-data-parallel-hybrid-lb"}).ok());
  EXPECT_TRUE(Parse({"--no-data-parallel-external-lb"}).ok());
  auto q = Parse({"--no-enable-prefix-caching"});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FALSE(q->args->config.cache.enable_prefix_caching);
  // A flag that is neither ours nor vLLM's stays an unknown one, and a negation vLLM lacks.
  EXPECT_FALSE(Parse({"--disable-log-requests"}).ok());
  EXPECT_FALSE(Parse({"--no-max-model-len"}).ok());
}

TEST(VllmServeFlagsTest, MaxModelLenAsVllmParsesIt) {
  const std::vector<std::pair<std::string, int32_t>> cases = {
      {"2048", 2048}, {"1k", 1000}, {"1K", 1024}, {"2m", 2000000},
      {"auto", 0},    {"AUTO", 0},  {"-1", 0},    {"25.6k", 25600}};
  for (const auto& [text, want] : cases) {
    auto p = Parse({"--max-model-len", text});
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    EXPECT_EQ(p->args->config.model.max_model_len, want) << text;
    auto q = Parse({"--max-model-len=" + text});
    ASSERT_TRUE(q.ok()) << text << ": " << q.status();
    EXPECT_EQ(q->args->config.model.max_model_len, want) << text;
  }
  for (const std::string bad : {"1.5K", "k", "0", "-2", "1x", "", "1kk"}) {
    auto p = Parse({"--max-model-len=" + bad});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr("--max-model-len")) << bad;
  }
}

TEST(VllmServeFlagsTest, HumanReadableInts) {
  EXPECT_EQ(*ParseHumanReadableInt("--x", "1G", false), int64_t{1} << 30);
  EXPECT_EQ(*ParseHumanReadableInt("--x", "1g", false), 1000000000);
  EXPECT_EQ(*ParseHumanReadableInt("--x", "2T", false), int64_t{2} << 40);
  EXPECT_EQ(*ParseHumanReadableInt("--x", " 7 ", false), 7);
  EXPECT_FALSE(ParseHumanReadableInt("--x", "auto", false).ok());
  EXPECT_THAT(ParseHumanReadableInt("--x", "1.5M", false).status().message(),
              HasSubstr("decimals are not allowed"));
  auto p = Parse({"--kv-cache-memory-bytes", "512M", "--max-num-batched-tokens", "4k"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->config.cache.kv_cache_memory_bytes, int64_t{512} << 20);
  EXPECT_EQ(p->args->config.scheduler.max_num_batched_tokens, 4000);
}

TEST(VllmServeFlagsTest, ApiKeyTakesVllmsNargs) {
  auto p = Parse({"--api-key", "k1"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->http.api_keys, std::vector<std::string>{"k1"});
  auto q = Parse({"--api-key", "a", "b", "--port", "9001"});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->args->http.api_keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(q->args->port, 9001);
}

TEST(VllmServeFlagsTest, HttpFlagsAsVllmParsesThem) {
  auto p = Parse({"--root-path", "/api", "--allowed-origins", R"(["https://a.example"])",
                  "--allowed-methods", R"(["GET", "POST"])", "--allow-credentials",
                  "--uvicorn-log-level", "warning", "--disable-uvicorn-access-log",
                  "--enable-log-requests", "--max-log-len", "10", "--disable-log-stats"});
  ASSERT_TRUE(p.ok()) << p.status();
  const frontend::HttpOptions& h = p->args->http;
  EXPECT_EQ(h.root_path, "/api");
  EXPECT_EQ(h.allowed_origins, std::vector<std::string>{"https://a.example"});
  EXPECT_EQ(h.allowed_methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(h.allowed_headers, std::vector<std::string>{"*"});
  EXPECT_TRUE(h.allow_credentials);
  EXPECT_EQ(h.log_level, frontend::HttpLogLevel::kWarning);
  EXPECT_FALSE(h.access_log);
  EXPECT_TRUE(h.log_requests);
  EXPECT_EQ(h.max_log_len, 10);
  EXPECT_FALSE(h.log_stats);
  auto d = Parse({"--no-enable-log-requests", "--no-allow-credentials", "--max-log-len", "None"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->args->http.log_requests);
  EXPECT_FALSE(d->args->http.allow_credentials);
  EXPECT_FALSE(d->args->http.max_log_len.has_value());
  EXPECT_TRUE(d->args->http.log_stats);
  EXPECT_TRUE(d->args->http.allowed_origins.empty());  // vLLM: no CORS by default
  EXPECT_THAT(Parse({"--allowed-origins", "https://a"}).status().message(),
              HasSubstr("--allowed-origins: 'https://a' is not a JSON list"));
  EXPECT_FALSE(Parse({"--uvicorn-log-level", "INFO"}).ok());  // vLLM's choices are lower case
  EXPECT_THAT(Parse({"--max-log-len", "x"}).status().message(), HasSubstr("--max-log-len"));
}

// vLLM's Frontend flags of the HTTP server (launcher/serve_args_frontend.cc): defaults as
// vLLM's FrontendArgs and launcher.py (h11: 4194304 bytes, 256 headers), its --no-X forms, the
// comma-separated paths split and stripped as vLLM's server_utils, a negative interval refused
// with vLLM's message.
TEST(VllmServeFlagsTest, HttpServerFlagsAsVllmParsesThem) {
  auto d = Parse({});
  ASSERT_TRUE(d.ok()) << d.status();
  const frontend::HttpOptions& def = d->args->http;
  EXPECT_FALSE(def.request_id_headers);
  EXPECT_FALSE(def.disable_fastapi_docs);
  EXPECT_TRUE(def.access_log_skip_paths.empty());
  EXPECT_EQ(def.h11_max_incomplete_event_size, 4194304);
  EXPECT_EQ(def.h11_max_header_count, 256);
  EXPECT_FALSE(def.server_load_tracking);
  EXPECT_EQ(def.sse_keep_alive_interval_s, 0);
  auto p = Parse({"--enable-request-id-headers", "--disable-fastapi-docs",
                  "--disable-access-log-for-endpoints", " /health, ,/metrics ,/ping",
                  "--h11-max-incomplete-event-size", "8192", "--h11-max-header-count", "20",
                  "--enable-server-load-tracking", "--sse-keep-alive-interval", "15"});
  ASSERT_TRUE(p.ok()) << p.status();
  const frontend::HttpOptions& h = p->args->http;
  EXPECT_TRUE(h.request_id_headers);
  EXPECT_TRUE(h.disable_fastapi_docs);
  EXPECT_EQ(h.access_log_skip_paths, (std::vector<std::string>{"/health", "/metrics", "/ping"}));
  EXPECT_EQ(h.h11_max_incomplete_event_size, 8192);
  EXPECT_EQ(h.h11_max_header_count, 20);
  EXPECT_TRUE(h.server_load_tracking);
  EXPECT_EQ(h.sse_keep_alive_interval_s, 15);
  auto n = Parse({"--enable-request-id-headers", "--no-enable-request-id-headers",
                  "--no-disable-fastapi-docs", "--no-enable-server-load-tracking"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_FALSE(n->args->http.request_id_headers);
  EXPECT_FALSE(n->args->http.disable_fastapi_docs);
  EXPECT_FALSE(n->args->http.server_load_tracking);
  EXPECT_THAT(Parse({"--sse-keep-alive-interval", "-1"}).status().message(),
              HasSubstr("Error: --sse-keep-alive-interval must be a non-negative integer (0 "
                        "disables keep-alive comments)."));
  EXPECT_FALSE(Parse({"--sse-keep-alive-interval", "1.5"}).ok());  // vLLM's int
  EXPECT_FALSE(Parse({"--h11-max-header-count", "x"}).ok());
}

TEST(VllmServeFlagsTest, RefusalsNameTheFlagAndWhy) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--enable-lora"}, "--enable-lora: vLLM's flag is not supported by vllm-launch: LoRA"},
      {{"-q", "awq"}, "--quantization: vLLM's flag is not supported by vllm-launch: quantized"},
      {{"--limit-mm-per-prompt", "{}"}, "multimodal"},
      {{"--ssl-ciphers=X"}, "--ssl-ciphers: "},
      {{"--ssl-keyfile", "k.pem"}, "TLS"},
      {{"--no-trust-remote-code"}, "--no-trust-remote-code: "},
      {{"-ep"}, "--enable-expert-parallel: vLLM's flag is not supported"},
  };
  for (const auto& [argv, want] : cases) {
    auto p = Parse(argv);
    ASSERT_FALSE(p.ok()) << absl::StrJoin(argv, " ");
    EXPECT_THAT(p.status().message(), HasSubstr(want));
  }
}

TEST(VllmServeFlagsTest, HelpByGroupOrKeywordAsVllm) {
  auto group = Parse({"--help=cacheconfig"});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_FALSE(group->args.has_value());
  EXPECT_THAT(group->text, HasSubstr("--block-size"));
  EXPECT_THAT(group->text, HasSubstr("--kv-cache-dtype: the KV cache keeps the model's dtype"));
  EXPECT_THAT(group->text, ::testing::Not(HasSubstr("--tensor-parallel-size")));
  auto keyword = Parse({"--help=lora"});
  ASSERT_TRUE(keyword.ok()) << keyword.status();
  EXPECT_THAT(keyword->text, HasSubstr("--enable-lora: LoRA adapters are not supported"));
  EXPECT_THAT(keyword->text, ::testing::Not(HasSubstr("--block-size")));
  auto all = Parse({"--help=all"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(all->text, HasSubstr("--tensor-parallel-size"));
  auto none = Parse({"--help=zzz"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(none->text, HasSubstr("No group or arguments matching 'zzz'"));
}

TEST(VllmServeFlagsTest, TokenizerOnlyTheModels) {
  EXPECT_TRUE(Parse({"my/model", "--tokenizer", "my/model"}).ok());
  auto p = Parse({"my/model", "--tokenizer", "other/tok"});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("--tokenizer 'other/tok'"));
}

TEST(VllmServeFlagsTest, UnderscoresAsVllm) {
  auto p = Parse({"--max_model_len=300", "--max_num_seqs", "3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->config.model.max_model_len, 300);
  EXPECT_EQ(p->args->config.scheduler.max_num_seqs, 3);
}

TEST(VllmServeFlagsTest, ConfigYamlAsVllmAndTheCommandLineWins) {
  const std::string path = WriteFile("serve.yaml",
                                     "# vLLM's serve config\n"
                                     "port: 8123\n"
                                     "max_model_len: 1k\n"
                                     "enable-prefix-caching: false\n"
                                     "enforce-eager: true\n"
                                     "served-model-name: [a, b]\n"
                                     "max-num-seqs: 5\n"
                                     "speculative-config:\n"
                                     "  method: ngram\n"
                                     "  num_speculative_tokens: 2\n");
  auto p = Parse({"my/model", "--config", path, "--max-num-seqs", "7", "--enable-prefix-caching"});
  ASSERT_TRUE(p.ok()) << p.status();
  const ServeArgs& a = *p->args;
  EXPECT_EQ(a.config.model.model, "my/model");
  EXPECT_EQ(a.port, 8123);
  EXPECT_EQ(a.config.model.max_model_len, 1000);
  EXPECT_TRUE(a.config.model.enforce_eager);
  EXPECT_TRUE(a.config.cache.enable_prefix_caching);  // the command line's
  EXPECT_EQ(a.config.scheduler.max_num_seqs, 7);      // the command line's
  EXPECT_EQ(a.served_model_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.config.speculative.num_speculative_tokens, 2);
  auto q = Parse({"--config=" + path});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FALSE(q->args->config.cache.enable_prefix_caching);
  EXPECT_EQ(q->args->config.scheduler.max_num_seqs, 5);

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--config", WriteFile("c.json", "{}")}, "--config: the config file must be .yaml"},
      {{"--config", ::testing::TempDir() + "missing.yaml"}, "--config "},
      {{"--config", WriteFile("list.yaml", "- a\n")}, "expected a mapping"},
      {{"--config", WriteFile("lora.yaml", "enable-lora: true\n")},
       "--enable-lora: vLLM's flag is not supported"},
      {{"--config", path, "--config", path}, "more than one config file"},
      {{"--config"}, "--config: needs a file"},
  };
  for (const auto& [argv, want] : bad) {
    auto r = Parse(argv);
    ASSERT_FALSE(r.ok()) << absl::StrJoin(argv, " ");
    EXPECT_THAT(r.status().message(), HasSubstr(want));
  }
}

// --generation-config, --override-generation-config, --chat-template-content-format: bound to
// ServeArgs::serving; a value refused names the flag (the file is read when the server starts).
TEST(VllmServeFlagsTest, RequestDefaultFlags) {
  auto d = Parse({});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->args->serving, frontend::ServingFlags{});  // vLLM's defaults: auto, none, auto
  auto p = Parse({"--generation-config", "vllm", "--override-generation-config",
                  R"({"max_new_tokens": 4})", "--chat-template-content-format", "string"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->args->serving.generation_config, "vllm");
  EXPECT_EQ(p->args->serving.override_generation_config, R"({"max_new_tokens": 4})");
  EXPECT_EQ(p->args->serving.chat_template_content_format, "string");
  EXPECT_THAT(Parse({"--override-generation-config", "{"}).status().message(),
              HasSubstr("--override-generation-config"));
  EXPECT_THAT(
      Parse({"--override-generation-config", R"({"temperature": "hot"})"}).status().message(),
      HasSubstr("--override-generation-config: temperature must be a number"));
  EXPECT_THAT(Parse({"--chat-template-content-format", "html"}).status().message(),
              HasSubstr("--chat-template-content-format: 'html' is not one of"));
  auto q = Parse({"--default-chat-template-kwargs", R"({"enable_thinking": false})",
                  "--return-tokens-as-token-ids", "--enable-force-include-usage"});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->args->serving.default_chat_template_kwargs, R"({"enable_thinking": false})");
  EXPECT_TRUE(q->args->serving.return_tokens_as_token_ids);
  EXPECT_TRUE(q->args->serving.enable_force_include_usage);
  auto n = Parse({"--no-return-tokens-as-token-ids", "--no-enable-force-include-usage"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_FALSE(n->args->serving.return_tokens_as_token_ids);
  EXPECT_THAT(Parse({"--default-chat-template-kwargs", "[1]"}).status().message(),
              HasSubstr("--default-chat-template-kwargs: not a JSON object"));
}

// --response-role, --enable-prompt-tokens-details, --enable-per-request-metrics,
// --enable-log-outputs, --enable-log-deltas: vLLM's defaults, their --no-X forms, and vLLM's
// checks across flags with its messages.
TEST(VllmServeFlagsTest, ResponseFlags) {
  auto d = Parse({});
  ASSERT_TRUE(d.ok()) << d.status();
  const frontend::ServingFlags& def = d->args->serving;
  EXPECT_EQ(def.response_role, "assistant");
  EXPECT_FALSE(def.enable_prompt_tokens_details);
  EXPECT_FALSE(def.enable_per_request_metrics);
  EXPECT_FALSE(def.enable_log_outputs);
  EXPECT_TRUE(def.enable_log_deltas);
  auto p = Parse({"--response-role", "narrator", "--enable-prompt-tokens-details",
                  "--enable-per-request-metrics", "--enable-log-requests", "--enable-log-outputs",
                  "--no-enable-log-deltas"});
  ASSERT_TRUE(p.ok()) << p.status();
  const frontend::ServingFlags& s = p->args->serving;
  EXPECT_EQ(s.response_role, "narrator");
  EXPECT_TRUE(s.enable_prompt_tokens_details);
  EXPECT_TRUE(s.enable_per_request_metrics);
  EXPECT_TRUE(s.enable_log_outputs);
  EXPECT_FALSE(s.enable_log_deltas);
  EXPECT_THAT(Parse({"--enable-log-outputs"}).status().message(),
              HasSubstr("Error: --enable-log-outputs requires --enable-log-requests"));
  EXPECT_THAT(Parse({"--enable-per-request-metrics", "--disable-log-stats"}).status().message(),
              HasSubstr("Error: --enable-per-request-metrics requires engine statistics logging; "
                        "remove --disable-log-stats to enable per-request metrics."));
  auto n = Parse({"--enable-prompt-tokens-details", "--no-enable-prompt-tokens-details",
                  "--no-enable-log-outputs", "--no-enable-per-request-metrics"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_FALSE(n->args->serving.enable_prompt_tokens_details);
}

}  // namespace
}  // namespace vllm::launcher
