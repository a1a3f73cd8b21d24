#include "core/codec.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "config/speculative_config.h"
#include "gtest/gtest.h"
#include "msgpack.hpp"

namespace vllm::core {
namespace {

SamplingParams FullSamplingParams() {
  SamplingParams p;
  p.temperature = 0.7;
  p.top_p = 0.9;
  p.top_k = 40;
  p.min_p = 0.05;
  p.presence_penalty = 0.5;
  p.frequency_penalty = -0.5;
  p.repetition_penalty = 1.1;
  p.seed = -1234567890123LL;
  p.max_tokens = 77;
  p.min_tokens = 3;
  p.stop_token_ids = {5, 6, 7};
  p.ignore_eos = true;
  p.logprobs = 5;
  p.prompt_logprobs = 3;
  p.allowed_token_ids = {1, 2, 3};
  p.bad_words_token_ids = {{9}, {10, 11}};
  p.logit_bias = {{4, -100.0f}, {8, 2.5f}};
  return p;
}

// A prefill instance's answer, as a decode instance receives it.
kv_transfer::KVTransferParams RemotePrefill() {
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

EngineCoreRequest FullRequest() {
  EngineCoreRequest r;
  r.request_id = "cmpl-abc-0";
  r.prompt_token_ids = {1, 2, 3, 40000, 0};
  r.sampling_params = FullSamplingParams();
  r.eos_token_id = 2;
  r.arrival_time = 1712345678.25;
  r.priority = -3;
  r.cache_salt = "tenant-7";
  r.data_parallel_rank = 1;
  r.kv_transfer_params = RemotePrefill();
  return r;
}

EngineCoreOutputs FullOutputs() {
  EngineCoreOutputs o;
  o.engine_index = 3;
  EngineCoreOutput a;
  a.request_id = "a";
  a.new_token_ids = {11, 12};
  a.num_cached_tokens = 32;
  a.num_cache_creation_tokens = 48;
  a.logprobs = {TokenLogprobs{{11, 9}, {-0.5f, -1.25f}, 1}, TokenLogprobs{{12}, {-0.1f}, 1}};
  a.prompt_logprobs = {TokenLogprobs{{4, 4}, {-0.75f, -0.75f}, 1},
                       TokenLogprobs{{8, 2}, {-3.5f, -0.25f}, 7}};
  EngineCoreOutput b;
  b.request_id = "b";
  b.new_token_ids = {99};
  b.finish_reason = FinishReason::kStop;
  b.stop_reason = 99;
  b.kv_transfer_params = RemotePrefill();
  o.outputs = {a, b};
  structured_output::StructuredOutputStats so;
  so.cache_hits = 5;
  so.cache_misses = 2;
  so.compile_failures = 1;
  so.compile_timeouts = 1;
  so.ObserveCompileSeconds(0.02);
  so.ObserveCompileSeconds(100.0);
  spec_decode::SpecDecodingStats spec;
  spec.num_spec_tokens = 3;
  spec.Observe(3, 2);
  spec.Observe(2, 0);
  spec.Observe(3, 3);
  o.scheduler_stats = SchedulerStats{4, 2,  0.5,  PrefixCacheStats{true, 3, 300, 128},
                                     1, so, spec, PrefixCacheStats{false, 2, 64, 48}};
  o.timestamp = 12.5;
  o.finished_requests = {"b"};
  o.wave_complete = 7;
  return o;
}

SchedulerOutput FullSchedulerOutput() {
  SchedulerOutput s;
  s.step_id = 12345678901ULL;
  NewRequestData n;
  n.req_id = "new";
  n.prompt_token_ids = {1, 2, 3};
  n.sampling_params = FullSamplingParams();
  n.block_ids = {4, 5};
  n.num_computed_tokens = 16;
  s.scheduled_new_reqs.push_back(n);
  CachedRequestData& c = s.scheduled_cached_reqs;
  c.req_ids = {"r0", "r1"};
  c.resumed_from_preemption = {0, 1};
  c.new_token_ids = {42, 1, 2, 3};
  c.new_token_ids_offsets = {0, 1, 4};
  c.new_block_ids = {9};
  c.new_block_ids_offsets = {0, 0, 1};
  c.num_computed_tokens = {20, 0};
  s.num_scheduled_tokens = {3, 1, 3};
  s.total_num_scheduled_tokens = 7;
  s.finished_req_ids = {"gone"};
  s.preempted_req_ids = {"r9"};
  kv_transfer::KVConnectorMetadata& kv = s.kv_connector_metadata.emplace();
  kv_transfer::LoadSpec load;
  load.req_id = "r-load";
  load.local_block_ids = {6, 7};
  load.num_tokens = 32;
  load.remote_block_ids = {1, 2};
  load.remote_engine_id = "prefill-0";
  load.remote_request_id = "cmpl-abc-0";
  load.remote_host = "10.0.0.7";
  load.remote_port = 14579;
  load.remote_tp_size = 1;
  kv.loads = {load};
  kv.saves = {kv_transfer::SaveSpec{"new", {4, 5}, 16, "key-new"}};
  kv.sends = {kv_transfer::SendSpec{"gone", {8}}};
  kv.sends_released = {"old"};
  return s;
}

ModelRunnerOutput FullModelRunnerOutput() {
  ModelRunnerOutput m;
  m.req_ids = {"new", "r0", "r1"};
  m.sampled_token_ids = {{}, {7}, {8, 9}};
  m.logprobs = {{}, {TokenLogprobs{{7}, {-0.25f}, 1}}, {}};
  m.prompt_logprobs = {
      {TokenLogprobs{{2, 2}, {-1.5f, -1.5f}, 1}, TokenLogprobs{{3}, {-4.0f}, 9}}, {}, {}};
  m.draft_token_ids = {{}, {4, 5, 6}, {1}};
  m.kv_connector_output.emplace();
  m.kv_connector_output->finished_sending = {"gone"};
  m.kv_connector_output->finished_recving = {"r-load"};
  m.kv_connector_output->failed_recving = {"r-bad"};
  return m;
}

class CodecTest : public ::testing::Test {
 protected:
  // Every strict prefix of a valid message must be rejected without crashing.
  template <typename Decode>
  void ExpectPrefixesRejected(const std::string& bytes, Decode decode) {
    for (size_t len = 0; len < bytes.size(); ++len) {
      auto result = decode(std::string_view(bytes.data(), len));
      ASSERT_FALSE(result.ok()) << "prefix of " << len << " bytes accepted";
      // A cut header may declare more elements than the rest of the frame holds.
      EXPECT_TRUE(absl::IsDataLoss(result.status()) || absl::IsInvalidArgument(result.status()) ||
                  absl::IsResourceExhausted(result.status()))
          << result.status();
    }
  }
};

TEST_F(CodecTest, SamplingParamsRoundTrip) {
  for (const SamplingParams& p : {SamplingParams{}, FullSamplingParams()}) {
    auto decoded = DecodeSamplingParams(Encode(p));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, p);
  }
}

TEST_F(CodecTest, EngineCoreRequestRoundTrip) {
  EngineCoreRequest minimal;
  minimal.request_id = "x";
  minimal.prompt_token_ids = {1};
  for (const EngineCoreRequest& r : {minimal, FullRequest()}) {
    auto decoded = DecodeEngineCoreRequest(Encode(r));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, r);
  }
}

TEST_F(CodecTest, EngineCoreOutputsRoundTrip) {
  for (const EngineCoreOutputs& o : {EngineCoreOutputs{}, FullOutputs()}) {
    auto decoded = DecodeEngineCoreOutputs(Encode(o));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, o);
  }
}

