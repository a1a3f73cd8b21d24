// The executor ↔ worker wire protocol (worker/worker_protocol.h): every frame and every method's
// payload round-trips, and truncated, mistyped or out-of-range bytes are refused with a status.
#include "worker/worker_protocol.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec.h"
#include "gtest/gtest.h"

namespace vllm::worker {
namespace {

absl::Span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string PayloadOf(absl::Span<const uint8_t> payload) {
  return std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
}

// Every strict prefix of `bytes` must be refused by `decode` (none may crash or succeed).
template <typename Decode>
void ExpectEveryPrefixRefused(const std::string& bytes, Decode decode) {
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode(Bytes(std::string_view(bytes).substr(0, n))).ok()) << "prefix " << n;
  }
}

TEST(WorkerProtocolTest, MethodNamesAreDistinct) {
  const std::set<std::string_view> names = {
      kExecuteModelMethod,      kGetKVCacheSpecMethod, kDetermineAvailableMemoryMethod,
      kInitializeKVCacheMethod, kEchoMethod,           kShutdownMethod,
      kInitDeviceMethod};
  EXPECT_EQ(names.size(), 7u);
}

TEST(WorkerProtocolTest, CallRoundTripsWithPayload) {
  const CallHeader header{123456789012345ull, kInitializeKVCacheMethod, 3};
  const std::string payload = EncodeInitializeKVCacheArgs({100, 16});
  const std::string frame = EncodeCallPrefix(header) + payload;
  auto call = DecodeCall(Bytes(frame));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->header.call_id, header.call_id);
  EXPECT_EQ(call->header.method, header.method);
  EXPECT_EQ(call->header.reply_rank, 3);
  EXPECT_EQ(PayloadOf(call->payload), payload);
}

TEST(WorkerProtocolTest, TruncatedCallPrefixIsDataLoss) {
  const std::string prefix = EncodeCallPrefix({7, kEchoMethod, -1});
  for (size_t n = 0; n < prefix.size(); ++n) {
    auto call = DecodeCall(Bytes(std::string_view(prefix).substr(0, n)));
    ASSERT_FALSE(call.ok()) << "prefix " << n;
    EXPECT_EQ(call.status().code(), absl::StatusCode::kDataLoss) << call.status();
  }
}

TEST(WorkerProtocolTest, OversizeHeaderIsResourceExhausted) {
  std::string frame(4 + 16, '\0');
  const uint32_t n = kMaxHeaderBytes + 1;
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  EXPECT_EQ(DecodeCall(Bytes(frame)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DecodeReply(Bytes(frame)).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(WorkerProtocolTest, ReplyRoundTripsWithStatus) {
  const ReplyHeader header{42, 1, absl::StatusCode::kInvalidArgument, "bad step"};
  const std::string frame = EncodeReplyPrefix(header) + "result";
  auto reply = DecodeReply(Bytes(frame));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->header.call_id, 42u);
  EXPECT_EQ(reply->header.rank, 1);
  EXPECT_EQ(reply->header.status(), absl::InvalidArgumentError("bad step"));
  EXPECT_EQ(PayloadOf(reply->payload), "result");
  ExpectEveryPrefixRefused(EncodeReplyPrefix(header),
                           [](absl::Span<const uint8_t> b) { return DecodeReply(b).status(); });
}

TEST(WorkerProtocolTest, ReplyMessageOverTheLimitIsCutNotLost) {
  const ReplyHeader header{1, 0, absl::StatusCode::kInternal, std::string(100000, 'x')};
  auto reply = DecodeReply(Bytes(EncodeReplyPrefix(header)));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->header.code, absl::StatusCode::kInternal);
  EXPECT_LT(reply->header.message.size(), header.message.size());
  EXPECT_FALSE(reply->header.message.empty());
}

TEST(WorkerProtocolTest, CallAndReplyAreNotInterchangeable) {
  // A reply's header has five fields, a call's four: each decoder refuses the other's frame.
  EXPECT_FALSE(DecodeCall(Bytes(EncodeReplyPrefix({1, 0, absl::StatusCode::kOk, ""}))).ok());
  EXPECT_FALSE(DecodeReply(Bytes(EncodeCallPrefix({1, kEchoMethod, -1}))).ok());
}

TEST(WorkerProtocolTest, WrongVersionIsRefused) {
  std::string frame = EncodeCallPrefix({1, kEchoMethod, -1});
  // The header is a fixarray (0x94) followed by the version as a positive fixint.
  ASSERT_EQ(static_cast<uint8_t>(frame[4]), 0x94);
  ASSERT_EQ(static_cast<uint8_t>(frame[5]), kWorkerProtocolVersion);
  frame[5] = static_cast<char>(kWorkerProtocolVersion + 1);
  auto call = DecodeCall(Bytes(frame));
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(call.status().message().find("protocol version"), std::string_view::npos);
}

TEST(WorkerProtocolTest, ReadyRoundTripsAndRefusesTruncation) {
  ReadyMessage ready;
  ready.rank = 2;
  ready.pid = 4242;
  ready.code = absl::StatusCode::kOk;
  ready.response_handle = "handle-text";
  ready.stage_handle = "stage-handle-text";
  const std::string bytes = EncodeReady(ready);
  auto decoded = DecodeReady(Bytes(bytes));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->rank, 2);
  EXPECT_EQ(decoded->pid, 4242);
  EXPECT_TRUE(decoded->status().ok());
  EXPECT_EQ(decoded->response_handle, "handle-text");
  EXPECT_EQ(decoded->stage_handle, "stage-handle-text");
  ExpectEveryPrefixRefused(bytes,
                           [](absl::Span<const uint8_t> b) { return DecodeReady(b).status(); });
  // A failed start-up carries its status.
  ready.code = absl::StatusCode::kNotFound;
  ready.message = "no such model";
  decoded = DecodeReady(Bytes(EncodeReady(ready)));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->status(), absl::NotFoundError("no such model"));
}

