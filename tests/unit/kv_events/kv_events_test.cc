#include "kv_events/kv_events.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "config/kv_events_config.h"
#include "gtest/gtest.h"
#include "msgpack.hpp"

namespace vllm::kv_events {
namespace {

using config::KvEventsConfig;
using config::ParseKvEventsConfig;

// Golden payloads made with msgspec 0.22.0 (Python 3.11, /tmp venv with `pip install msgspec
// pyzmq`, not part of the build) from vLLM 0.33's struct definitions: EventBatch(
// msgspec.Struct, array_like=True, omit_defaults=True, gc=False) with ts, events,
// data_parallel_rank: int | None = None; KVCacheEvent(msgspec.Struct, omit_defaults=True,
// gc=False, tag=True) (events are tagged maps since vllm#42892); BlockStored(block_hashes,
// parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, extra_keys=None,
// group_idx=None, kv_cache_spec_kind=None, kv_cache_spec_sliding_window=None);
// BlockRemoved(block_hashes, medium, group_idx=None); AllBlocksCleared. Each was printed with
// msgspec.msgpack.encode(batch).hex():
//
// kGoldenBatch = KVEventBatch(ts=1789095808.8378847, events=[
//     BlockStored(block_hashes=[15760518052499183552, 7], parent_block_hash=None,
//                 token_ids=[1, 200, 70000, 128000], block_size=2, lora_id=None, medium="GPU",
//                 lora_name=None, group_idx=0, kv_cache_spec_kind="full_attention"),
//     BlockStored(block_hashes=[42], parent_block_hash=7, token_ids=[5, 6], block_size=2,
//                 lora_id=None, medium="GPU", lora_name=None, group_idx=0,
//                 kv_cache_spec_kind="full_attention"),
//     BlockRemoved(block_hashes=[15760518052499183552], medium="GPU", group_idx=0),
//     AllBlocksCleared()], data_parallel_rank=1)
constexpr char kGoldenBatchHex[] =
    "93cb41daa8dbe0359fe7948aa474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392cfdab8"
    "9baa7b5857c007b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739401ccc8ce00011170ce"
    "0001f400aa626c6f636b5f73697a6502a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65"
    "c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64ae66756c6c5f617474656e74696f6e"
    "8aa474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573912ab1706172656e745f626c6f636b"
    "5f6861736807a9746f6b656e5f696473920506aa626c6f636b5f73697a6502a76c6f72615f6964c0a66d65646975"
    "6da3475055a96c6f72615f6e616d65c0a967726f75705f69647800b26b765f63616368655f737065635f6b696e64"
    "ae66756c6c5f617474656e74696f6e84a474797065ac426c6f636b52656d6f766564ac626c6f636b5f6861736865"
    "7391cfdab89baa7b5857c0a66d656469756da3475055a967726f75705f6964780081a474797065b0416c6c426c6f"
    "636b73436c656172656401";
// KVEventBatch(ts=0.5, events=[AllBlocksCleared()]): data_parallel_rank None is still written
// (nil): msgspec keeps trailing defaults of array-like structs.
constexpr char kGoldenClearedHex[] =
    "93cb3fe00000000000009181a474797065b0416c6c426c6f636b73436c6561726564c0";
// Bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0): KVEventBatch(ts=2.0, events=[
//     BlockStored(block_hashes=[bytes(range(1, 33)), b"\x01\x02\x03"],
//                 parent_block_hash=b"\x01\x02\x03", token_ids=[1, 2], block_size=1,
//                 lora_id=None, medium=None, lora_name=None, extra_keys=[None, None]),
//     BlockRemoved(block_hashes=[bytes(range(1, 33))], medium=None)], data_parallel_rank=0)
// int.from_bytes(bytes(range(1, 33)), "big") & (2**64 - 1) == 0x191a1b1c1d1e1f20.
constexpr char kGoldenBytesHashesHex[] =
    "93cb40000000000000009289a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392c42001"
    "02030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20c403010203b1706172656e745f626c"
    "6f636b5f68617368c403010203a9746f6b656e5f696473920102aa626c6f636b5f73697a6501a76c6f72615f6964"
    "c0a66d656469756dc0a96c6f72615f6e616d65c0aa65787472615f6b65797392c0c083a474797065ac426c6f636b"
    "52656d6f766564ac626c6f636b5f68617368657391c4200102030405060708090a0b0c0d0e0f101112131415161718"
    "191a1b1c1d1e1f20a66d656469756dc000";
// vLLM before #42892 (events array_like=True too, trailing group_idx):
// EventBatch(ts=3.5, events=[BlockStored(block_hashes=[11, 12], parent_block_hash=10,
//     token_ids=[7, 8, 9, 10], block_size=2, lora_id=3, medium="GPU", lora_name="adapter",
//     extra_keys=[None, None], group_idx=0), BlockRemoved(block_hashes=[11], medium="CPU",
//     group_idx=0), AllBlocksCleared()], data_parallel_rank=2)
constexpr char kGoldenLegacyHex[] =
    "93cb400c000000000000939aab426c6f636b53746f726564920b0c0a940708090a0203a3475055a7616461707465"
    "7292c0c00094ac426c6f636b52656d6f766564910ba34350550091b0416c6c426c6f636b73436c656172656402";

std::string Hex(std::string_view hex) {
  return absl::HexStringToBytes(absl::string_view(hex.data(), hex.size()));
}

std::span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

KvEventBatch GoldenBatch() {
  KvEventBatch b;
  b.ts = 1789095808.8378847;
  KvBlockStored s1;
  s1.block_hashes = {15760518052499183552ULL, 7};
  s1.token_ids = {1, 200, 70000, 128000};
  s1.block_size = 2;
  s1.medium = "GPU";
  s1.group_idx = 0;
  s1.kv_cache_spec_kind = "full_attention";
  KvBlockStored s2 = s1;
  s2.block_hashes = {42};
  s2.parent_block_hash = 7;
  s2.token_ids = {5, 6};
  KvBlockRemoved r;
  r.block_hashes = {15760518052499183552ULL};
  r.medium = "GPU";
  r.group_idx = 0;
  b.events = {s1, s2, r, KvAllBlocksCleared{}};
  b.data_parallel_rank = 1;
  return b;
}

void ExpectStoredEq(const KvBlockStored& a, const KvBlockStored& b) {
  EXPECT_EQ(a.block_hashes, b.block_hashes);
  EXPECT_EQ(a.parent_block_hash, b.parent_block_hash);
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.lora_id, b.lora_id);
  EXPECT_EQ(a.medium, b.medium);
  EXPECT_EQ(a.lora_name, b.lora_name);
  EXPECT_EQ(a.group_idx, b.group_idx);
  EXPECT_EQ(a.kv_cache_spec_kind, b.kv_cache_spec_kind);
}

void ExpectBatchEq(const KvEventBatch& a, const KvEventBatch& b) {
  EXPECT_EQ(a.ts, b.ts);
  EXPECT_EQ(a.data_parallel_rank, b.data_parallel_rank);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    ASSERT_EQ(a.events[i].index(), b.events[i].index()) << "event " << i;
    if (const auto* s = std::get_if<KvBlockStored>(&a.events[i])) {
      ExpectStoredEq(*s, std::get<KvBlockStored>(b.events[i]));
    } else if (const auto* r = std::get_if<KvBlockRemoved>(&a.events[i])) {
      const auto& r2 = std::get<KvBlockRemoved>(b.events[i]);
      EXPECT_EQ(r->block_hashes, r2.block_hashes);
      EXPECT_EQ(r->medium, r2.medium);
      EXPECT_EQ(r->group_idx, r2.group_idx);
    }
  }
}