// num_cache_creation_tokens is a count: a negative one is refused naming the field.
TEST_F(CodecTest, NegativeCacheCreationTokensAreRefused) {
  EngineCoreOutputs o = FullOutputs();
  o.outputs[0].num_cache_creation_tokens = -1;
  auto decoded = DecodeEngineCoreOutputs(Encode(o));
  ASSERT_TRUE(absl::IsInvalidArgument(decoded.status())) << decoded.status();
  EXPECT_NE(decoded.status().message().find("num_cache_creation_tokens"), std::string_view::npos)
      << decoded.status();
}

TEST_F(CodecTest, SchedulerStatsRoundTrip) {
  const SchedulerStats stats = *FullOutputs().scheduler_stats;
  auto decoded = DecodeSchedulerStats(Encode(stats));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, stats);
}

// A SchedulerStats frame written by hand: `buckets` compile-time counts, and speculative
// decoding's num_spec_tokens and `per_pos` per-position counts (1 each).
std::string StatsFrame(size_t buckets, int64_t num_spec_tokens, size_t per_pos) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(static_cast<int>(WireTag::kSchedulerStats));
  pk.pack(kWireVersion);
  pk.pack_array(8);
  pk.pack(1);
  pk.pack(0);
  pk.pack(0.5);
  pk.pack_array(4);
  pk.pack(false);
  pk.pack(0);
  pk.pack(0);
  pk.pack(0);
  pk.pack(0);
  pk.pack_array(6);
  for (int i = 0; i < 4; ++i) pk.pack(0);
  pk.pack_array(static_cast<uint32_t>(buckets));
  for (size_t i = 0; i < buckets; ++i) pk.pack(1);
  pk.pack(1.5);
  pk.pack_array(5);
  pk.pack(num_spec_tokens);
  pk.pack(1);
  pk.pack(static_cast<int64_t>(per_pos));
  pk.pack(static_cast<int64_t>(per_pos));
  pk.pack_array(static_cast<uint32_t>(per_pos));
  for (size_t i = 0; i < per_pos; ++i) pk.pack(1);
  pk.pack_array(4);  // connector_prefix_cache_stats
  pk.pack(false);
  pk.pack(0);
  pk.pack(0);
  pk.pack(0);
  return std::string(buffer.data(), buffer.size());
}

