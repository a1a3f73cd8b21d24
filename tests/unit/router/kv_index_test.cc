// kv_aware's pieces without a network: the KV-event index (stored, removed, cleared, chained
// through parent hashes, predictions and their expiry, bounds), the policy's choices, the
// --kv-event-source syntax, and the router's tokenization of request bodies against the
// bundled model's tokenizer and chat template (what the API server computes).
#include "router/kv_index.h"

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "frontend/jinja/chat_template.h"
#include "frontend/jinja/chat_template_input.h"
#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/kv_event_subscriber.h"
#include "router/policy.h"
#include "router/router.h"

namespace vllm::router {
namespace {

using kv_events::KvAllBlocksCleared;
using kv_events::KvBlockRemoved;
using kv_events::KvBlockStored;
using kv_events::KvEventBatch;

constexpr int kBlock = 4;
const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

std::vector<int32_t> Tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// BlockStored for blocks [from, to) of `tokens`, with engine hashes base + block index.
KvBlockStored Stored(const std::vector<int32_t>& tokens, int from, int to, uint64_t base) {
  KvBlockStored s;
  s.block_size = kBlock;
  if (from > 0) s.parent_block_hash = base + from - 1;
  for (int b = from; b < to; ++b) {
    s.block_hashes.push_back(base + b);
    s.token_ids.insert(s.token_ids.end(), tokens.begin() + b * kBlock,
                       tokens.begin() + (b + 1) * kBlock);
  }
  return s;
}

KvEventBatch Batch(std::vector<kv_events::KvEvent> events) {
  KvEventBatch b;
  b.events = std::move(events);
  return b;
}

TEST(ChainHashTest, DependsOnEveryTokenAndTheParent) {
  const auto t = Tokens(8);
  const auto h = ChainHashes(t, kBlock);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(ChainHashes(Tokens(9), kBlock), h);  // a partial block has no hash
  auto other = t;
  other[1] = 7;
  const auto h2 = ChainHashes(other, kBlock);
  EXPECT_NE(h2[0], h[0]);
  EXPECT_NE(h2[1], h[1]);  // same tokens in block 1, different parent
  EXPECT_TRUE(ChainHashes(t, 0).empty());
}

TEST(KvIndexTest, StoredEventsMatchPrefixesChainedThroughParents) {
  KvIndex index;
  const auto t = Tokens(20);  // 5 blocks
  // Stored in two events, the second naming the first's last block as its parent.
  index.Apply("w", 0, Batch({Stored(t, 0, 2, 1000)}));
  index.Apply("w", 0, Batch({Stored(t, 2, 4, 1000)}));
  EXPECT_EQ(index.BlockSize("w"), kBlock);
  EXPECT_EQ(index.MatchBlocks("w", t, kNow), 4u);
  EXPECT_EQ(index.StoredBlocks("w"), 4u);
  // A prompt that diverges in block 1 matches one block; another worker none.
  auto diverging = t;
  diverging[5] = 1;
  EXPECT_EQ(index.MatchBlocks("w", diverging, kNow), 1u);
  EXPECT_EQ(index.MatchBlocks("other", t, kNow), 0u);

  // Removing block 1 ends the match there.
  KvBlockRemoved removed;
  removed.block_hashes = {1001};
  index.Apply("w", 0, Batch({removed}));
  EXPECT_EQ(index.MatchBlocks("w", t, kNow), 1u);
  EXPECT_EQ(index.StoredBlocks("w"), 3u);
  index.Apply("w", 0, Batch({KvAllBlocksCleared{}}));
  EXPECT_EQ(index.MatchBlocks("w", t, kNow), 0u);
  EXPECT_EQ(index.StoredBlocks("w"), 0u);
  EXPECT_EQ(index.counters().blocks_stored, 4);
  EXPECT_EQ(index.counters().blocks_removed, 1);
}

TEST(KvIndexTest, AnyEngineOfTheWorkerCounts) {
  KvIndex index;
  const auto t = Tokens(12);
  index.Apply("w", 1, Batch({Stored(t, 0, 3, 50)}));
  EXPECT_EQ(index.MatchBlocks("w", t, kNow), 3u);
  // The same tokens on rank 0 with other hashes, then removed there: rank 1 still holds them.
  index.Apply("w", 0, Batch({Stored(t, 0, 3, 90)}));
  KvBlockRemoved removed;
  removed.block_hashes = {90, 91, 92};
  index.Apply("w", 0, Batch({removed}));
  EXPECT_EQ(index.MatchBlocks("w", t, kNow), 3u);
}

TEST(KvIndexTest, OrphansAndMalformedEventsAreSkipped) {
  KvIndex index;
  const auto t = Tokens(12);
  index.Apply("w", 0, Batch({Stored(t, 1, 3, 10)}));  // its parent (10) was never stored
  EXPECT_EQ(index.MatchBlocks("w", t, kNow), 0u);
  EXPECT_EQ(index.counters().orphan_blocks, 2);
  KvBlockStored bad = Stored(t, 0, 2, 10);
  bad.token_ids.pop_back();  // not block_hashes × block_size
  index.Apply("w", 0, Batch({bad}));
  KvBlockStored zero = Stored(t, 0, 1, 10);
  zero.block_size = 0;
  index.Apply("w", 0, Batch({zero}));
  EXPECT_EQ(index.counters().invalid_events, 2);
  EXPECT_EQ(index.StoredBlocks("w"), 0u);
  KvBlockRemoved unknown;
  unknown.block_hashes = {12345};
  index.Apply("w", 0, Batch({unknown}));  // nothing to remove: no effect
  EXPECT_EQ(index.counters().blocks_removed, 0);
}

TEST(KvIndexTest, PredictionsCountUntilTheyExpireAndAreBounded) {
  KvIndexOptions options;
  options.default_block_size = kBlock;
  options.predict_ttl = absl::Seconds(5);
  options.max_predicted_per_worker = 3;
  KvIndex index(options);
  const auto t = Tokens(16);  // 4 blocks
  index.Predict("w", t, kNow);
  EXPECT_EQ(index.MatchBlocks("w", t, kNow + absl::Seconds(4)), 3u);  // bound: 3 predicted
  EXPECT_EQ(index.MatchBlocks("w", t, kNow + absl::Seconds(6)), 0u);  // expired
  EXPECT_EQ(index.counters().over_limit, 1);
  // An event confirms a prediction: it stays past the expiry.
  index.Predict("v", t, kNow);
  index.Apply("v", 0, Batch({Stored(t, 0, 2, 7)}));
  EXPECT_EQ(index.MatchBlocks("v", t, kNow + absl::Seconds(60)), 2u);
  index.RemoveWorker("v");
  EXPECT_EQ(index.MatchBlocks("v", t, kNow), 0u);
}

TEST(KvIndexTest, StoredBlocksAreBoundedPerEngine) {
  KvIndexOptions options;
  options.max_blocks_per_engine = 2;
  KvIndex index(options);
  const auto t = Tokens(16);
  index.Apply("w", 0, Batch({Stored(t, 0, 4, 1)}));
  EXPECT_EQ(index.StoredBlocks("w"), 2u);
  EXPECT_EQ(index.counters().over_limit, 1);
}

std::vector<Candidate> Three(int64_t a = 0, int64_t b = 0, int64_t c = 0) {
  return {{"http://w0:1", a}, {"http://w1:1", b}, {"http://w2:1", c}};
}

RouteKeys Keys(const std::vector<int32_t>& tokens) {
  RouteKeys k;
  k.has_tokens = true;
  k.tokens = tokens;
  k.now = kNow;
  return k;
}

TEST(KvAwarePolicyTest, FollowsTheLongestCachedPrefix) {
  PolicyOptions options;
  options.kv.default_block_size = kBlock;
  KvAwarePolicy p(options);
  const auto t = Tokens(16);
  p.kv_index()->Apply("http://w1:1", 0, Batch({Stored(t, 0, 2, 1)}));
  p.kv_index()->Apply("http://w2:1", 0, Batch({Stored(t, 0, 3, 1)}));
  EXPECT_EQ(p.Pick(Three(), Keys(t)), 2u);
  // Imbalance beyond the threshold: the least loaded instead.
  EXPECT_EQ(p.Pick(Three(0, 0, 100), Keys(t)), 0u);
  EXPECT_TRUE(p.NeedsTokens());
  EXPECT_EQ(p.name(), "kv_aware");
}

TEST(KvAwarePolicyTest, NewPrefixesSpreadAndRepeatsFollowThePrediction) {
  PolicyOptions options;
  options.kv.default_block_size = kBlock;
  KvAwarePolicy p(options);
  // Worker 0 holds blocks of something else: a new prefix goes to an idle worker holding
  // fewer blocks, and its repeat (before any event) follows the prediction.
  p.kv_index()->Apply("http://w0:1", 0, Batch({Stored(Tokens(8, 5000), 0, 2, 1)}));
  const auto a = Tokens(16, 1);
  const size_t first = p.Pick(Three(), Keys(a));
  EXPECT_NE(first, 0u);
  EXPECT_EQ(p.Pick(Three(), Keys(a)), first);
  // Without tokens: the least loaded.
  EXPECT_EQ(p.Pick(Three(3, 1, 2), RouteKeys()), 1u);
}

TEST(KvEventSourceTest, ParsesWorkerAndEndpointsInRankOrder) {
  auto s = ParseKvEventSource("http://10.0.0.1:8000/=tcp://10.0.0.1:5557,tcp://10.0.0.1:5558");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].worker_url, "http://10.0.0.1:8000");
  EXPECT_EQ((*s)[1].rank, 1);
  EXPECT_EQ((*s)[1].endpoint, "tcp://10.0.0.1:5558");
  for (const char* bad : {"http://a:1", "a:1=tcp://x:1", "http://a:1=", "http://a:1=udp://x:1",
                          "http://a:1=tcp://x:1,,tcp://y:2"}) {
    auto r = ParseKvEventSource(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--kv-event-source"), std::string::npos) << bad;
    }
  }
}

class TokenizeRequestBodyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path model =
        std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
    auto t = frontend::Tokenizer::Load(model);
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(*t);
    auto c = frontend::ChatTemplate::Parse(tokenizer_->chat_template());
    ASSERT_TRUE(c.ok()) << c.status();
    chat_.emplace(std::move(*c));
  }
  std::unique_ptr<frontend::Tokenizer> tokenizer_;
  std::optional<frontend::ChatTemplate> chat_;
};

TEST_F(TokenizeRequestBodyTest, CompletionPromptsAsTheServerTokenizesThem) {
  const std::string text = "In the beginning God created the heaven and the earth.";
  auto expected = tokenizer_->Encode(text, true);
  ASSERT_TRUE(expected.ok());
  using nlohmann::json;
  auto ids = TokenizeRequestBody(*tokenizer_, &*chat_, json{{"prompt", text}}.dump(), false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, *expected);
  // A batch: its first prompt. Token ids: as given.
  ids = TokenizeRequestBody(*tokenizer_, &*chat_, json{{"prompt", {text, "x"}}}.dump(), false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, *expected);
  ids = TokenizeRequestBody(*tokenizer_, nullptr, json{{"prompt", {1, 2, 3}}}.dump(), false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3}));
  ids = TokenizeRequestBody(*tokenizer_, nullptr, json{{"prompt", {{4, 5}, {6}}}}.dump(), false);
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 5}));
  // Not usable: no prompt, a negative or huge id, not JSON, not an object.
  for (const std::string& bad :
       std::vector<std::string>{json{{"max_tokens", 1}}.dump(), json{{"prompt", {1, -2}}}.dump(),
                                json{{"prompt", {1, 1LL << 40}}}.dump(), std::string("{"),
                                std::string("[1]"), json{{"prompt", 5}}.dump()}) {
    EXPECT_FALSE(TokenizeRequestBody(*tokenizer_, &*chat_, bad, false).has_value()) << bad;
  }
}