class KvEventsCodecTest : public ::testing::Test {};

TEST_F(KvEventsCodecTest, EncodesExactlyAsMsgspec) {
  EXPECT_EQ(absl::BytesToHexString(EncodeKvEventBatch(GoldenBatch())), kGoldenBatchHex);
  KvEventBatch cleared;
  cleared.ts = 0.5;
  cleared.events = {KvAllBlocksCleared{}};
  EXPECT_EQ(absl::BytesToHexString(EncodeKvEventBatch(cleared)), kGoldenClearedHex);
}

TEST_F(KvEventsCodecTest, DecodesMsgspecBytes) {
  const std::string golden = Hex(kGoldenBatchHex);
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(Span(golden));
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectBatchEq(*b, GoldenBatch());
  const std::string cleared = Hex(kGoldenClearedHex);
  b = DecodeKvEventBatch(Span(cleared));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ts, 0.5);
  EXPECT_FALSE(b->data_parallel_rank.has_value());
  ASSERT_EQ(b->events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(b->events[0]));
}

TEST_F(KvEventsCodecTest, RoundTrips) {
  KvEventBatch batch = GoldenBatch();
  auto& stored = std::get<KvBlockStored>(batch.events[0]);
  stored.lora_id = -5;
  stored.lora_name = "adapter";
  stored.medium.reset();
  stored.token_ids.push_back(-1);
  stored.block_hashes.push_back(UINT64_MAX);
  batch.data_parallel_rank.reset();
  const std::string bytes = EncodeKvEventBatch(batch);
  absl::StatusOr<KvEventBatch> back = DecodeKvEventBatch(Span(bytes));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectBatchEq(*back, batch);
  EXPECT_EQ(EncodeKvEventBatch(*back), bytes);
}