// The compile-time histogram has a fixed number of buckets: a frame with another count is
// refused, never read into a longer list.
TEST_F(CodecTest, StructuredOutputStatsNeedExactlyTheirBuckets) {
  for (size_t buckets : {structured_output::kCompileSecondsBuckets.size(),
                         structured_output::kCompileSecondsBuckets.size() + 2, size_t{0}}) {
    auto result = DecodeSchedulerStats(StatsFrame(buckets, 0, 0));
    ASSERT_TRUE(absl::IsInvalidArgument(result.status())) << buckets << ": " << result.status();
    EXPECT_NE(result.status().message().find("compile_seconds_counts"), std::string_view::npos)
        << result.status();
  }
}

// At most config::kMaxSpeculativeTokens per-position counts (ResourceExhausted past it, before
// anything is read into the list) and num_spec_tokens within [0, kMaxSpeculativeTokens].
TEST_F(CodecTest, SpecDecodingStatsAreBounded) {
  const size_t buckets = structured_output::kCompileSecondsBuckets.size() + 1;
  const auto k = static_cast<size_t>(config::kMaxSpeculativeTokens);
  auto full = DecodeSchedulerStats(StatsFrame(buckets, config::kMaxSpeculativeTokens, k));
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->spec_decoding_stats.num_spec_tokens, config::kMaxSpeculativeTokens);
  EXPECT_EQ(full->spec_decoding_stats.num_accepted_tokens_per_pos, std::vector<int64_t>(k, 1));

  auto too_many = DecodeSchedulerStats(StatsFrame(buckets, config::kMaxSpeculativeTokens, k + 1));
  ASSERT_TRUE(absl::IsResourceExhausted(too_many.status())) << too_many.status();
  EXPECT_NE(too_many.status().message().find("num_accepted_tokens_per_pos"), std::string_view::npos)
      << too_many.status();
  // Inside an EngineCoreOutputs frame too: the whole frame is refused.
  EngineCoreOutputs outs = FullOutputs();
  outs.scheduler_stats->spec_decoding_stats.num_accepted_tokens_per_pos.assign(k + 1, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(DecodeEngineCoreOutputs(Encode(outs)).status()));

  for (int64_t bad : {int64_t{-1}, int64_t{config::kMaxSpeculativeTokens} + 1}) {
    auto result = DecodeSchedulerStats(StatsFrame(buckets, bad, 0));
    ASSERT_TRUE(absl::IsInvalidArgument(result.status())) << bad << ": " << result.status();
    EXPECT_NE(result.status().message().find("num_spec_tokens"), std::string_view::npos)
        << result.status();
  }
}

TEST_F(CodecTest, SchedulerOutputRoundTrip) {
  for (const SchedulerOutput& s : {SchedulerOutput{}, FullSchedulerOutput()}) {
    auto decoded = DecodeSchedulerOutput(Encode(s));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, s);
  }
}

// Drafts from the worker: one list per request, each at most kMaxSpeculativeTokens long.
TEST_F(CodecTest, DraftTokenIdsAreBounded) {
  ModelRunnerOutput m;
  m.req_ids = {"a", "b"};
  m.sampled_token_ids = {{1}, {2}};
  m.draft_token_ids = {{3}, std::vector<int32_t>(config::kMaxSpeculativeTokens + 1, 4)};
  auto too_many = DecodeModelRunnerOutput(Encode(m));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(std::string(too_many.status().message()).find("draft_token_ids"), std::string::npos);
  m.draft_token_ids = {{3}};  // not one list per request
  EXPECT_FALSE(DecodeModelRunnerOutput(Encode(m)).ok());
}

TEST_F(CodecTest, ModelRunnerOutputRoundTrip) {
  for (const ModelRunnerOutput& m : {ModelRunnerOutput{}, FullModelRunnerOutput()}) {
    auto decoded = DecodeModelRunnerOutput(Encode(m));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, m);
  }
}

