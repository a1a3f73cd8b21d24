#include "kv_transfer/codec.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "msgpack.hpp"

namespace vllm::kv_transfer {
namespace {

template <typename T>
std::string Bytes(const T& value) {
  msgpack::sbuffer buffer;
  wire::Packer pk(buffer);
  Pack(pk, value);
  return std::string(buffer.data(), buffer.size());
}

// Unpacks `bytes` (a test's own, well-formed msgpack) and reads a T from it.
template <typename T>
absl::StatusOr<T> ReadBytes(std::string_view bytes) {
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  T value;
  if (absl::Status s = Read(handle.get(), &value); !s.ok()) return s;
  return value;
}

template <typename T>
absl::StatusOr<T> RoundTrip(const T& value) {
  return ReadBytes<T>(Bytes(value));
}

KVTransferParams FullParams() {
  KVTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = "prefill-engine-0";
  p.remote_request_id = "cmpl-abc-0";
  p.remote_host = "10.0.0.7";
  p.remote_port = 14579;
  p.remote_block_ids = {0, 7, 3, 2147483647};
  p.tp_size = 2;
  p.remote_num_tokens = 0;
  return p;
}

LoadSpec FullLoad() {
  LoadSpec s;
  s.req_id = "r-load";
  s.local_block_ids = {4, 5};
  s.num_tokens = 32;
  s.remote_block_ids = {10, 11};
  s.remote_engine_id = "prefill-engine-0";
  s.remote_request_id = "cmpl-abc-0";
  s.remote_host = "::1";
  s.remote_port = 65535;
  s.remote_tp_size = 1024;
  s.key = "deadbeef";
  return s;
}

KVConnectorMetadata FullMetadata() {
  KVConnectorMetadata m;
  m.loads = {FullLoad(), LoadSpec{}};
  m.saves = {SaveSpec{"r-save", {1, 2, 3}, 40, "k1"},
             SaveSpec{"r-offload", {4, 5}, 32, "", {0, 2147483647}}};
  m.sends = {SendSpec{"r-send", {8, 9}}, SendSpec{"r-empty", {}}};
  m.sends_released = {"r-old", ""};
  return m;
}

// The KVTransferParams array with one field replaced by `patch(pk)` (field index `at`).
template <typename Patch>
std::string ParamsWith(size_t at, Patch patch) {
  const KVTransferParams p = FullParams();
  msgpack::sbuffer buffer;
  wire::Packer pk(buffer);
  pk.pack_array(9);
  for (size_t i = 0; i < 9; ++i) {
    if (i == at) {
      patch(pk);
      continue;
    }
    switch (i) {
      case 0:
        pk.pack(p.do_remote_decode);
        break;
      case 1:
        pk.pack(p.do_remote_prefill);
        break;
      case 2:
        wire::PackOptional(pk, p.remote_engine_id);
        break;
      case 3:
        wire::PackOptional(pk, p.remote_request_id);
        break;
      case 4:
        wire::PackOptional(pk, p.remote_host);
        break;
      case 5:
        wire::PackOptional(pk, p.remote_port);
        break;
      case 6:
        wire::PackList<int32_t>(pk, p.remote_block_ids);
        break;
      case 7:
        wire::PackOptional(pk, p.tp_size);
        break;
      default:
        wire::PackOptional(pk, p.remote_num_tokens);
        break;
    }
  }
  return std::string(buffer.data(), buffer.size());
}

void ExpectInvalid(const absl::Status& status, std::string_view field) {
  ASSERT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(std::string(status.message()).find(field), std::string::npos) << status;
}

TEST(KvTransferCodecTest, KVTransferParamsRoundTrip) {
  KVTransferParams decode_side;
  decode_side.do_remote_decode = true;
  for (const KVTransferParams& p : {KVTransferParams{}, decode_side, FullParams()}) {
    auto back = RoundTrip(p);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, p);
  }
}

TEST(KvTransferCodecTest, SpecsRoundTrip) {
  for (const LoadSpec& s : {LoadSpec{}, FullLoad()}) {
    auto back = RoundTrip(s);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s);
  }
  auto save = RoundTrip(SaveSpec{"r", {0, 1}, 17, "key"});
  ASSERT_TRUE(save.ok()) << save.status();
  EXPECT_EQ(*save, (SaveSpec{"r", {0, 1}, 17, "key"}));
  auto offload = RoundTrip(SaveSpec{"r", {0, 1}, 32, "", {9, 3}});
  ASSERT_TRUE(offload.ok()) << offload.status();
  EXPECT_EQ(offload->host_slots, (std::vector<int32_t>{9, 3}));
  auto send = RoundTrip(SendSpec{"r", {3}});
  ASSERT_TRUE(send.ok()) << send.status();
  EXPECT_EQ(*send, (SendSpec{"r", {3}}));
}