TEST_F(TokenizeRequestBodyTest, ChatMessagesAsTheServerRendersThem) {
  using nlohmann::json;
  const std::vector<frontend::ChatMessage> messages = {{"system", "Be brief."},
                                                       {"user", "Who made the light?\nSay."}};
  auto rendered = chat_->Render(messages, true, tokenizer_->bos_token(), tokenizer_->eos_token());
  ASSERT_TRUE(rendered.ok());
  auto expected = tokenizer_->Encode(*rendered, false);  // the template writes BOS
  ASSERT_TRUE(expected.ok());
  // Content as a string, and as text parts (joined by "\n").
  const json body = {{"messages",
                      {{{"role", "system"}, {"content", "Be brief."}},
                       {{"role", "user"},
                        {"content",
                         {{{"type", "text"}, {"text", "Who made the light?"}},
                          {{"type", "text"}, {"text", "Say."}}}}}}}};
  auto ids = TokenizeRequestBody(*tokenizer_, &*chat_, body.dump(), true);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, *expected);
  EXPECT_FALSE(TokenizeRequestBody(*tokenizer_, nullptr, body.dump(), true).has_value());
  EXPECT_FALSE(
      TokenizeRequestBody(*tokenizer_, &*chat_, json{{"messages", {1}}}.dump(), true).has_value());
}