// The KV-connector fields (wire version 7) round trip set, set but empty, and unset.
TEST_F(CodecTest, KvTransferFieldsRoundTrip) {
  EngineCoreRequest request = FullRequest();
  EngineCoreOutputs outputs = FullOutputs();
  SchedulerOutput step = FullSchedulerOutput();
  ModelRunnerOutput result = FullModelRunnerOutput();
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 0) {  // empty values
      request.kv_transfer_params.emplace();
      outputs.outputs[1].kv_transfer_params.emplace();
      step.kv_connector_metadata.emplace();
      result.kv_connector_output.emplace();
    } else {  // unset
      request.kv_transfer_params.reset();
      outputs.outputs[1].kv_transfer_params.reset();
      outputs.scheduler_stats->connector_prefix_cache_stats = {};
      step.kv_connector_metadata.reset();
      result.kv_connector_output.reset();
    }
    auto r = DecodeEngineCoreRequest(Encode(request));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, request);
    auto o = DecodeEngineCoreOutputs(Encode(outputs));
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(*o, outputs);
    auto s = DecodeSchedulerOutput(Encode(step));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, step);
    auto m = DecodeModelRunnerOutput(Encode(result));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, result);
  }
}

// kv_transfer/codec.h's bounds apply inside every message that carries its values.
TEST_F(CodecTest, BadKvTransferValuesAreRefused) {
  auto expect_invalid = [](const absl::Status& status, std::string_view field) {
    ASSERT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_NE(std::string(status.message()).find(field), std::string::npos) << status;
  };
  EngineCoreRequest negative = FullRequest();
  negative.kv_transfer_params->remote_block_ids = {1, -1};
  expect_invalid(DecodeEngineCoreRequest(Encode(negative)).status(),
                 "KVTransferParams.remote_block_ids");
  EngineCoreRequest no_port = FullRequest();
  no_port.kv_transfer_params->remote_port = 0;
  expect_invalid(DecodeEngineCoreRequest(Encode(no_port)).status(), "remote_port");

  EngineCoreOutputs oversized = FullOutputs();
  oversized.outputs[1].kv_transfer_params->remote_block_ids.assign(
      kv_transfer::kMaxRemoteBlockIds + 1, 0);
  auto refused = DecodeEngineCoreOutputs(Encode(oversized));
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("remote_block_ids"), std::string::npos);

  SchedulerOutput bad_load = FullSchedulerOutput();
  bad_load.kv_connector_metadata->loads[0].local_block_ids = {-3};
  expect_invalid(DecodeSchedulerOutput(Encode(bad_load)).status(), "LoadSpec.local_block_ids");
  SchedulerOutput bad_tokens = FullSchedulerOutput();
  bad_tokens.kv_connector_metadata->saves[0].num_tokens = -1;
  expect_invalid(DecodeSchedulerOutput(Encode(bad_tokens)).status(), "SaveSpec.num_tokens");

  ModelRunnerOutput long_id = FullModelRunnerOutput();
  long_id.kv_connector_output->failed_recving = {std::string(kMaxRequestIdBytes + 1, 'x')};
  expect_invalid(DecodeModelRunnerOutput(Encode(long_id)).status(), "failed_recving");
}

TEST_F(CodecTest, AbortAndWaveRoundTrip) {
  const std::vector<std::string> ids = {"a", "b", ""};
  auto decoded_ids = DecodeAbortRequests(EncodeAbortRequests(ids));
  ASSERT_TRUE(decoded_ids.ok()) << decoded_ids.status();
  EXPECT_EQ(*decoded_ids, ids);
  auto wave = DecodeStartDpWave(Encode(StartDpWave{5, 2}));
  ASSERT_TRUE(wave.ok()) << wave.status();
  EXPECT_EQ(*wave, (StartDpWave{5, 2}));
}

// Regression (hardening issue, defect 3): a logprob of exactly 0.0 (a confident model) or any
// integral float used to be written by msgpack-c as an integer, and the float-list decoder
// refused integers, so the frontend dropped the whole EngineCoreOutputs frame.
TEST_F(CodecTest, IntegralFloatsRoundTrip) {
  EngineCoreOutputs o = FullOutputs();
  o.outputs[0].logprobs = {TokenLogprobs{{11, 9, 4}, {0.0f, -1.0f, -3.0f}, 1},
                           TokenLogprobs{{12}, {-0.0f}, 1}};
  o.scheduler_stats->kv_cache_usage = 1.0;
  o.timestamp = 1700000000.0;
  auto decoded = DecodeEngineCoreOutputs(Encode(o));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, o);

  ModelRunnerOutput m = FullModelRunnerOutput();
  m.logprobs = {{}, {TokenLogprobs{{7}, {0.0f}, 1}}, {TokenLogprobs{{8, 1}, {-2.0f, -5.0f}, 2}}};
  auto decoded_m = DecodeModelRunnerOutput(Encode(m));
  ASSERT_TRUE(decoded_m.ok()) << decoded_m.status();
  EXPECT_EQ(*decoded_m, m);

  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 1.0;
  p.repetition_penalty = 2.0;
  auto decoded_p = DecodeSamplingParams(Encode(p));
  ASSERT_TRUE(decoded_p.ok()) << decoded_p.status();
  EXPECT_EQ(*decoded_p, p);
}

