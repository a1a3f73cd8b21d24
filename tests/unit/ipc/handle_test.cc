#include "ipc/handle.h"

#include <random>

#include "base/msgpack_util.h"
#include "gtest/gtest.h"

namespace vllm::ipc {
namespace {

Handle Sample() {
  Handle h;
  h.n_readers = 4;
  h.local_reader_ranks = {0, 1, 3};
  h.shm_name = "vllm-mq-1-2-3";
  h.max_chunks = 10;
  h.max_chunk_bytes = 1 << 20;
  h.local_address = "ipc:///tmp/vllm-ipc-1-AbCdEf/mq-0";
  h.remote_address = "tcp://127.0.0.1:5555";
  h.remote_curve = true;
  return h;
}

class HandleTest : public ::testing::Test {};

TEST_F(HandleTest, RoundTripsThroughBytesAndText) {
  const Handle h = Sample();
  auto back = Handle::Decode(h.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, h);
  auto text = Handle::FromText(h.ToText());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, h);
  EXPECT_EQ(h.LocalIndex(3), 2);
  EXPECT_EQ(h.LocalIndex(2), -1);
}

TEST_F(HandleTest, RejectsEveryTruncation) {
  const std::string bytes = Sample().Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(Handle::Decode(bytes.substr(0, n)).ok()) << "prefix of " << n << " bytes";
  }
}

TEST_F(HandleTest, RejectsTrailingBytesAndBadText) {
  EXPECT_FALSE(Handle::Decode(Sample().Encode() + "x").ok());
  EXPECT_FALSE(Handle::FromText("not base64 !!").ok());
  EXPECT_FALSE(Handle::FromText(std::string(100000, 'A')).ok());
}

TEST_F(HandleTest, RejectsInconsistentFields) {
  Handle h = Sample();
  h.local_reader_ranks = {0, 0};
  EXPECT_FALSE(Handle::Decode(h.Encode()).ok()) << "duplicate rank";
  h = Sample();
  h.local_reader_ranks = {7};
  EXPECT_FALSE(Handle::Decode(h.Encode()).ok()) << "rank out of range";
  h = Sample();
  h.remote_address.clear();
  EXPECT_FALSE(Handle::Decode(h.Encode()).ok()) << "remote readers without address";
  h = Sample();
  h.n_readers = 0;
  EXPECT_FALSE(Handle::Decode(h.Encode()).ok());
  h = Sample();
  h.local_reader_ranks = {0, 1, 2, 3};  // no remote reader
  h.remote_address.clear();
  EXPECT_FALSE(Handle::Decode(h.Encode()).ok()) << "CURVE without remote readers";
  h.remote_curve = false;
  EXPECT_TRUE(Handle::Decode(h.Encode()).ok());
}

// Version 1 handles (no remote_curve field) are refused by version, not misread.
TEST_F(HandleTest, RejectsTheOldVersion) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(9);
  pk.pack(std::string("vllm-mq"));
  pk.pack(1u);
  pk.pack(1u);
  pk.pack(std::vector<int32_t>{0});
  pk.pack(std::string("vllm-mq-1-2-3"));
  pk.pack(10u);
  pk.pack(1024u);
  pk.pack(std::string("ipc:///tmp/x/mq-0"));
  pk.pack(std::string(""));
  auto st = Handle::Decode({buf.data(), buf.size()});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("version 1"), std::string::npos) << st.status();
}

TEST_F(HandleTest, RejectsWrongShapes) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, std::vector<int>{1, 2, 3});
  EXPECT_FALSE(Handle::Decode({buf.data(), buf.size()}).ok());
  buf.clear();
  msgpack::pack(buf, std::string(100000, 'x'));  // oversized string
  auto st = Handle::Decode({buf.data(), buf.size()});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted) << st.status();
}

TEST_F(HandleTest, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  const std::string good = Sample().Encode();
  for (int i = 0; i < 20000; ++i) {
    std::string b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    (void)Handle::Decode(b);  // any result but a crash is fine
  }
  SUCCEED();
}

}  // namespace
}  // namespace vllm::ipc
