// What the HTTP flags of `vllm serve` do, as pure functions (frontend/openai/http_middleware.h,
// stats_logger.h): --root-path routing, --api-key with several keys, CORS as Starlette 1.x's
// CORSMiddleware with vLLM's arguments, uvicorn's access line, vLLM's request-log lines under
// --max-log-len and its periodic stats line. The flags' parsing is vllm_serve_flags_test; their
// effect on a running server is serve_flags_test.
#include <optional>
#include <string>
#include <vector>

#include "frontend/openai/http_middleware.h"
#include "frontend/openai/stats_logger.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::frontend {
namespace {

using ::testing::Contains;
using ::testing::Pair;

std::optional<std::string> Find(const HeaderList& h, const std::string& name) {
  for (const auto& [n, v] : h) {
    if (n == name) return v;
  }
  return std::nullopt;
}

TEST(ServeHttpFlagsTest, RootPathAsStarlettesGetRoutePath) {
  EXPECT_EQ(RoutePath("/api/v1/models", "/api"), "/v1/models");
  EXPECT_EQ(RoutePath("/v1/models", "/api"), "/v1/models");  // not under it: as is
  EXPECT_EQ(RoutePath("/apiv1/models", "/api"), "/apiv1/models");
  EXPECT_EQ(RoutePath("/api", "/api"), "");  // no route
  EXPECT_EQ(RoutePath("/health", ""), "/health");
}

TEST(ServeHttpFlagsTest, ApiKeysAnyOneAcceptedUnderVllmsPrefixes) {
  const std::vector<std::string> keys = {"k1", "k2"};
  EXPECT_TRUE(ApiKeyAccepted(keys, "Bearer k1"));
  EXPECT_TRUE(ApiKeyAccepted(keys, "bearer k2"));  // the scheme in any case, as vLLM
  EXPECT_FALSE(ApiKeyAccepted(keys, "Bearer k3"));
  EXPECT_FALSE(ApiKeyAccepted(keys, "Basic k1"));
  EXPECT_FALSE(ApiKeyAccepted(keys, std::nullopt));
  EXPECT_TRUE(ApiKeyAccepted({}, std::nullopt));
  for (const char* p : {"/v1/models", "/v2/x", "/inference/v1/generate", "/cohere/v2/chat"}) {
    EXPECT_TRUE(NeedsApiKey(p)) << p;
  }
  EXPECT_FALSE(NeedsApiKey("/health"));
  EXPECT_FALSE(NeedsApiKey("/tokenize"));
}

TEST(ServeHttpFlagsTest, CorsDefaultsRefuseCrossOrigin) {
  const CorsPolicy cors{HttpOptions{}};  // vLLM: allowed_origins [] (methods, headers ["*"])
  const CorsPolicy::Answer a = cors.Preflight("https://a.example", "POST", std::nullopt, false);
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.body, "Disallowed CORS origin");
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Methods"),
            "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, QUERY");
  EXPECT_EQ(Find(a.headers, "Access-Control-Max-Age"), "600");
  EXPECT_FALSE(Find(a.headers, "Access-Control-Allow-Origin").has_value());
  const HeaderList simple = cors.SimpleHeaders("https://a.example");
  EXPECT_FALSE(Find(simple, "Access-Control-Allow-Origin").has_value());
  EXPECT_EQ(Find(simple, "Vary"), "Origin");
}