// Floats go on the wire as msgpack float32/float64 whatever their value (the encoding does not
// change type with the value), and -0.0 keeps its sign.
TEST_F(CodecTest, FloatsAreEncodedAsFloats) {
  ModelRunnerOutput m;
  m.req_ids = {"r"};
  m.sampled_token_ids = {{1}};
  m.logprobs = {{TokenLogprobs{{1}, {-0.0f}, 1}}};
  const std::string bytes = Encode(m);
  auto oh = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& lp =
      oh.get().via.array.ptr[2].via.array.ptr[2].via.array.ptr[0].via.array.ptr[0].via.array.ptr[1];
  ASSERT_EQ(lp.type, msgpack::type::ARRAY);
  ASSERT_EQ(lp.via.array.size, 1u);
  EXPECT_EQ(lp.via.array.ptr[0].type, msgpack::type::FLOAT32);
  auto decoded = DecodeModelRunnerOutput(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(std::signbit(decoded->logprobs[0][0].logprobs[0]));
}

// Peers that do write integral floats as integers (msgpack-c's own packer, other
// implementations) are accepted: a float field takes a msgpack integer.
TEST_F(CodecTest, FloatFieldsAcceptIntegers) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(3);
  pk.pack(static_cast<uint32_t>(WireTag::kModelRunnerOutput));
  pk.pack(kWireVersion);
  pk.pack_array(6);
  pk.pack_array(1);
  pk.pack(std::string("r"));
  pk.pack_array(1);
  pk.pack_array(1);
  pk.pack(5);
  pk.pack_array(1);
  pk.pack_array(1);
  pk.pack_array(3);
  pk.pack_array(2);
  pk.pack(5);
  pk.pack(6);
  pk.pack_array(2);
  pk.pack(0);   // positive integer where a float is expected
  pk.pack(-3);  // negative integer
  pk.pack(1);
  pk.pack_array(0);  // prompt_logprobs
  pk.pack_array(0);  // draft_token_ids
  pk.pack_nil();     // kv_connector_output
  auto decoded = DecodeModelRunnerOutput(std::string_view(b.data(), b.size()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->logprobs.size(), 1u);
  EXPECT_EQ(decoded->logprobs[0][0].logprobs, (std::vector<float>{0.0f, -3.0f}));
}

// A request frame the engine cannot decode still names its request, so the engine answers it
// with an error instead of dropping it (its client would wait forever).
TEST_F(CodecTest, RequestIdsAreRecoveredFromFramesThatDoNotDecode) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(3);
  pk.pack(static_cast<uint32_t>(WireTag::kEngineCoreRequest));
  pk.pack(kWireVersion);
  pk.pack_array(9);
  pk.pack(std::string("req-7"));
  pk.pack(std::string("not a token list"));  // wrong type: the strict decoder refuses
  for (int i = 0; i < 7; ++i) pk.pack_nil();
  const std::string_view bad(b.data(), b.size());
  ASSERT_FALSE(DecodeEngineCoreRequest(bad).ok());
  EXPECT_EQ(RecoverRequestId(bad), "req-7");
  EXPECT_EQ(RecoverRequestId(Encode(FullRequest())), "cmpl-abc-0");
  EXPECT_EQ(RecoverRequestId(""), std::nullopt);
  EXPECT_EQ(RecoverRequestId(bad.substr(0, bad.size() - 3)), std::nullopt);  // truncated
  EXPECT_EQ(RecoverRequestId(Encode(FullOutputs())), std::nullopt);          // body[0] is no string
  const std::string long_id(kMaxRequestIdBytes + 1, 'x');
  EngineCoreRequest too_long = FullRequest();
  too_long.request_id = long_id;
  EXPECT_EQ(RecoverRequestId(Encode(too_long)), std::nullopt);
}

TEST_F(CodecTest, TruncatedMessagesAreRejected) {
  ExpectPrefixesRejected(Encode(FullRequest()),
                         [](std::string_view b) { return DecodeEngineCoreRequest(b); });
  ExpectPrefixesRejected(Encode(FullOutputs()),
                         [](std::string_view b) { return DecodeEngineCoreOutputs(b); });
  ExpectPrefixesRejected(Encode(FullSchedulerOutput()),
                         [](std::string_view b) { return DecodeSchedulerOutput(b); });
  ExpectPrefixesRejected(Encode(FullModelRunnerOutput()),
                         [](std::string_view b) { return DecodeModelRunnerOutput(b); });
  // A cut in the middle of the outer array is DataLoss specifically.
  const std::string bytes = Encode(FullRequest());
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeEngineCoreRequest(std::string_view(bytes).substr(0, bytes.size() / 2)).status()));
}

