// kv_transfer/kv_wire.h: every message round-trips; bad frames (truncated, oversized, another
// version, wrong kinds and fields) give a Status, never a crash; DATA checks; the cache view's
// helpers.
#include "kv_transfer/kv_wire.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/msgpack_fields.h"
#include "gtest/gtest.h"
#include "kv_transfer/kv_cache_view.h"
#include "msgpack.hpp"
#include "tests/unit/kv_transfer/kv_test_util.h"

namespace vllm::kv_transfer {
namespace {

using testing::HeapCache;
using testing::TinyLayout;

std::vector<KvMessage> AllMessages() {
  KvLayout l = TinyLayout();
  l.tp_size = 2;
  l.tp_rank = 1;
  return {KvHello{"decode-0", l},
          KvWelcome{"prefill-0", l, 8},
          KvRefuse{"block_size 16 != 32"},
          KvRead{7, "cmpl-1", 170, {3, 1, 4, 1, 5}},
          KvDataHeader{7, "cmpl-1", 170, 3, {1, 0xffffffffffffffffULL, 42}},
          KvError{7, "request cmpl-1 is not held"},
          KvDone{"cmpl-1"},
          KvAck{"cmpl-1"}};
}

TEST(KvWireTest, EveryMessageRoundTrips) {
  for (const KvMessage& m : AllMessages()) {
    const std::string bytes = EncodeKvMessage(m);
    auto decoded = DecodeKvMessage(bytes);
    ASSERT_TRUE(decoded.ok()) << KvMessageName(m) << ": " << decoded.status();
    EXPECT_EQ(*decoded, m) << KvMessageName(m);
    EXPECT_EQ(EncodeKvMessage(*decoded), bytes);
  }
}

TEST(KvWireTest, EveryTruncationIsAStatus) {
  for (const KvMessage& m : AllMessages()) {
    const std::string bytes = EncodeKvMessage(m);
    for (size_t n = 0; n < bytes.size(); ++n) {
      auto decoded = DecodeKvMessage(std::string_view(bytes.data(), n));
      ASSERT_FALSE(decoded.ok()) << KvMessageName(m) << " cut at " << n;
      EXPECT_TRUE(absl::IsDataLoss(decoded.status()) || absl::IsInvalidArgument(decoded.status()) ||
                  absl::IsResourceExhausted(decoded.status()))
          << decoded.status();
    }
  }
}

std::string Pack(const std::function<void(wire::Packer&)>& fill) {
  msgpack::sbuffer buffer;
  wire::Packer pk(&buffer);
  fill(pk);
  return std::string(buffer.data(), buffer.size());
}

TEST(KvWireTest, VersionIsCheckedFirst) {
  // Version 2 with a body this build could not read: the version is what is named.
  const std::string frame = Pack([](wire::Packer& pk) {
    pk.pack_array(5);
    pk.pack(2);
    pk.pack("whatever");
    pk.pack_nil();
    pk.pack_nil();
    pk.pack_nil();
  });
  auto decoded = DecodeKvMessage(frame);
  ASSERT_TRUE(absl::IsInvalidArgument(decoded.status())) << decoded.status();
  EXPECT_TRUE(absl::StrContains(decoded.status().message(), "wire version 2")) << decoded.status();
}

TEST(KvWireTest, BadFramesAreRefused) {
  const std::vector<std::string> frames = {
      Pack([](wire::Packer& pk) { pk.pack(1); }),  // not an array
      Pack([](wire::Packer& pk) { pk.pack_array(0); }),
      Pack([](wire::Packer& pk) {  // unknown kind
        pk.pack_array(3);
        pk.pack(kKvWireVersion);
        pk.pack(99);
        pk.pack_array(0);
      }),
      Pack([](wire::Packer& pk) {  // READ with a negative block id
        pk.pack_array(3);
        pk.pack(kKvWireVersion);
        pk.pack(4);
        pk.pack_array(4);
        pk.pack(1);
        pk.pack("r");
        pk.pack(0);
        pk.pack_array(1);
        pk.pack(-1);
      }),
      Pack([](wire::Packer& pk) {  // DATA whose checksums do not match num_blocks
        pk.pack_array(3);
        pk.pack(kKvWireVersion);
        pk.pack(5);
        pk.pack_array(5);
        pk.pack(1);
        pk.pack("r");
        pk.pack(0);
        pk.pack(2);
        pk.pack_array(1);
        pk.pack(7);
      }),
      Pack([](wire::Packer& pk) {  // HELLO with an invalid layout (dtype_bytes 3)
        pk.pack_array(3);
        pk.pack(kKvWireVersion);
        pk.pack(1);
        pk.pack_array(2);
        pk.pack("e");
        pk.pack_array(7);
        for (int v : {6, 4, 32, 16, 3, 1, 0}) pk.pack(v);
      }),
      Pack([](wire::Packer& pk) {  // DONE with an empty request id
        pk.pack_array(3);
        pk.pack(kKvWireVersion);
        pk.pack(7);
        pk.pack_array(1);
        pk.pack("");
      }),
      std::string("\xdd\xff\xff\xff\xff", 5),  // an array claiming 4 G elements
      std::string(kMaxHeaderBytes + 1, '\x90'),
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    auto decoded = DecodeKvMessage(frames[i]);
    EXPECT_FALSE(decoded.ok()) << "frame " << i;
    EXPECT_TRUE(absl::IsDataLoss(decoded.status()) || absl::IsInvalidArgument(decoded.status()) ||
                absl::IsResourceExhausted(decoded.status()))
        << "frame " << i << ": " << decoded.status();
  }
}

TEST(KvWireTest, ReadOfTooManyBlocksIsRefused) {
  KvRead read{1, "r", 0, std::vector<int32_t>(kMaxBlocksPerMessage + 1, 0)};
  auto decoded = DecodeKvMessage(EncodeKvMessage(read));
  EXPECT_FALSE(decoded.ok());
}

TEST(KvWireTest, BlocksPerDataMessageStaysWithin16MiB) {
  EXPECT_EQ(BlocksPerDataMessage(TinyLayout()), (16 << 20) / (96 << 10));
  KvLayout big = TinyLayout();
  big.num_layers = 32;
  big.num_kv_heads = 8;
  big.head_dim = 128;
  EXPECT_EQ(big.block_bytes(), 4 << 20);
  EXPECT_EQ(BlocksPerDataMessage(big), 4);
  KvLayout small{1, 1, 1, 1, 1, 1, 0};
  EXPECT_EQ(BlocksPerDataMessage(small), kMaxBlocksPerMessage);
}

TEST(KvWireTest, CheckDataMessage) {
  HeapCache cache(TinyLayout(), 4);
  cache.FillRandom(1);
  const KvRead read{9, "r", 2, {1, 3}};
  std::vector<uint8_t> data = cache.Block(1);
  const std::vector<uint8_t> second = cache.Block(3);
  data.insert(data.end(), second.begin(), second.end());
  const size_t block = static_cast<size_t>(TinyLayout().block_bytes());
  KvDataHeader header{
      9, "r", 2, 2, {KvChecksum({data.data(), block}), KvChecksum({data.data() + block, block})}};
  EXPECT_TRUE(CheckDataMessage(header, read, TinyLayout(), data).ok());

  std::vector<uint8_t> corrupt = data;
  corrupt[block + 5] ^= 1;
  absl::Status s = CheckDataMessage(header, read, TinyLayout(), corrupt);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "checksum mismatch in block 3")) << s;