// A tool-calling chat on a template that renders `tools` (the Qwen2 fixture's): the router
// renders what the API server renders for chat completions (TemplateInputFor, then
// RenderChatPrompt and the tokenizer without special tokens, as AsyncLLM::TokenizeChat), so
// its token ids are the engine's: the tools, the assistant's tool call with its arguments as an
// object, the tool result and the template kwargs all count.
TEST(TokenizeRequestBodyToolsTest, ToolsAndTemplateKwargsRenderAsTheServerRendersThem) {
  const std::filesystem::path dir =
      std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "tokenizer" / "qwen2_bpe";
  auto tokenizer = frontend::Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat = frontend::ChatTemplate::Parse((*tokenizer)->chat_template());
  ASSERT_TRUE(chat.ok()) << chat.status();
  using nlohmann::ordered_json;
  const ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "The weather in a city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const ordered_json body = ordered_json::parse(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}],
      "chat_template_kwargs": {"enable_thinking": false}})");
  ordered_json with_tools = body;
  with_tools["tools"] = tools;
  // The API server's path.
  auto input = frontend::TemplateInputFor(with_tools, tools, /*add_generation_prompt=*/true,
                                          /*continue_final_message=*/false,
                                          /*add_special_tokens=*/false);
  ASSERT_TRUE(input.ok()) << input.status();
  auto prompt = frontend::RenderChatPrompt(*chat, *input, (*tokenizer)->bos_token(),
                                           (*tokenizer)->eos_token());
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_NE(prompt->find("get_weather"), std::string::npos) << *prompt;
  EXPECT_NE(prompt->find("\"city\": \"Paris\""), std::string::npos) << *prompt;
  auto expected = (*tokenizer)->Encode(*prompt, false);
  ASSERT_TRUE(expected.ok());

  auto ids = TokenizeRequestBody(**tokenizer, &*chat, with_tools.dump(), true);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, *expected);
  // Without tools the template renders a shorter prompt: the tools made the difference.
  auto without = TokenizeRequestBody(**tokenizer, &*chat, body.dump(), true);
  ASSERT_TRUE(without.has_value());
  EXPECT_LT(without->size(), ids->size());
  // continue_final_message: the last message left open, as the server cuts it.
  ordered_json open = with_tools;
  open["messages"].push_back({{"role", "assistant"}, {"content", "It is"}});
  open["add_generation_prompt"] = false;
  open["continue_final_message"] = true;
  auto open_input = frontend::TemplateInputFor(open, tools, false, true, false);
  ASSERT_TRUE(open_input.ok()) << open_input.status();
  auto open_prompt = frontend::RenderChatPrompt(*chat, *open_input, (*tokenizer)->bos_token(),
                                                (*tokenizer)->eos_token());
  ASSERT_TRUE(open_prompt.ok()) << open_prompt.status();
  EXPECT_TRUE(open_prompt->ends_with("It is")) << *open_prompt;
  EXPECT_EQ(TokenizeRequestBody(**tokenizer, &*chat, open.dump(), true),
            (*tokenizer)->Encode(*open_prompt, false).value());
  // Both flags: refused by the server, not tokenized here.
  open["add_generation_prompt"] = true;
  EXPECT_FALSE(TokenizeRequestBody(**tokenizer, &*chat, open.dump(), true).has_value());
}

}  // namespace
}  // namespace vllm::router