TEST_F(CodecTest, WrongTagVersionAndTrailingBytesAreRejected) {
  // A SchedulerOutput is not an EngineCoreRequest.
  auto wrong_tag = DecodeEngineCoreRequest(Encode(FullSchedulerOutput()));
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_tag.status()));
  EXPECT_NE(wrong_tag.status().message().find("tag"), std::string_view::npos);

  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(static_cast<int>(WireTag::kStartDpWave));
  pk.pack(kWireVersion + 1);
  pk.pack_array(2);
  pk.pack(1);
  pk.pack(2);
  auto wrong_version = DecodeStartDpWave(std::string_view(buffer.data(), buffer.size()));
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_version.status()));
  EXPECT_NE(wrong_version.status().message().find("version"), std::string_view::npos);

  std::string trailing = Encode(StartDpWave{1, 2}) + "x";
  EXPECT_TRUE(absl::IsDataLoss(DecodeStartDpWave(trailing).status()));
}

TEST_F(CodecTest, WrongFieldTypesAreRejectedNamingTheField) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(static_cast<int>(WireTag::kStartDpWave));
  pk.pack(kWireVersion);
  pk.pack_array(2);
  pk.pack(std::string("one"));
  pk.pack(2);
  auto result = DecodeStartDpWave(std::string_view(buffer.data(), buffer.size()));
  ASSERT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
  EXPECT_NE(result.status().message().find("StartDpWave.wave"), std::string_view::npos)
      << result.status();

  // An int32 field given a 64-bit value.
  msgpack::sbuffer big;
  msgpack::packer<msgpack::sbuffer> pk2(big);
  pk2.pack_array(3);
  pk2.pack(static_cast<int>(WireTag::kStartDpWave));
  pk2.pack(kWireVersion);
  pk2.pack_array(2);
  pk2.pack(int64_t{1} << 40);
  pk2.pack(2);
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeStartDpWave(std::string_view(big.data(), big.size())).status()));

  // A map where an array belongs; a missing field.
  msgpack::sbuffer map;
  msgpack::packer<msgpack::sbuffer> pk3(map);
  pk3.pack_map(0);
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeEngineCoreRequest(std::string_view(map.data(), map.size())).status()));
  msgpack::sbuffer short_body;
  msgpack::packer<msgpack::sbuffer> pk4(short_body);
  pk4.pack_array(3);
  pk4.pack(static_cast<int>(WireTag::kStartDpWave));
  pk4.pack(kWireVersion);
  pk4.pack_array(1);
  pk4.pack(1);
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeStartDpWave(std::string_view(short_body.data(), short_body.size())).status()));
}

TEST_F(CodecTest, InconsistentSchedulerOutputIsRejected) {
  SchedulerOutput bad_total = FullSchedulerOutput();
  bad_total.total_num_scheduled_tokens = 8;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeSchedulerOutput(Encode(bad_total)).status()));
  SchedulerOutput bad_offsets = FullSchedulerOutput();
  bad_offsets.scheduled_cached_reqs.new_token_ids_offsets = {0, 3, 2};
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeSchedulerOutput(Encode(bad_offsets)).status()));
  SchedulerOutput missing_count = FullSchedulerOutput();
  missing_count.num_scheduled_tokens.pop_back();
  missing_count.total_num_scheduled_tokens = 4;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeSchedulerOutput(Encode(missing_count)).status()));
  ModelRunnerOutput bad_mro = FullModelRunnerOutput();
  bad_mro.sampled_token_ids.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeModelRunnerOutput(Encode(bad_mro)).status()));
  EngineCoreOutputs bad_reason = FullOutputs();
  std::string bytes = Encode(bad_reason);
  // Patch finish_reason kStop (positive fixint 0x00 right after "b"'s token list) to 9.
  const std::string needle = std::string("\x91\x63\x00", 3);  // [99], 0
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 2] = 9;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeEngineCoreOutputs(bytes).status()));
}