TEST(KvTransferCodecTest, MetadataAndOutputRoundTrip) {
  for (const KVConnectorMetadata& m : {KVConnectorMetadata{}, FullMetadata()}) {
    auto back = RoundTrip(m);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, m);
  }
  KVConnectorOutput out;
  out.finished_sending = {"a", "b"};
  out.finished_recving = {"c"};
  out.failed_recving = {"d"};
  for (const KVConnectorOutput& o : {KVConnectorOutput{}, out}) {
    auto back = RoundTrip(o);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, o);
  }
}

TEST(KvTransferCodecTest, OptionalIsNilOrTheValue) {
  for (const std::optional<KVTransferParams>& p :
       {std::optional<KVTransferParams>(), std::optional<KVTransferParams>(FullParams())}) {
    msgpack::sbuffer buffer;
    wire::Packer pk(buffer);
    PackOptional(pk, p);
    msgpack::object_handle handle = msgpack::unpack(buffer.data(), buffer.size());
    EXPECT_EQ(handle.get().type == msgpack::type::NIL, !p.has_value());
    std::optional<KVTransferParams> back = KVTransferParams{};  // reset by a nil
    ASSERT_TRUE(ReadOptional(handle.get(), &back).ok());
    EXPECT_EQ(back, p);
  }
}

TEST(KvTransferCodecTest, BadBlockIdsAreRefused) {
  KVTransferParams negative = FullParams();
  negative.remote_block_ids = {1, -1};
  ExpectInvalid(RoundTrip(negative).status(), "KVTransferParams.remote_block_ids");

  KVTransferParams too_many;
  too_many.remote_block_ids.assign(kMaxRemoteBlockIds + 1, 0);
  auto refused = RoundTrip(too_many);
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("remote_block_ids"), std::string_view::npos);
  too_many.remote_block_ids.pop_back();  // exactly the limit
  EXPECT_TRUE(RoundTrip(too_many).ok());

  LoadSpec load = FullLoad();
  load.local_block_ids = {-5};
  ExpectInvalid(RoundTrip(load).status(), "LoadSpec.local_block_ids");
  ExpectInvalid(RoundTrip(SaveSpec{"r", {-1}, 0, ""}).status(), "SaveSpec.block_ids");
  ExpectInvalid(RoundTrip(SaveSpec{"r", {1}, 0, "", {-1}}).status(), "SaveSpec.host_slots");
  // One host slot per block id, or none.
  ExpectInvalid(RoundTrip(SaveSpec{"r", {1, 2}, 0, "", {7}}).status(), "SaveSpec.host_slots");
  SaveSpec too_many_slots;
  too_many_slots.host_slots.assign(kMaxRemoteBlockIds + 1, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(RoundTrip(too_many_slots).status()));
  ExpectInvalid(RoundTrip(SendSpec{"r", {-1}}).status(), "SendSpec.block_ids");
  // A bad spec inside the metadata refuses the whole metadata.
  KVConnectorMetadata m = FullMetadata();
  m.sends[1].block_ids = {-2};
  ExpectInvalid(RoundTrip(m).status(), "SendSpec.block_ids");
}