TEST_F(KvEventsCodecTest, BytesHashesBecomeTheirLastEightBytes) {
  const std::string golden = Hex(kGoldenBytesHashesHex);
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(Span(golden));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->events.size(), 2u);
  const auto& s = std::get<KvBlockStored>(b->events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{0x191a1b1c1d1e1f20ULL, 0x010203ULL}));
  EXPECT_EQ(s.parent_block_hash, 0x010203ULL);
  EXPECT_EQ(std::get<KvBlockRemoved>(b->events[1]).block_hashes,
            std::vector<uint64_t>{0x191a1b1c1d1e1f20ULL});
  EXPECT_EQ(b->data_parallel_rank, 0);
}

TEST_F(KvEventsCodecTest, DecodesOldTaggedArrayEvents) {
  const std::string golden = Hex(kGoldenLegacyHex);
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(Span(golden));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ts, 3.5);
  EXPECT_EQ(b->data_parallel_rank, 2);
  ASSERT_EQ(b->events.size(), 3u);
  const auto& s = std::get<KvBlockStored>(b->events[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(s.parent_block_hash, 10u);
  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(s.block_size, 2);
  EXPECT_EQ(s.lora_id, 3);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_EQ(s.lora_name, "adapter");
  EXPECT_EQ(std::get<KvBlockRemoved>(b->events[1]).medium, "CPU");
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(b->events[2]));
}

// What a later vLLM may add: unknown keys in events, more elements after the batch's three.
TEST_F(KvEventsCodecTest, ToleratesFieldsItDoesNotKnow) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(4);
  pk.pack(1.25);
  pk.pack_array(2);
  pk.pack_map(6);
  pk.pack(std::string("locality"));
  pk.pack(std::string("LOCAL"));
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockStored"));
  pk.pack(std::string("block_hashes"));
  pk.pack(std::vector<uint64_t>{5});
  pk.pack(std::string("token_ids"));
  pk.pack(std::vector<int>{1, 2, 3, 4});
  pk.pack(std::string("block_size"));
  pk.pack(4);
  pk.pack(std::string("extra_keys"));
  pk.pack(std::vector<std::vector<std::string>>{{"salt"}});
  pk.pack_array(4);
  pk.pack(std::string("AllBlocksCleared"));
  pk.pack(1);
  pk.pack(2);
  pk.pack(3);
  pk.pack(7);
  pk.pack(std::string("future"));
  absl::StatusOr<KvEventBatch> b =
      DecodeKvEventBatch({reinterpret_cast<const uint8_t*>(buf.data()), buf.size()});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data_parallel_rank, 7);
  ASSERT_EQ(b->events.size(), 2u);
  const auto& s = std::get<KvBlockStored>(b->events[0]);
  EXPECT_EQ(s.block_hashes, std::vector<uint64_t>{5});
  EXPECT_FALSE(s.parent_block_hash.has_value());
  EXPECT_EQ(s.block_size, 4);
}

absl::Status DecodePacked(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& fill) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  fill(pk);
  return DecodeKvEventBatch({reinterpret_cast<const uint8_t*>(buf.data()), buf.size()}).status();
}