TEST_F(CodecTest, OversizedInputIsRejected) {
  DecodeLimits limits;
  limits.max_message_bytes = 16;
  auto result = DecodeEngineCoreRequest(Encode(FullRequest()), limits);
  EXPECT_TRUE(absl::IsResourceExhausted(result.status())) << result.status();

  // A 5-byte frame declaring a 2^32-1 element array must not allocate it.
  const std::string huge_array("\xdd\xff\xff\xff\xff", 5);
  EXPECT_TRUE(absl::IsResourceExhausted(DecodeAbortRequests(huge_array).status()));
  // A string longer than the string limit.
  DecodeLimits small_strings;
  small_strings.max_string_bytes = 4;
  EXPECT_TRUE(absl::IsResourceExhausted(
      DecodeAbortRequests(EncodeAbortRequests(std::vector<std::string>{"long id"}), small_strings)
          .status()));
  // Request ids over kMaxRequestIdBytes.
  EXPECT_FALSE(
      DecodeAbortRequests(EncodeAbortRequests(std::vector<std::string>{std::string(300, 'x')}))
          .ok());
  // Nesting deeper than the limit.
  std::string deep(64, '\x91');
  deep += '\x00';
  EXPECT_TRUE(absl::IsResourceExhausted(DecodeAbortRequests(deep).status()));
  // Array element count over the limit.
  DecodeLimits few_elements;
  few_elements.max_array_elements = 2;
  EXPECT_TRUE(absl::IsResourceExhausted(
      DecodeEngineCoreRequest(Encode(FullRequest()), few_elements).status()));
}

// Prompt logprobs are one list per request (or none), each position at most kMaxLogprobs + 1
// entries, and every list within the array limit: anything else is refused, not truncated.
TEST_F(CodecTest, PromptLogprobsOverLimitsAreRejected) {
  ModelRunnerOutput wide = FullModelRunnerOutput();
  TokenLogprobs too_many;
  for (int32_t i = 0; i <= kMaxLogprobs + 1; ++i) {
    too_many.token_ids.push_back(i);
    too_many.logprobs.push_back(-1.0f * static_cast<float>(i));
  }
  wide.prompt_logprobs[1] = {too_many};
  auto result = DecodeModelRunnerOutput(Encode(wide));
  EXPECT_TRUE(absl::IsResourceExhausted(result.status())) << result.status();
  too_many.token_ids.pop_back();
  too_many.logprobs.pop_back();
  wide.prompt_logprobs[1] = {too_many};  // exactly kMaxLogprobs + 1: accepted
  ASSERT_TRUE(DecodeModelRunnerOutput(Encode(wide)).ok());

  ModelRunnerOutput short_list = FullModelRunnerOutput();
  short_list.prompt_logprobs.pop_back();  // two lists for three requests
  result = DecodeModelRunnerOutput(Encode(short_list));
  ASSERT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
  EXPECT_NE(result.status().message().find("prompt_logprobs"), std::string_view::npos);

  ModelRunnerOutput mismatched = FullModelRunnerOutput();
  mismatched.prompt_logprobs[0][1].logprobs.push_back(-1.0f);  // 1 id, 2 logprobs
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeModelRunnerOutput(Encode(mismatched)).status()));

  // A long prompt's logprobs against the array-element limit, on both messages.
  EngineCoreOutputs outputs = FullOutputs();
  outputs.outputs[0].prompt_logprobs.assign(64, TokenLogprobs{{1}, {-1.0f}, 1});
  ASSERT_TRUE(DecodeEngineCoreOutputs(Encode(outputs)).ok());
  DecodeLimits few_elements;
  few_elements.max_array_elements = 32;
  EXPECT_TRUE(
      absl::IsResourceExhausted(DecodeEngineCoreOutputs(Encode(outputs), few_elements).status()));
  ModelRunnerOutput long_prompt = FullModelRunnerOutput();
  long_prompt.prompt_logprobs[2].assign(64, TokenLogprobs{{1}, {-1.0f}, 1});
  EXPECT_TRUE(absl::IsResourceExhausted(
      DecodeModelRunnerOutput(Encode(long_prompt), few_elements).status()));
  // A truncated frame carrying prompt logprobs.
  ExpectPrefixesRejected(Encode(outputs),
                         [](std::string_view b) { return DecodeEngineCoreOutputs(b); });
}

TEST_F(CodecTest, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(42);
  const std::vector<std::string> seeds = {Encode(FullRequest()), Encode(FullOutputs()),
                                          Encode(FullSchedulerOutput()),
                                          Encode(FullModelRunnerOutput())};
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes = seeds[iter % seeds.size()];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    // Any outcome but a crash, hang or exception is fine.
    accepted += DecodeEngineCoreRequest(bytes).ok();
    accepted += DecodeEngineCoreOutputs(bytes).ok();
    accepted += DecodeSchedulerOutput(bytes).ok();
    accepted += DecodeModelRunnerOutput(bytes).ok();
  }
  SUCCEED() << accepted << " corrupted frames still decoded";
}

