// kv_transfer_params in the OpenAI API: the request field parsed strictly (both endpoints,
// every engine request of a fan-out), and the responses' top-level field (non-streaming bodies,
// stream chunks), without a server.
#include "frontend/openai/kv_transfer_params.h"

#include <string>
#include <vector>

#include "frontend/openai/api_server_response.h"
#include "frontend/openai/openai_protocol.h"
#include "gtest/gtest.h"
#include "kv_transfer/codec.h"

namespace vllm::frontend {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr char kModel[] = "m";

// A completion body with `kv` as its kv_transfer_params (JSON text).
absl::StatusOr<CompletionRequest> Completion(const std::string& kv) {
  return ParseCompletionRequest(
      ordered_json::parse(R"({"prompt": "hi", "kv_transfer_params": )" + kv + "}"), kModel);
}

// Expects a 400 whose param is `param` and whose message contains `text`.
void ExpectRefused(const std::string& kv, const std::string& param, const std::string& text) {
  absl::StatusOr<CompletionRequest> r = Completion(kv);
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << kv << ": " << r.status();
  EXPECT_EQ(HttpStatusFor(r.status()), 400);
  EXPECT_EQ(ErrorParam(r.status()), param) << r.status();
  EXPECT_NE(std::string(r.status().message()).find(text), std::string::npos) << r.status();
}

kv_transfer::KVTransferParams PrefillAnswer() {
  kv_transfer::KVTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = "prefill-0";
  p.remote_request_id = "cmpl-abc-0";
  p.remote_host = "10.0.0.7";
  p.remote_port = 14579;
  p.remote_block_ids = {3, 4, 5};
  p.tp_size = 2;
  p.remote_num_tokens = 40;
  return p;
}

TEST(KvTransferParamsTest, AbsentOrNullIsUnset) {
  auto absent = ParseCompletionRequest(ordered_json::parse(R"({"prompt": "hi"})"), kModel);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->options.kv_transfer_params.has_value());
  auto null = Completion("null");
  ASSERT_TRUE(null.ok()) << null.status();
  EXPECT_FALSE(null->options.kv_transfer_params.has_value());
  auto empty = Completion("{}");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->options.kv_transfer_params, kv_transfer::KVTransferParams{});
}

// What vLLM's disaggregated proxy sends a prefill instance, and what a NixlConnector prefill
// instance answers (with the keys that change nothing here at their neutral values).
TEST(KvTransferParamsTest, VllmProxyAndNixlParamsAreRead) {
  auto prefill = Completion(R"({"do_remote_decode": true, "do_remote_prefill": false,
      "remote_engine_id": null, "remote_block_ids": null, "remote_host": null,
      "remote_port": null})");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  kv_transfer::KVTransferParams want;
  want.do_remote_decode = true;
  EXPECT_EQ(prefill->options.kv_transfer_params, want);

  auto decode = ParseChatCompletionRequest(
      ordered_json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
          "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false,
          "remote_block_ids": [3, 4, 5], "remote_engine_id": "prefill-0",
          "remote_request_id": "cmpl-abc-0", "remote_host": "10.0.0.7", "remote_port": 14579,
          "tp_size": 2, "remote_num_tokens": 40, "dcp_size": 1, "pp_size": null,
          "remote_blocks_expiry_time": 1767225600.5, "remote_registration_generation": 3,
          "transfer_mode": "pull"}})"),
      kModel);
  ASSERT_TRUE(decode.ok()) << decode.status();
  EXPECT_EQ(decode->options.kv_transfer_params, PrefillAnswer());
}

TEST(KvTransferParamsTest, UnknownKeysAreRefusedByName) {
  ExpectRefused(R"({"do_remote_decode": true, "prompt_token_ids": [1]})",
                "kv_transfer_params.prompt_token_ids",
                "kv_transfer_params.prompt_token_ids is not supported");
  ExpectRefused(R"({"remote_tp_size": 2})", "kv_transfer_params.remote_tp_size", "not supported");
}