// A pipeline stage without layers reports none (the engine sizes the cache by the busiest).
TEST(WorkerProtocolTest, KVCacheSpecOfAStageWithoutLayers) {
  auto decoded = DecodeKVCacheSpec(Bytes(EncodeKVCacheSpec(core::KVCacheSpec{0, 8, 128, 2})));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->BytesPerToken(), 0);
}

TEST(WorkerProtocolTest, StageHandlesRoundTripAndAreBounded) {
  const std::vector<std::string> handles = {"a", "", "handle-c", ""};
  const std::string bytes = EncodeStageHandles(handles);
  auto decoded = DecodeStageHandles(Bytes(bytes));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, handles);
  ExpectEveryPrefixRefused(
      bytes, [](absl::Span<const uint8_t> b) { return DecodeStageHandles(b).status(); });
  // Not an array of strings; too many ranks; a handle over 64 KiB.
  EXPECT_FALSE(DecodeStageHandles(Bytes(EncodeAvailableMemory(5))).ok());
  EXPECT_FALSE(DecodeStageHandles(Bytes(EncodeStageHandles(std::vector<std::string>(4097)))).ok());
  EXPECT_FALSE(
      DecodeStageHandles(Bytes(EncodeStageHandles({std::string((64 << 10) + 1, 'h')}))).ok());
}

TEST(WorkerProtocolTest, KVCacheSpecRoundTrips) {
  const core::KVCacheSpec spec{24, 8, 128, 2, 4096};
  const std::string bytes = EncodeKVCacheSpec(spec);
  auto decoded = DecodeKVCacheSpec(Bytes(bytes));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->draft_bytes_per_token, 4096);
  EXPECT_EQ(decoded->BytesPerToken(), int64_t{2} * 8 * 128 * 2 * 24 + 4096);
  EXPECT_EQ(decoded->num_layers, 24);
  EXPECT_EQ(decoded->num_kv_heads, 8);
  EXPECT_EQ(decoded->head_dim, 128);
  EXPECT_EQ(decoded->dtype_bytes, 2);
  ExpectEveryPrefixRefused(
      bytes, [](absl::Span<const uint8_t> b) { return DecodeKVCacheSpec(b).status(); });
}