// The executor's per-step paths (EncodeTo, Decode...Into) against Encode / Decode...: the same
// bytes, and on valid, corrupted and truncated frames under several limits the same value or
// the same error. The seeds have the shapes the fast paths read (a decode step without new
// requests or KV-connector metadata; a reply without logprobs) and those they hand over.
SchedulerOutput FastPathSchedulerOutput() {
  SchedulerOutput s;
  s.step_id = uint64_t{1} << 40;
  CachedRequestData& c = s.scheduled_cached_reqs;
  c.req_ids = {"r0", std::string(40, 'x'), "r2"};
  c.resumed_from_preemption = {0, 1, 0};
  c.new_token_ids = {42, -1, 70000, 3, 4};
  c.new_token_ids_offsets = {0, 1, 3, 5};
  c.new_block_ids = {9, 100000};
  c.new_block_ids_offsets = {0, 0, 2, 2};
  c.num_computed_tokens = {20, 0, 1 << 20};
  s.num_scheduled_tokens = {1, 2, 2};
  s.total_num_scheduled_tokens = 5;
  s.finished_req_ids = {"gone"};
  s.preempted_req_ids = {"r9", "r10"};
  s.structured_output_indices = {2};
  // One row: every integer width msgpack has, at its edges.
  s.grammar_bitmask = {-1,  -32, -33, -128, -129,  -32768, -32769,   INT32_MIN,
                       127, 128, 255, 256,  65535, 65536,  INT32_MAX};
  s.num_scheduled_spec_tokens = {0, 1, 1};
  s.num_spec_tokens_to_schedule = 2;
  return s;
}

ModelRunnerOutput FastPathModelRunnerOutput() {
  ModelRunnerOutput m;
  m.req_ids = {"r0", "r1", "r2"};
  m.sampled_token_ids = {{7}, {}, {8, 9}};
  m.logprobs = {{}, {}, {}};
  m.draft_token_ids = {{1, 70000}, {}, {-40}};
  return m;
}

template <typename T, typename Full, typename Into>
void ExpectSameOutcome(const std::string& bytes, const DecodeLimits& limits, Full full, Into into) {
  absl::StatusOr<T> want = full(bytes, limits);
  T got = T();
  const absl::Status status = into(bytes, &got, limits);
  ASSERT_EQ(status, want.status()) << "on " << bytes.size() << " bytes";
  if (want.ok()) {
    ASSERT_EQ(got, *want);
  }
}

TEST_F(CodecTest, PerStepPathsMatchTheFullCodec) {
  const std::vector<SchedulerOutput> steps = {SchedulerOutput(), FastPathSchedulerOutput(),
                                              FullSchedulerOutput()};
  const std::vector<ModelRunnerOutput> replies = {ModelRunnerOutput(), FastPathModelRunnerOutput(),
                                                  FullModelRunnerOutput()};
  std::string bytes;
  for (const SchedulerOutput& s : steps) {
    EncodeTo(s, &bytes);
    EXPECT_EQ(bytes, Encode(s));
  }
  for (const ModelRunnerOutput& m : replies) {
    EncodeTo(m, &bytes);
    EXPECT_EQ(bytes, Encode(m));
  }
  // Decoding into an object that held a larger step leaves nothing of it behind.
  SchedulerOutput reused = FullSchedulerOutput();
  ASSERT_TRUE(DecodeSchedulerOutputInto(Encode(FastPathSchedulerOutput()), &reused).ok());
  EXPECT_EQ(reused, FastPathSchedulerOutput());
  ASSERT_TRUE(DecodeSchedulerOutputInto(Encode(SchedulerOutput()), &reused).ok());
  EXPECT_EQ(reused, SchedulerOutput());

  std::vector<DecodeLimits> limits(5);
  limits[1].max_array_elements = 2;
  limits[2].max_string_bytes = 3;
  limits[3].max_depth = 3;
  limits[4].max_message_bytes = 24;
  std::mt19937 rng(7);
  for (int iter = 0; iter < 30000; ++iter) {
    const DecodeLimits& l = limits[iter % limits.size()];
    const bool step = (iter / limits.size()) % 2 == 0;
    std::string frame =
        step ? Encode(steps[rng() % steps.size()]) : Encode(replies[rng() % replies.size()]);
    if (iter >= 200) {  // the first rounds: the valid frames as they are
      const int flips = static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) frame[rng() % frame.size()] = static_cast<char>(rng());
      if (rng() % 4 == 0) frame.resize(rng() % frame.size());
    }
    if (step) {
      ExpectSameOutcome<SchedulerOutput>(
          frame, l,
          [](std::string_view b, const DecodeLimits& x) { return DecodeSchedulerOutput(b, x); },
          [](std::string_view b, SchedulerOutput* o, const DecodeLimits& x) {
            return DecodeSchedulerOutputInto(b, o, x);
          });
    } else {
      ExpectSameOutcome<ModelRunnerOutput>(
          frame, l,
          [](std::string_view b, const DecodeLimits& x) { return DecodeModelRunnerOutput(b, x); },
          [](std::string_view b, ModelRunnerOutput* o, const DecodeLimits& x) {
            return DecodeModelRunnerOutputInto(b, o, x);
          });
    }
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace vllm::core