TEST_F(KvEventsCodecTest, UnknownTagIsInvalidArgumentNamingIt) {
  absl::Status s = DecodePacked([](auto& pk) {
    pk.pack_array(3);
    pk.pack(1.0);
    pk.pack_array(1);
    pk.pack_map(1);
    pk.pack(std::string("type"));
    pk.pack(std::string("BlockMoved"));
    pk.pack_nil();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "BlockMoved")) << s;
}

TEST_F(KvEventsCodecTest, RejectsMalformedInputWithAStatus) {
  const std::string golden = Hex(kGoldenBatchHex);
  // Every truncation, and a trailing byte.
  for (size_t n = 0; n < golden.size(); ++n) {
    EXPECT_FALSE(DecodeKvEventBatch(Span(golden.substr(0, n))).ok()) << n;
  }
  EXPECT_FALSE(DecodeKvEventBatch(Span(golden + '\0')).ok());
  // Wrong shapes.
  const std::vector<std::function<void(msgpack::packer<msgpack::sbuffer>&)>> bad = {
      [](auto& pk) { pk.pack(5); },
      [](auto& pk) {
        pk.pack_array(1);
        pk.pack(1.0);
      },
      [](auto& pk) {
        pk.pack_array(3);
        pk.pack(std::string("ts"));
        pk.pack_array(0);
        pk.pack_nil();
      },
      [](auto& pk) {
        pk.pack_array(3);
        pk.pack(1.0);
        pk.pack(std::string("events"));
        pk.pack_nil();
      },
      [](auto& pk) {  // BlockStored without block_hashes
        pk.pack_array(3);
        pk.pack(1.0);
        pk.pack_array(1);
        pk.pack_map(3);
        pk.pack(std::string("type"));
        pk.pack(std::string("BlockStored"));
        pk.pack(std::string("token_ids"));
        pk.pack_array(0);
        pk.pack(std::string("block_size"));
        pk.pack(16);
        pk.pack_nil();
      },
      [](auto& pk) {  // a token id beyond int32
        pk.pack_array(3);
        pk.pack(1.0);
        pk.pack_array(1);
        pk.pack_array(5);
        pk.pack(std::string("BlockStored"));
        pk.pack_array(0);
        pk.pack_nil();
        pk.pack(std::vector<int64_t>{int64_t{1} << 40});
        pk.pack(16);
        pk.pack_nil();
      },
      [](auto& pk) {  // a tag that is not a string
        pk.pack_array(3);
        pk.pack(1.0);
        pk.pack_array(1);
        pk.pack_array(1);
        pk.pack(3);
        pk.pack_nil();
      },
      [](auto& pk) {  // a float hash
        pk.pack_array(3);
        pk.pack(1.0);
        pk.pack_array(1);
        pk.pack_array(3);
        pk.pack(std::string("BlockRemoved"));
        pk.pack_array(1);
        pk.pack(0.5);
        pk.pack_nil();
        pk.pack_nil();
      },
      [](auto& pk) {  // data_parallel_rank not an int
        pk.pack_array(3);
        pk.pack(1.0);
        pk.pack_array(0);
        pk.pack(std::string("0"));
      },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    absl::Status s = DecodePacked(bad[i]);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << i << ": " << s;
  }
}

TEST_F(KvEventsCodecTest, RejectsOversizedInput) {
  // An array that claims 2^31 elements in a few bytes.
  const std::string huge = Hex("93cb3ff0000000000000dd80000000");
  EXPECT_EQ(DecodeKvEventBatch(Span(huge)).status().code(), absl::StatusCode::kResourceExhausted);
  // A payload over the byte limit.
  std::string big(kMaxKvEventBatchBytes + 1, '\0');
  EXPECT_EQ(DecodeKvEventBatch(Span(big)).status().code(), absl::StatusCode::kResourceExhausted);
  // Nesting beyond the limit.
  std::string deep(64, '\x91');
  deep += '\xc0';
  EXPECT_FALSE(DecodeKvEventBatch(Span(deep)).ok());
}

class KvEventsConfigTest : public ::testing::Test {};

