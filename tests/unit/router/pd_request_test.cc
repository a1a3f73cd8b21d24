// P/D disaggregation's request rewriting (router/pd_request.h): the prefill instance's body,
// the kv_transfer_params of its answer, the decode instance's body.
#include "router/pd_request.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::router {
namespace {

using nlohmann::json;

const json kDoRemoteDecode = {{"do_remote_decode", true},    {"do_remote_prefill", false},
                              {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                              {"remote_host", nullptr},      {"remote_port", nullptr}};

TEST(PdRequestTest, PrefillOfAStreamedCompletion) {
  auto client = ParsePdRequestBody(
      R"({"model": "m", "prompt": "In the beginning", "max_tokens": 30, "stream": true,
          "stream_options": {"include_usage": true}, "temperature": 0.5, "min_tokens": 4,
          "kv_transfer_params": {"do_remote_prefill": true}})");
  ASSERT_TRUE(client.ok()) << client.status();
  const json prefill = PrefillRequest(*client);
  EXPECT_EQ(prefill["max_tokens"], 1);
  EXPECT_EQ(prefill["stream"], false);
  EXPECT_FALSE(prefill.contains("stream_options"));
  EXPECT_FALSE(prefill.contains("min_tokens"));
  EXPECT_FALSE(prefill.contains("max_completion_tokens"));
  EXPECT_EQ(prefill["kv_transfer_params"], kDoRemoteDecode);  // the client's are replaced
  // The rest as the client sent it: the prefill computes the prompt the decode will see.
  EXPECT_EQ(prefill["model"], "m");
  EXPECT_EQ(prefill["prompt"], "In the beginning");
  EXPECT_DOUBLE_EQ(prefill["temperature"].get<double>(), 0.5);
  // The client's own body is untouched.
  EXPECT_EQ((*client)["max_tokens"], 30);
  EXPECT_EQ((*client)["stream"], true);
}

TEST(PdRequestTest, PrefillOfAChat) {
  auto chat = ParsePdRequestBody(
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 50})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  const json prefill = PrefillRequest(*chat);
  EXPECT_EQ(prefill["max_completion_tokens"], 1);
  EXPECT_EQ(prefill["max_tokens"], 1);
  EXPECT_EQ(prefill["stream"], false);
  EXPECT_EQ(prefill["messages"], (*chat)["messages"]);
  EXPECT_EQ(prefill["kv_transfer_params"], kDoRemoteDecode);
  // Without max_completion_tokens none is added; max_tokens is set either way.
  auto plain = ParsePdRequestBody(R"({"messages": []})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(PrefillRequest(*plain).contains("max_completion_tokens"));
  EXPECT_EQ(PrefillRequest(*plain)["max_tokens"], 1);
}

TEST(PdRequestTest, DecodeGetsTheClientsBodyAndThePrefillsParams) {
  auto client = ParsePdRequestBody(
      R"({"prompt": [1, 2, 3], "max_tokens": 30, "stream": true,
          "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(client.ok());
  const json params = {{"do_remote_prefill", true},  {"do_remote_decode", false},
                       {"remote_engine_id", "e-1"},  {"remote_block_ids", {4, 5}},
                       {"remote_host", "10.0.0.1"},  {"remote_port", 5600},
                       {"remote_request_id", "r-9"}, {"tp_size", 1}};
  const json decode = DecodeRequest(*client, params);
  EXPECT_EQ(decode["kv_transfer_params"], params);
  json expected = *client;
  expected["kv_transfer_params"] = params;
  EXPECT_EQ(decode, expected);
  // Round trip through text as the router sends it.
  EXPECT_EQ(json::parse(DumpJson(decode)), decode);
}

TEST(PdRequestTest, KvTransferParamsOfAPrefillAnswer) {
  auto params = KvTransferParamsOf(
      R"({"id": "cmpl-1", "choices": [{"text": "x"}],
          "kv_transfer_params": {"do_remote_prefill": true, "remote_block_ids": [1],
                                 "remote_engine_id": "e", "remote_host": "h",
                                 "remote_port": 1}})");
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ((*params)["remote_engine_id"], "e");
  EXPECT_EQ((*params)["remote_block_ids"], json::array({1}));
  for (const char* bad :
       {"", "not json", "[]", "{}", R"({"kv_transfer_params": null})",
        R"({"kv_transfer_params": [1]})", R"({"choices": [{"kv_transfer_params": {}}]})"}) {
    EXPECT_FALSE(KvTransferParamsOf(bad).ok()) << bad;
  }
}

TEST(PdRequestTest, RefusesWhatIsNotABoundedObject) {
  for (const char* bad : {"", "null", "[]", "\"x\"", "{", "not json", "{\"a\": 1e999}"}) {
    EXPECT_FALSE(ParsePdRequestBody(bad).ok()) << bad;
  }
  // Nesting past base::kMaxJsonDepth is refused before a document is built (no stack
  // overflow in what touches it next).
  const std::string deep =
      "{\"prompt\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(ParsePdRequestBody(deep).ok());
  const std::string deep_answer =
      "{\"kv_transfer_params\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(KvTransferParamsOf(deep_answer).ok());
}

TEST(PdRequestTest, DumpNeverThrows) {
  const json j = {{"prompt", std::string("bad \xff utf-8")}};
  const std::string text = DumpJson(j);
  EXPECT_NE(text.find("bad "), std::string::npos);
  EXPECT_TRUE(json::accept(text));
}

}  // namespace
}  // namespace vllm::router