  std::vector<uint8_t> truncated(data.begin(), data.end() - 1);
  s = CheckDataMessage(header, read, TinyLayout(), truncated);
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated")) << s;

  KvDataHeader other = header;
  other.read_id = 10;
  EXPECT_TRUE(absl::IsDataLoss(CheckDataMessage(other, read, TinyLayout(), data)));
  other = header;
  other.num_blocks = 1;
  other.checksums.resize(1);
  EXPECT_TRUE(absl::IsDataLoss(CheckDataMessage(other, read, TinyLayout(), data)));
}

TEST(KvCacheViewTest, ValidatesLayoutAndView) {
  EXPECT_TRUE(ValidateKvLayout(TinyLayout()).ok());
  KvLayout l = TinyLayout();
  l.tp_rank = 1;  // tp_size 1
  EXPECT_TRUE(absl::StrContains(ValidateKvLayout(l).message(), "tp_rank"));
  l = TinyLayout();
  l.num_layers = 0;
  EXPECT_TRUE(absl::StrContains(ValidateKvLayout(l).message(), "num_layers"));
  l = TinyLayout();
  l.head_dim = 65536;
  l.block_size = 1024;
  EXPECT_FALSE(ValidateKvLayout(l).ok());  // a block over 16 MiB

  HeapCache cache(TinyLayout(), 3);
  EXPECT_TRUE(ValidateKvCacheView(cache.view()).ok());
  KvCacheView view = cache.view();
  view.v.pop_back();
  EXPECT_FALSE(ValidateKvCacheView(view).ok());
  view = cache.view();
  view.k[2] = nullptr;
  EXPECT_FALSE(ValidateKvCacheView(view).ok());
}

TEST(KvCacheViewTest, SpansAndWireOrder) {
  HeapCache cache(TinyLayout(), 3);
  cache.FillRandom(3);
  const KvCacheView& view = cache.view();
  EXPECT_TRUE(absl::IsOutOfRange(KBlock(view, 0, 3).status()));
  EXPECT_TRUE(absl::IsOutOfRange(KBlock(view, 0, -1).status()));
  EXPECT_TRUE(absl::IsOutOfRange(VBlock(view, 6, 0).status()));
  auto k = KBlock(view, 2, 1);
  auto v = VBlock(view, 2, 1);
  ASSERT_TRUE(k.ok() && v.ok());
  const size_t layer = static_cast<size_t>(view.layout.layer_block_bytes());
  EXPECT_EQ(k->data(), view.k[2] + layer);
  EXPECT_EQ(k->size(), layer);
  // Wire order: K[0] V[0] K[1] V[1] ...
  const std::vector<uint8_t> block = cache.Block(1);
  EXPECT_EQ(std::memcmp(block.data() + 4 * layer, k->data(), layer), 0);
  EXPECT_EQ(std::memcmp(block.data() + 5 * layer, v->data(), layer), 0);
  HeapCache other(TinyLayout(), 3);
  CopyBlockIn(other.view(), 2, block.data());
  EXPECT_EQ(other.Block(2), block);
}

TEST(KvCacheViewTest, LayoutDifferenceNamesTheField) {
  KvLayout a = TinyLayout(), b = TinyLayout();
  EXPECT_EQ(KvLayoutDifference(a, b), "");
  a.block_size = 32;
  EXPECT_EQ(KvLayoutDifference(a, b), "block_size 32 != 16");
  a = TinyLayout();
  a.tp_size = 2;
  a.tp_rank = 1;
  EXPECT_EQ(KvLayoutDifference(a, b), "tp_size 2 != 1");
}

}  // namespace
}  // namespace vllm::kv_transfer