TEST(ServeHttpFlagsTest, CorsWildcardAndExplicitOrigins) {
  HttpOptions all;
  all.allowed_origins = {"*"};
  const CorsPolicy star(all);
  CorsPolicy::Answer a = star.Preflight("https://b.example", "PUT", "X-Foo, Content-Type", false);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "OK");
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Headers"), "X-Foo, Content-Type");  // mirrored
  EXPECT_EQ(Find(star.SimpleHeaders("https://b.example"), "Access-Control-Allow-Origin"), "*");

  HttpOptions some;
  some.allowed_origins = {"https://a.example"};
  some.allowed_methods = {"GET", "POST"};
  some.allowed_headers = {"X-Custom"};
  some.allow_credentials = true;
  const CorsPolicy cors(some);
  a = cors.Preflight("https://a.example", "POST", "x-custom, accept", false);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Headers"),
            "Accept, Accept-Language, Content-Language, Content-Type, X-Custom");
  EXPECT_EQ(Find(a.headers, "Access-Control-Allow-Credentials"), "true");
  a = cors.Preflight("https://evil.example", "DELETE", "X-Other", true);
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.body, "Disallowed CORS origin, method, headers, private-network");
  const HeaderList simple = cors.SimpleHeaders("https://a.example");
  EXPECT_THAT(simple, Contains(Pair("Access-Control-Allow-Origin", "https://a.example")));
  EXPECT_THAT(simple, Contains(Pair("Access-Control-Allow-Credentials", "true")));
  EXPECT_FALSE(
      Find(cors.SimpleHeaders("https://evil.example"), "Access-Control-Allow-Origin").has_value());
}

TEST(ServeHttpFlagsTest, LogLinesAsVllmWritesThem) {
  EXPECT_EQ(AccessLogLine("127.0.0.1:5000", "GET", "/v1/models?x=1", 11, 200),
            "127.0.0.1:5000 - \"GET /v1/models?x=1 HTTP/1.1\" 200 OK");
  GenerateRequest r;
  r.request_id = "cmpl-1-0";
  r.prompt_text = "héllo 'world'\n";
  r.params.max_tokens = 5;
  r.params.temperature = 0;
  r.stop = {"\n"};
  const std::string line = RequestLogLine(r);
  EXPECT_EQ(line.rfind("Received request cmpl-1-0: params: SamplingParams(n=1, ", 0), 0) << line;
  EXPECT_NE(line.find("temperature=0.0, "), std::string::npos) << line;
  EXPECT_NE(line.find("stop=['\\n'], "), std::string::npos) << line;
  EXPECT_NE(line.find("max_tokens=5, "), std::string::npos) << line;
  EXPECT_TRUE(line.ends_with("extra_args=None), lora_request: None.")) << line;
  EXPECT_EQ(RequestDetailsLogLine(r, 3),
            "Request cmpl-1-0 details: prompt: 'hél', prompt_token_ids: None, prompt_embeds "
            "shape: None.");
  EXPECT_EQ(PythonStrRepr("it's"), "\"it's\"");
  GenerateRequest ids;
  ids.request_id = "x";
  ids.prompt_token_ids = {1, 2, 3, 4};
  EXPECT_NE(RequestDetailsLogLine(ids, 2).find("prompt: None, prompt_token_ids: [1, 2],"),
            std::string::npos);
  EXPECT_NE(RequestDetailsLogLine(ids, -1).find("[1, 2, 3]"), std::string::npos);  // ids[:-1]
  EXPECT_NE(RequestDetailsLogLine(ids, std::nullopt).find("[1, 2, 3, 4]"), std::string::npos);
}

TEST(ServeHttpFlagsTest, StatsLineAsVllmsLoggingStatLogger) {
  StatsLineValues v;
  v.engine_rank = 1;
  v.prompt_throughput = 12.34;
  v.generation_throughput = 5;
  v.running = 2;
  v.waiting = 3;
  v.kv_cache_usage = 0.125;
  EXPECT_EQ(StatsLogLine(v),
            "Engine 001: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 5.0 "
            "tokens/s, Running: 2 reqs, Waiting: 3 reqs, GPU KV cache usage: 12.5%");
  v.preemptions = 4;
  v.kv_cache_device = "CPU";
  v.prefix_hit_rate = 0.5;
  EXPECT_EQ(StatsLogLine(v),
            "Engine 001: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 5.0 "
            "tokens/s, Running: 2 reqs, Waiting: 3 reqs, Preemptions: 4, CPU KV cache usage: "
            "12.5%, Prefix cache hit rate: 50.0%");
}

}  // namespace
}  // namespace vllm::frontend