TEST(KvTransferCodecTest, RangesAreChecked) {
  for (int32_t port : {0, 65536, -1}) {
    KVTransferParams p = FullParams();
    p.remote_port = port;
    ExpectInvalid(RoundTrip(p).status(), "remote_port");
  }
  for (int32_t tp : {0, kMaxTpSize + 1}) {
    KVTransferParams p = FullParams();
    p.tp_size = tp;
    ExpectInvalid(RoundTrip(p).status(), "tp_size");
  }
  KVTransferParams tokens = FullParams();
  tokens.remote_num_tokens = -1;
  ExpectInvalid(RoundTrip(tokens).status(), "remote_num_tokens");

  // LoadSpec: 0 is "no network peer"; out of range is refused.
  LoadSpec load = FullLoad();
  load.remote_port = 0;
  load.remote_tp_size = 0;
  EXPECT_TRUE(RoundTrip(load).ok());
  load.remote_port = 70000;
  ExpectInvalid(RoundTrip(load).status(), "LoadSpec.remote_port");
  load = FullLoad();
  load.remote_tp_size = -1;
  ExpectInvalid(RoundTrip(load).status(), "LoadSpec.remote_tp_size");
  load = FullLoad();
  load.num_tokens = -1;
  ExpectInvalid(RoundTrip(load).status(), "LoadSpec.num_tokens");
  ExpectInvalid(RoundTrip(SaveSpec{"r", {}, -3, ""}).status(), "SaveSpec.num_tokens");
}

TEST(KvTransferCodecTest, StringsAreBounded) {
  KVTransferParams p = FullParams();
  p.remote_engine_id = std::string(kMaxEngineIdBytes + 1, 'e');
  ExpectInvalid(RoundTrip(p).status(), "remote_engine_id");
  p = FullParams();
  p.remote_host = std::string(kMaxHostBytes + 1, 'h');
  ExpectInvalid(RoundTrip(p).status(), "remote_host");
  p = FullParams();
  p.remote_request_id = std::string(kMaxRequestIdBytes + 1, 'r');
  ExpectInvalid(RoundTrip(p).status(), "remote_request_id");
  LoadSpec load = FullLoad();
  load.key = std::string(kMaxKeyBytes + 1, 'k');
  ExpectInvalid(RoundTrip(load).status(), "LoadSpec.key");
  KVConnectorOutput out;
  out.failed_recving = {std::string(kMaxRequestIdBytes + 1, 'x')};
  ExpectInvalid(RoundTrip(out).status(), "failed_recving");
}

TEST(KvTransferCodecTest, WrongShapesAreRefusedNamingTheField) {
  ExpectInvalid(ReadBytes<KVTransferParams>(
                    ParamsWith(5, [](wire::Packer& pk) { pk.pack(std::string("80")); }))
                    .status(),
                "KVTransferParams.remote_port");
  ExpectInvalid(
      ReadBytes<KVTransferParams>(ParamsWith(0, [](wire::Packer& pk) { pk.pack(1); })).status(),
      "KVTransferParams.do_remote_decode");
  ExpectInvalid(
      ReadBytes<KVTransferParams>(ParamsWith(6, [](wire::Packer& pk) { pk.pack_nil(); })).status(),
      "KVTransferParams.remote_block_ids");
  // An int32 field given a 64-bit value.
  ExpectInvalid(ReadBytes<KVTransferParams>(
                    ParamsWith(8, [](wire::Packer& pk) { pk.pack(int64_t{1} << 40); }))
                    .status(),
                "KVTransferParams.remote_num_tokens");
  // Wrong field counts.
  ExpectInvalid(ReadBytes<SendSpec>(Bytes(SaveSpec{})).status(), "SendSpec");
  ExpectInvalid(ReadBytes<KVConnectorOutput>(Bytes(KVConnectorMetadata{})).status(),
                "KVConnectorOutput");
  ExpectInvalid(ReadBytes<KVConnectorMetadata>(Bytes(KVConnectorOutput{})).status(),
                "KVConnectorMetadata");
}

}  // namespace
}  // namespace vllm::kv_transfer