TEST_F(KvEventsConfigTest, ParsesVllmKeysWithVllmDefaults) {
  absl::StatusOr<KvEventsConfig> c = ParseKvEventsConfig("{}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, KvEventsConfig{});
  c = ParseKvEventsConfig(R"({"enable_kv_cache_events": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->enable);
  EXPECT_EQ(c->publisher, "zmq");  // vLLM: no publisher given + enabled → zmq
  EXPECT_EQ(c->endpoint, "tcp://*:5557");
  c = ParseKvEventsConfig(
      R"({"enable_kv_cache_events": true, "publisher": "null", "endpoint": "tcp://h:1",
          "replay_endpoint": "tcp://*:6000", "buffer_steps": 5, "hwm": 7,
          "max_queue_size": 9, "topic": "kv"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->publisher, "null");
  EXPECT_EQ(c->endpoint, "tcp://h:1");
  EXPECT_EQ(c->replay_endpoint, "tcp://*:6000");
  EXPECT_EQ(c->buffer_steps, 5);
  EXPECT_EQ(c->hwm, 7);
  EXPECT_EQ(c->max_queue_size, 9);
  EXPECT_EQ(c->topic, "kv");
  c = ParseKvEventsConfig(R"({"replay_endpoint": null, "publisher": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->replay_endpoint.has_value());
  EXPECT_EQ(c->publisher, "null");
}

TEST_F(KvEventsConfigTest, ErrorsNameTheKeyAndTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"enable_kv_cache_event": true})", "enable_kv_cache_event"},
      {R"({"enable_kv_cache_events": 1})", "enable_kv_cache_events"},
      {R"({"publisher": "kafka"})", "publisher"},
      {R"({"endpoint": 5557})", "endpoint"},
      {R"({"buffer_steps": -1})", "buffer_steps"},
      {R"({"buffer_steps": 1.5})", "buffer_steps"},
      {R"({"hwm": 99999999999})", "hwm"},
      {R"({"max_queue_size": 0})", "max_queue_size"},
      {R"({"topic": ["a"]})", "topic"},
      {R"({"replay_endpoint": ""})", "replay_endpoint"},
  };
  for (const auto& [json, key] : cases) {
    absl::StatusOr<KvEventsConfig> c = ParseKvEventsConfig(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_TRUE(absl::StrContains(c.status().message(), key)) << c.status();
    EXPECT_TRUE(absl::StrContains(c.status().message(), "--kv-events-config")) << c.status();
  }
  for (const char* json : {"", "[]", "true", "{", R"({"topic": "x"} trailing)"}) {
    absl::StatusOr<KvEventsConfig> c = ParseKvEventsConfig(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_TRUE(absl::StrContains(c.status().message(), "--kv-events-config")) << c.status();
  }
}

TEST_F(KvEventsConfigTest, OffsetsTheEndpointPerRankAsVllm) {
  EXPECT_EQ(OffsetEndpointForRank("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(OffsetEndpointForRank("tcp://*:5557", 1), "tcp://*:5558");
  EXPECT_EQ(OffsetEndpointForRank("tcp://10.0.0.1:5557", 3), "tcp://10.0.0.1:5560");
  EXPECT_EQ(OffsetEndpointForRank("tcp://[::1]:5557", 2), "tcp://[::1]:5559");
  EXPECT_EQ(OffsetEndpointForRank("inproc://cache", 2), "inproc://cache_dp2");
  EXPECT_EQ(OffsetEndpointForRank("ipc:///tmp/kv", 1), "ipc:///tmp/kv");
  EXPECT_EQ(OffsetEndpointForRank("", 1), "");
}

// One context per test: inproc endpoints live in a context.
class KvEventPublisherTest : public ::testing::Test {
 protected:
  // Receives one [topic, seq, payload] message within 5 s.
  static bool Receive(zmq::socket_t& sub, std::string* topic, uint64_t* seq, KvEventBatch* out,
                      int timeout_ms = 5000) {
    sub.set(zmq::sockopt::rcvtimeo, timeout_ms);
    zmq::message_t parts[3];
    for (int i = 0; i < 3; ++i) {
      if (!sub.recv(parts[i])) return false;
    }
    *topic = parts[0].to_string();
    *seq = 0;
    for (size_t i = 0; i < parts[1].size(); ++i) {
      *seq = (*seq << 8) | static_cast<const uint8_t*>(parts[1].data())[i];
    }
    absl::StatusOr<KvEventBatch> b =
        DecodeKvEventBatch({static_cast<const uint8_t*>(parts[2].data()), parts[2].size()});
    if (!b.ok()) return false;
    *out = *b;
    return true;
  }
  static KvEventBatch Cleared(double ts) {
    KvEventBatch b;
    b.ts = ts;
    b.events = {KvAllBlocksCleared{}};
    return b;
  }

  // Publishes probe batches (ts -1) until `sub` receives one, i.e. the subscription reached
  // the publisher (a PUB drops what it sends before): a condition with a deadline, not a
  // sleep. Returns how many probes were published: the next batch's sequence number.
  static uint64_t AwaitSubscription(KvEventPublisher& pub, zmq::socket_t& sub) {
    uint64_t probes = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      pub.Publish(Cleared(-1));
      ++probes;
      std::string topic;
      uint64_t seq = 0;
      KvEventBatch b;
      if (Receive(sub, &topic, &seq, &b, 20)) return probes;
    }
    ADD_FAILURE() << "the subscription never reached the publisher";
    return probes;
  }

  // Receives the next batch that is not a probe.
  static bool ReceiveData(zmq::socket_t& sub, std::string* topic, uint64_t* seq,
                          KvEventBatch* out) {
    while (Receive(sub, topic, seq, out)) {
      if (out->ts != -1) return true;
    }
    return false;
  }

  zmq::context_t context_;
};

TEST_F(KvEventPublisherTest, PublishesTopicSequenceAndPayloadWithItsRank) {
  KvEventPublisherOptions config;
  config.enable = true;
  config.publisher = "zmq";
  config.endpoint = "inproc://kv-events";
  config.topic = "kv@test";
  auto pub = KvEventPublisher::Create(context_, config, 2);
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ((*pub)->BoundEndpoint(), "inproc://kv-events_dp2");
  zmq::socket_t sub(context_, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.connect("inproc://kv-events_dp2");
  const uint64_t first = AwaitSubscription(**pub, sub);
  for (int i = 0; i < 3; ++i) (*pub)->Publish(Cleared(i));
  for (uint64_t i = 0; i < 3; ++i) {
    std::string topic;
    uint64_t seq = 99;
    KvEventBatch b;
    ASSERT_TRUE(ReceiveData(sub, &topic, &seq, &b)) << i;
    EXPECT_EQ(topic, "kv@test");
    EXPECT_EQ(seq, first + i);
    EXPECT_EQ(b.ts, static_cast<double>(i));
    EXPECT_EQ(b.data_parallel_rank, 2);  // stamped by the publisher
  }
}

TEST_F(KvEventPublisherTest, ConnectsToASubscriberThatBinds) {
  zmq::socket_t sub(context_, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.bind("tcp://127.0.0.1:0");
  KvEventPublisherOptions config;
  config.enable = true;
  config.publisher = "zmq";
  config.endpoint = sub.get(zmq::sockopt::last_endpoint);  // a host, no '*': vLLM connects
  auto pub = KvEventPublisher::Create(context_, config, 0);
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ((*pub)->BoundEndpoint(), config.endpoint);
  // The first batches may go before the subscription reaches the publisher.
  bool got = false;
  for (int i = 0; i < 50 && !got; ++i) {
    (*pub)->Publish(Cleared(1));
    sub.set(zmq::sockopt::rcvtimeo, 100);
    zmq::message_t m;
    if (sub.recv(m)) {
      got = true;
      zmq::message_t rest;
      ASSERT_TRUE(sub.recv(rest));
      ASSERT_TRUE(sub.recv(rest));
    }
  }
  EXPECT_TRUE(got);
}

TEST_F(KvEventPublisherTest, ReplaysBufferedBatchesFromASequenceNumber) {
  KvEventPublisherOptions config;
  config.enable = true;
  config.publisher = "zmq";
  config.endpoint = "inproc://kv-live";
  config.replay_endpoint = "inproc://kv-replay";
  config.buffer_steps = 4;
  config.topic = "t";
  auto pub = KvEventPublisher::Create(context_, config, 0);
  ASSERT_TRUE(pub.ok()) << pub.status();
  zmq::socket_t sub(context_, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect("inproc://kv-live");
  const uint64_t first = AwaitSubscription(**pub, sub);  // probes take sequence numbers
  for (int i = 0; i < 6; ++i) (*pub)->Publish(Cleared(static_cast<double>(first + i)));
  for (int i = 0; i < 6; ++i) {
    std::string topic;
    uint64_t seq = 0;
    KvEventBatch b;
    ASSERT_TRUE(ReceiveData(sub, &topic, &seq, &b)) << i;
  }
  // A DEALER that sends the REQ envelope itself, so that it receives every reply.
  zmq::socket_t dealer(context_, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect("inproc://kv-replay");
  char start[8];
  for (int i = 0; i < 8; ++i) start[i] = static_cast<char>((first + 1) >> (8 * (7 - i)));
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start, 8));
  std::vector<uint64_t> seqs;
  for (;;) {
    zmq::message_t delim, topic, seq, payload;
    ASSERT_TRUE(dealer.recv(delim));
    ASSERT_EQ(delim.size(), 0u);
    ASSERT_TRUE(dealer.recv(topic));
    EXPECT_EQ(topic.to_string(), "t");
    ASSERT_TRUE(dealer.recv(seq));
    ASSERT_TRUE(dealer.recv(payload));
    ASSERT_EQ(seq.size(), 8u);
    uint64_t s = 0;
    for (size_t i = 0; i < 8; ++i) s = (s << 8) | static_cast<const uint8_t*>(seq.data())[i];
    if (payload.size() == 0) {
      EXPECT_EQ(s, UINT64_MAX);  // -1: the end
      break;
    }
    absl::StatusOr<KvEventBatch> b =
        DecodeKvEventBatch({static_cast<const uint8_t*>(payload.data()), payload.size()});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->ts, static_cast<double>(s));
    seqs.push_back(s);
  }
  // The last 4 of first..first+5, from first+1 on.
  EXPECT_EQ(seqs, (std::vector<uint64_t>{first + 2, first + 3, first + 4, first + 5}));
}

TEST_F(KvEventPublisherTest, NullPublisherHasNoSocket) {
  KvEventPublisherOptions config;  // disabled
  auto pub = KvEventPublisher::Create(context_, config, 0);
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ((*pub)->BoundEndpoint(), "");
  (*pub)->Publish(Cleared(1));
  config.enable = true;
  config.publisher = "null";
  pub = KvEventPublisher::Create(context_, config, 0);
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ((*pub)->BoundEndpoint(), "");
}

TEST_F(KvEventPublisherTest, RefusesEndpointsItCannotUse) {
  KvEventPublisherOptions config;
  config.enable = true;
  config.publisher = "zmq";
  config.endpoint = "ipc:///tmp/kv-events-test";
  auto pub = KvEventPublisher::Create(context_, config, 1);  // vLLM cannot offset ipc://
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kInvalidArgument) << pub.status();
  config.endpoint = "bogus://x";
  pub = KvEventPublisher::Create(context_, config, 0);
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kInvalidArgument) << pub.status();
  // Address in use.
  config.endpoint = "inproc://kv-twice";
  auto first = KvEventPublisher::Create(context_, config, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  pub = KvEventPublisher::Create(context_, config, 0);
  EXPECT_EQ(pub.status().code(), absl::StatusCode::kUnavailable) << pub.status();
}

TEST_F(KvEventPublisherTest, DropsWhenTheQueueIsFullInsteadOfBlocking) {
  KvEventPublisherOptions config;
  config.enable = true;
  config.publisher = "zmq";
  config.endpoint = "inproc://kv-drop";
  config.max_queue_size = 1;
  auto pub = KvEventPublisher::Create(context_, config, 0);
  ASSERT_TRUE(pub.ok()) << pub.status();
  // Nobody listens; 10,000 publishes return at once whatever the thread does.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) (*pub)->Publish(Cleared(i));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_LE((*pub)->num_dropped(), 10000);
}

}  // namespace
}  // namespace vllm::kv_events