TEST(WorkerProtocolTest, KVCacheSpecOutOfRangeOrMistypedIsRefused) {
  for (const core::KVCacheSpec& bad :
       {core::KVCacheSpec{-1, 8, 128, 2}, core::KVCacheSpec{24, -1, 128, 2},
        core::KVCacheSpec{24, 8, 0, 2}, core::KVCacheSpec{24, 8, 128, 16},
        core::KVCacheSpec{24, 8, 128, 2, -1}}) {
    auto decoded = DecodeKVCacheSpec(Bytes(EncodeKVCacheSpec(bad)));
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
  }
  // Another method's payload: an int, or an array of two.
  EXPECT_EQ(DecodeKVCacheSpec(Bytes(EncodeAvailableMemory(1 << 20))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeKVCacheSpec(Bytes(EncodeInitializeKVCacheArgs({1, 16}))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DecodeKVCacheSpec(Bytes(EncodeKVCacheSpec({24, 8, 128, 2}) + "x")).ok());
  EXPECT_FALSE(DecodeKVCacheSpec({}).ok());
}

TEST(WorkerProtocolTest, AvailableMemoryRoundTripsEveryInt64) {
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{1} << 40,
                    std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    const std::string bytes = EncodeAvailableMemory(v);
    auto decoded = DecodeAvailableMemory(Bytes(bytes));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, v);
    ExpectEveryPrefixRefused(
        bytes, [](absl::Span<const uint8_t> b) { return DecodeAvailableMemory(b).status(); });
  }
  EXPECT_EQ(DecodeAvailableMemory(Bytes(EncodeKVCacheSpec({24, 8, 128, 2}))).status().code(),
            absl::StatusCode::kInvalidArgument);
  // msgpack uint64 above int64's range.
  const std::string too_big = "\xcf\xff\xff\xff\xff\xff\xff\xff\xff";
  EXPECT_FALSE(DecodeAvailableMemory(Bytes(too_big)).ok());
}

TEST(WorkerProtocolTest, InitializeKVCacheArgsRoundTripAndRanges) {
  const std::string bytes = EncodeInitializeKVCacheArgs({2730, 16});
  auto decoded = DecodeInitializeKVCacheArgs(Bytes(bytes));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_blocks, 2730);
  EXPECT_EQ(decoded->block_size, 16);
  ExpectEveryPrefixRefused(
      bytes, [](absl::Span<const uint8_t> b) { return DecodeInitializeKVCacheArgs(b).status(); });
  for (const InitializeKVCacheArgs& bad :
       {InitializeKVCacheArgs{0, 16}, InitializeKVCacheArgs{-5, 16},
        InitializeKVCacheArgs{100, 0}}) {
    EXPECT_EQ(DecodeInitializeKVCacheArgs(Bytes(EncodeInitializeKVCacheArgs(bad))).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Three fields, a map, a string: refused.
  EXPECT_FALSE(DecodeInitializeKVCacheArgs(Bytes(EncodeKVCacheSpec({1, 1, 1, 1}))).ok());
  EXPECT_FALSE(DecodeInitializeKVCacheArgs(Bytes("\x81\x01\x02")).ok());
  EXPECT_FALSE(DecodeInitializeKVCacheArgs(Bytes("\xa3"
                                                 "abc"))
                   .ok());
  // An integer past int32.
  EXPECT_FALSE(DecodeInitializeKVCacheArgs(Bytes("\x92\xce\xff\xff\xff\xff\x10")).ok());
}

TEST(WorkerProtocolTest, EmptyPayloadsAreChecked) {
  EXPECT_TRUE(CheckEmptyPayload({}, kShutdownMethod).ok());
  const absl::Status s = CheckEmptyPayload(Bytes("x"), kGetKVCacheSpecMethod);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(kGetKVCacheSpecMethod), std::string_view::npos);
}

TEST(WorkerProtocolTest, ExecuteModelPayloadsAreTheEngineCodec) {
  // execute_model carries core/codec.h's frames (tested field by field in codec_test); here:
  // they travel intact behind a call prefix, and a reply's payload decodes as the output.
  core::SchedulerOutput so;
  so.step_id = 5;
  const std::string step = core::Encode(so);
  const std::string frame = EncodeCallPrefix({9, kExecuteModelMethod, 0}) + step;
  auto call = DecodeCall(Bytes(frame));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->header.method, kExecuteModelMethod);
  auto step_back = core::DecodeSchedulerOutput(PayloadOf(call->payload));
  ASSERT_TRUE(step_back.ok()) << step_back.status();
  EXPECT_EQ(step_back->step_id, 5u);

  core::ModelRunnerOutput out;
  out.req_ids = {"a", "b"};
  out.sampled_token_ids = {{1}, {2, 3}};
  const std::string reply =
      EncodeReplyPrefix({9, 0, absl::StatusCode::kOk, ""}) + core::Encode(out);
  auto decoded = DecodeReply(Bytes(reply));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto back = core::DecodeModelRunnerOutput(PayloadOf(decoded->payload));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->req_ids, out.req_ids);
  EXPECT_EQ(back->sampled_token_ids, out.sampled_token_ids);
  // A step is not a ModelRunnerOutput.
  EXPECT_FALSE(core::DecodeModelRunnerOutput(step).ok());
}

}  // namespace
}  // namespace vllm::worker