TEST(KvTransferParamsTest, WrongTypesAreRefusedNamingTheField) {
  ExpectRefused("[]", "kv_transfer_params", "must be an object");
  ExpectRefused(R"("x")", "kv_transfer_params", "must be an object");
  ExpectRefused(R"({"do_remote_decode": "yes"})", "kv_transfer_params.do_remote_decode",
                "a boolean");
  ExpectRefused(R"({"remote_engine_id": 7})", "kv_transfer_params.remote_engine_id", "a string");
  ExpectRefused(R"({"remote_host": ["h"]})", "kv_transfer_params.remote_host", "a string");
  ExpectRefused(R"({"remote_port": "14579"})", "kv_transfer_params.remote_port", "an integer");
  ExpectRefused(R"({"remote_port": 14579.0})", "kv_transfer_params.remote_port", "an integer");
  ExpectRefused(R"({"tp_size": true})", "kv_transfer_params.tp_size", "an integer");
  ExpectRefused(R"({"remote_block_ids": 3})", "kv_transfer_params.remote_block_ids", "an array");
  ExpectRefused(R"({"remote_block_ids": [1, "2"]})", "kv_transfer_params.remote_block_ids",
                "non-negative integers");
  ExpectRefused(R"({"remote_block_ids": [1.5]})", "kv_transfer_params.remote_block_ids",
                "non-negative integers");
}

TEST(KvTransferParamsTest, RangesAndSizesAreChecked) {
  ExpectRefused(R"({"remote_block_ids": [0, -1]})", "kv_transfer_params.remote_block_ids",
                "must be in [0, 2147483647]");
  ExpectRefused(R"({"remote_block_ids": [2147483648]})", "kv_transfer_params.remote_block_ids",
                "must be in");
  ExpectRefused(R"({"remote_port": 0})", "kv_transfer_params.remote_port", "[1, 65535]");
  ExpectRefused(R"({"remote_port": 65536})", "kv_transfer_params.remote_port", "[1, 65535]");
  ExpectRefused(R"({"tp_size": 0})", "kv_transfer_params.tp_size", "[1, 1024]");
  ExpectRefused(R"({"remote_num_tokens": -1})", "kv_transfer_params.remote_num_tokens",
                "must be in");
  ExpectRefused(R"({"remote_num_tokens": 18446744073709551615})",
                "kv_transfer_params.remote_num_tokens", "must be in");
  ExpectRefused(
      R"({"remote_engine_id": ")" + std::string(kv_transfer::kMaxEngineIdBytes + 1, 'e') + R"("})",
      "kv_transfer_params.remote_engine_id", "at most 256 bytes");
  ExpectRefused(R"({"remote_request_id": ")" +
                    std::string(kv_transfer::kMaxRequestIdBytes + 1, 'r') + R"("})",
                "kv_transfer_params.remote_request_id", "at most");
  std::string many = "[0";
  for (size_t i = 0; i < kv_transfer::kMaxRemoteBlockIds; ++i) many += ",0";
  ExpectRefused(R"({"remote_block_ids": )" + many + "]}", "kv_transfer_params.remote_block_ids",
                "block ids; at most");
}

TEST(KvTransferParamsTest, NixlKeysOnlyWithTheirNeutralValues) {
  EXPECT_TRUE(Completion(R"({"dcp_size": 1, "pp_size": 1})").ok());
  EXPECT_TRUE(Completion(R"({"dcp_size": null, "transfer_mode": "push"})").ok());
  ExpectRefused(R"({"pp_size": 2})", "kv_transfer_params.pp_size", "must be 1 or null");
  ExpectRefused(R"({"dcp_size": 4})", "kv_transfer_params.dcp_size", "must be 1 or null");
  ExpectRefused(R"({"pp_size": "1"})", "kv_transfer_params.pp_size", "an integer or null");
}

