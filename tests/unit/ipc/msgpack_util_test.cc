#include "base/msgpack_util.h"

#include "gtest/gtest.h"

namespace vllm::wire {
namespace {

absl::Span<const uint8_t> Bytes(const msgpack::sbuffer& b) {
  return {reinterpret_cast<const uint8_t*>(b.data()), b.size()};
}

class MsgpackUtilTest : public ::testing::Test {};

TEST_F(MsgpackUtilTest, ParsesAndReferencesInPlace) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, std::make_tuple(std::string("hello"), 42));
  auto oh = UnpackBounded(Bytes(buf));
  ASSERT_TRUE(oh.ok()) << oh.status();
  const msgpack::object& o = oh->get();
  ASSERT_EQ(o.type, msgpack::type::ARRAY);
  const msgpack::object& s = o.via.array.ptr[0];
  // Zero-copy: the string points into our buffer.
  EXPECT_GE(s.via.str.ptr, buf.data());
  EXPECT_LT(s.via.str.ptr, buf.data() + buf.size());
  auto n = ConvertAs<int>(o.via.array.ptr[1], "n");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 42);
  EXPECT_FALSE(ConvertAs<std::string>(o.via.array.ptr[1], "n").ok());
}

TEST_F(MsgpackUtilTest, EnforcesLimits) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, std::vector<int>(100, 1));
  UnpackLimits small;
  small.max_array = 10;
  EXPECT_EQ(UnpackBounded(Bytes(buf), small).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(UnpackBounded(Bytes(buf)).ok());

  buf.clear();
  msgpack::pack(buf, std::vector<std::vector<std::vector<int>>>{{{1}}});
  UnpackLimits shallow;
  shallow.max_depth = 2;
  EXPECT_EQ(UnpackBounded(Bytes(buf), shallow).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(MsgpackUtilTest, RejectsTruncatedAndTrailing) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, std::vector<std::string>{"abc", "defgh"});
  auto all = Bytes(buf);
  for (size_t n = 0; n < all.size(); ++n) {
    EXPECT_FALSE(UnpackBounded(all.subspan(0, n)).ok()) << n;
  }
  std::vector<uint8_t> extra(all.begin(), all.end());
  extra.push_back(0xc0);
  EXPECT_EQ(UnpackBounded(extra).status().code(), absl::StatusCode::kDataLoss);
  // A str header claiming 4 GiB in a 5-byte frame.
  const uint8_t lying[] = {0xdb, 0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(UnpackBounded(lying).ok());
}

}  // namespace
}  // namespace vllm::wire