TEST(KvTransferParamsTest, EveryEngineRequestOfAFanOutCarriesThem) {
  auto r = Completion(R"({"do_remote_decode": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  r->options.n = 2;
  std::vector<Prompt> prompts = {Prompt{"a", {}}, Prompt{"b", {}}};
  for (const GenerateRequest& g : FanOut(prompts, r->options, "cmpl-1", 0.0)) {
    ASSERT_TRUE(g.kv_transfer_params.has_value());
    EXPECT_TRUE(g.kv_transfer_params->do_remote_decode);
  }
}

TEST(KvTransferParamsTest, JsonHasExactlyTheKeysAndParsesBack) {
  EXPECT_EQ(KvTransferParamsJson(PrefillAnswer()), json::parse(R"({"do_remote_decode": false,
      "do_remote_prefill": true, "remote_engine_id": "prefill-0",
      "remote_request_id": "cmpl-abc-0", "remote_host": "10.0.0.7", "remote_port": 14579,
      "remote_block_ids": [3, 4, 5], "tp_size": 2, "remote_num_tokens": 40})"));
  EXPECT_EQ(KvTransferParamsJson({}), json::parse(R"({"do_remote_decode": false,
      "do_remote_prefill": false, "remote_engine_id": null, "remote_request_id": null,
      "remote_host": null, "remote_port": null, "remote_block_ids": [], "tp_size": null,
      "remote_num_tokens": null})"));
  // A decode instance can be sent what a prefill instance answered.
  auto back = ParseKvTransferParams(
      ordered_json{{"kv_transfer_params", ordered_json(KvTransferParamsJson(PrefillAnswer()))}});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, PrefillAnswer());
}

// Non-streaming bodies: the first choice's at the top level, null when it has none.
TEST(KvTransferParamsTest, ResponsesCarryThemAtTheTopLevel) {
  for (ApiKind kind : {ApiKind::kCompletion, ApiKind::kChat}) {
    ResponseAssembler a(kind, {"id-1", 5, "m"}, 1, 1, false, false, false);
    GenerateOutput o;
    o.text_delta = "x";
    o.num_output_tokens = 1;
    a.OnOutput(0, o);
    o.finish_reason = core::FinishReason::kLength;
    o.kv_transfer_params = PrefillAnswer();
    a.OnOutput(0, o);
    json body = json::parse(a.Finish());
    EXPECT_EQ(body["kv_transfer_params"], KvTransferParamsJson(PrefillAnswer()));
    EXPECT_FALSE(body["choices"][0].contains("kv_transfer_params"));

    ResponseAssembler none(kind, {"id-2", 5, "m"}, 1, 1, false, false, false);
    o.kv_transfer_params.reset();
    none.OnOutput(0, o);
    json plain = json::parse(none.Finish());
    ASSERT_TRUE(plain.contains("kv_transfer_params"));
    EXPECT_TRUE(plain["kv_transfer_params"].is_null());
  }
}

// Streams (as vLLM): every content chunk has the key, null until the chunk finishing the
// choice; the chat role chunk and the usage chunk have none.
TEST(KvTransferParamsTest, StreamsCarryThemOnTheFinishingChunk) {
  for (ApiKind kind : {ApiKind::kCompletion, ApiKind::kChat}) {
    ResponseAssembler a(kind, {"id-1", 5, "m"}, 1, 1, true, true, false);
    const std::string start = a.Start();
    EXPECT_EQ(start.find("kv_transfer_params"), std::string::npos) << start;
    GenerateOutput o;
    o.text_delta = "x";
    o.num_output_tokens = 1;
    json first = json::parse(a.OnOutput(0, o).substr(6));
    ASSERT_TRUE(first.contains("kv_transfer_params")) << first;
    EXPECT_TRUE(first["kv_transfer_params"].is_null());
    o.finish_reason = core::FinishReason::kStop;
    o.kv_transfer_params = PrefillAnswer();
    json last = json::parse(a.OnOutput(0, o).substr(6));
    EXPECT_EQ(last["kv_transfer_params"], KvTransferParamsJson(PrefillAnswer()));
    const std::string tail = a.Finish();
    EXPECT_EQ(tail.find("kv_transfer_params"), std::string::npos) << tail;
  }
}

}  // namespace
}  // namespace vllm::frontend
