#include "config/config_codec.h"

#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "msgpack.hpp"

namespace vllm::config {
namespace {

using ::testing::HasSubstr;

// Every field away from its default, so a field dropped or swapped by the codec shows.
VllmConfig Everything() {
  VllmConfig c;
  c.model.model = "/models/some model";
  c.model.max_model_len = 4096;
  c.model.dtype = ModelDType::kBFloat16;
  c.model.seed = (uint64_t{1} << 63) + 5;
  c.model.enforce_eager = true;
  c.model.enable_sleep_mode = true;
  c.model.max_logprobs = 33;
  c.cache.block_size = 32;
  c.cache.enable_prefix_caching = false;
  c.cache.kv_cache_memory_bytes = int64_t{3} << 40;
  c.cache.gpu_memory_utilization = 1.0;  // integral: must stay a float on the wire
  c.cache.num_gpu_blocks_override = 64;
  c.parallel.tensor_parallel_size = 4;
  c.parallel.data_parallel_size = 8;
  c.parallel.data_parallel_size_local = 2;
  c.parallel.data_parallel_start_rank = 6;
  c.parallel.data_parallel_rank = 7;
  c.parallel.data_parallel_address = "10.0.0.1";
  c.parallel.data_parallel_rpc_port = 20000;
  c.parallel.distributed_executor_backend = ExecutorBackend::kMp;
  c.parallel.comm_backend = CommBackend::kGloo;
  c.scheduler.max_num_seqs = 17;
  c.scheduler.max_num_batched_tokens = 8192;
  c.scheduler.enable_chunked_prefill = false;
  c.scheduler.long_prefill_token_threshold = 300;
  c.scheduler.policy = SchedulingPolicy::kPriority;
  c.device.device = Device::kCuda;
  c.load.load_format = LoadFormat::kSafetensors;
  c.kv_events.enable = true;
  c.kv_events.publisher = "zmq";
  c.kv_events.endpoint = "tcp://10.0.0.1:6000";
  c.kv_events.replay_endpoint = "tcp://*:6100";
  c.kv_events.buffer_steps = 11;
  c.kv_events.hwm = 12;
  c.kv_events.max_queue_size = 13;
  c.kv_events.topic = "kv@pod";
  c.cache.kv_offloading_size = 0.25;  // resolved below: OffloadingConnector, kv_both
  c.kv_transfer.engine_id = "engine-1";
  c.kv_transfer.kv_buffer_device = "cuda";
  c.kv_transfer.kv_port = 20001;
  c.kv_transfer.kv_connector_extra_config = R"({"block_size":64})";
  c.kv_transfer.kv_load_failure_policy = "recompute";
  if (!c.ResolveKvOffloading().ok()) ADD_FAILURE() << "ResolveKvOffloading";
  return c;
}

TEST(ConfigCodecTest, RoundTripKeepsEveryField) {
  const VllmConfig c = Everything();
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  absl::StatusOr<VllmConfig> back = DecodeVllmConfig(EncodeVllmConfig(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  VllmConfig defaults;
  defaults.model.model = "m";
  back = DecodeVllmConfig(EncodeVllmConfig(defaults));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, defaults);
  EXPECT_FALSE(back->cache.num_gpu_blocks_override.has_value());
}

TEST(ConfigCodecTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = EncodeVllmConfig(Everything());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<VllmConfig> d = DecodeVllmConfig(std::string_view(bytes).substr(0, n));
    EXPECT_FALSE(d.ok()) << n;
    EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << d.status();
  }
  EXPECT_FALSE(DecodeVllmConfig(bytes + "x").ok());  // trailing bytes
}

TEST(ConfigCodecTest, EveryByteFlipDecodesToAValidConfigOrAnError) {
  const std::string bytes = EncodeVllmConfig(Everything());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string m = bytes;
      m[i] = static_cast<char>(m[i] ^ (1 << bit));
      absl::StatusOr<VllmConfig> d = DecodeVllmConfig(m);
      if (d.ok()) {
        EXPECT_TRUE(d->Validate().ok());  // whatever decodes can run
      }
    }
  }
}

// Re-encodes the envelope with one part replaced by `part`.
std::string WithPart(int index,
                     const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& part) {
  const std::string bytes = EncodeVllmConfig(Everything());
  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  const msgpack::object_array& a = h.get().via.array;
  pk.pack_array(a.size);
  for (uint32_t i = 0; i < a.size; ++i) {
    if (static_cast<int>(i) == index) {
      part(pk);
    } else {
      pk.pack(a.ptr[i]);
    }
  }
  return std::string(buf.data(), buf.size());
}

TEST(ConfigCodecTest, WrongKindsNameTheField) {
  struct Case {
    int index;
    std::function<void(msgpack::packer<msgpack::sbuffer>&)> part;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {0, [](auto& pk) { pk.pack(std::string("EngineCoreRequest")); }, "VllmConfig.tag"},
      {1, [](auto& pk) { pk.pack(1); }, "VllmConfig.schema"},
      {1, [](auto& pk) { pk.pack(std::string("v2")); }, "VllmConfig.schema"},
      {2, [](auto& pk) { pk.pack(7); }, "VllmConfig.model"},
      {2,
       [](auto& pk) {
         pk.pack_array(7);
         pk.pack(std::string("m"));
         pk.pack(std::string("long"));  // max_model_len
         pk.pack(std::string("auto"));
         pk.pack(0);
         pk.pack(false);
         pk.pack(20);
         pk.pack(false);
       },
       "VllmConfig.model.max_model_len"},
      {2,
       [](auto& pk) {
         pk.pack_array(7);
         pk.pack(std::string("m"));
         pk.pack(0);
         pk.pack(std::string("int4"));  // dtype
         pk.pack(0);
         pk.pack(false);
         pk.pack(20);
         pk.pack(false);
       },
       "VllmConfig.model.dtype"},
      {2,
       [](auto& pk) {
         pk.pack_array(7);
         pk.pack(std::string("m"));
         pk.pack(0);
         pk.pack(std::string("auto"));
         pk.pack(0);
         pk.pack(false);
         pk.pack(100000);  // max_logprobs past kMaxLogprobsLimit
         pk.pack(false);   // enable_sleep_mode
       },
       "--max-logprobs: 100000 is outside [0, 1024]"},
      {3,
       [](auto& pk) {
         pk.pack_array(7);
         pk.pack(16);
         pk.pack(true);
         pk.pack(1 << 20);
         pk.pack(0.5);
         pk.pack(int64_t{1} << 40);  // num_gpu_blocks_override out of int32
         pk.pack(0.0);
         pk.pack(std::string("native"));
       },
       "VllmConfig.cache.num_gpu_blocks_override"},
      {3,
       [](auto& pk) {
         pk.pack_array(4);  // one field short
         for (int i = 0; i < 4; ++i) pk.pack(16);
       },
       "VllmConfig.cache"},
      {6,
       [](auto& pk) {
         pk.pack_array(1);
         pk.pack(std::string("tpu"));
       },
       "VllmConfig.device.device"},
      {8,
       [](auto& pk) {
         pk.pack_array(8);
         pk.pack(true);
         pk.pack(std::string("kafka"));  // publisher
         for (int i = 0; i < 2; ++i) pk.pack(std::string("tcp://*:1"));
         for (int i = 0; i < 3; ++i) pk.pack(1);
         pk.pack(std::string(""));
       },
       "--kv-events-config publisher: 'kafka' is not one of null, zmq"},
      {8,
       [](auto& pk) {
         pk.pack_array(8);
         pk.pack(true);
         pk.pack(std::string("zmq"));
         pk.pack(std::string("tcp://*:1"));
         pk.pack_nil();
         pk.pack(int64_t{1} << 40);  // buffer_steps over the bound
         pk.pack(1);
         pk.pack(1);
         pk.pack(std::string(""));
       },
       "--kv-events-config buffer_steps"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<VllmConfig> d = DecodeVllmConfig(WithPart(k.index, k.part));
    ASSERT_FALSE(d.ok()) << k.expected;
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(k.expected)) << d.status();
  }
}

// The wire carries a fingerprint of the field lists, not a version someone must bump: a peer
// built with other lists is refused by name.
TEST(ConfigCodecTest, AnotherBuildsFieldListsAreRefusedByName) {
  EXPECT_NE(VllmConfigSchema(), 0u);
  EXPECT_EQ(VllmConfigSchema(), VllmConfigSchema());
  const uint64_t other = VllmConfigSchema() ^ 1;
  absl::StatusOr<VllmConfig> d =
      DecodeVllmConfig(WithPart(1, [other](auto& pk) { pk.pack(other); }));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("VllmConfig.schema"));
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("different config fields"));
}

TEST(ConfigCodecTest, ADecodedConfigIsValidated) {
  VllmConfig c = Everything();
  c.cache.block_size = 24;  // encodes, but cannot run
  absl::StatusOr<VllmConfig> d = DecodeVllmConfig(EncodeVllmConfig(c));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("--block-size"));
}

TEST(ConfigCodecTest, SizesAreBounded) {
  EXPECT_THAT(
      std::string(
          DecodeVllmConfig(std::string(kMaxEncodedConfigBytes + 1, '\x90')).status().message()),
      HasSubstr("exceeds the limit"));
  VllmConfig c = Everything();
  c.model.model = std::string(kMaxPathBytes + 1, 'p');
  EXPECT_FALSE(DecodeVllmConfig(EncodeVllmConfig(c)).ok());
}

TEST(ConfigCodecTest, PipeHandsTheConfigOver) {
  absl::StatusOr<int> fd = MakeConfigPipe(Everything());
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(fcntl(*fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  absl::StatusOr<VllmConfig> c = ReadVllmConfigFd(*fd, absl::Seconds(5));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, Everything());
  EXPECT_EQ(fcntl(*fd, F_GETFD), -1);  // closed
}

TEST(ConfigCodecTest, ReadingFailsOnGarbageSilenceAndFloods) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "\x93\x01\x02\x03", 4), 4);
  close(fds[1]);
  absl::StatusOr<VllmConfig> c = ReadVllmConfigFd(fds[0], absl::Seconds(5));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(absl::StrCat("--config-fd ", fds[0])));

  ASSERT_EQ(pipe(fds), 0);  // the writer never writes nor closes: the deadline ends the wait
  c = ReadVllmConfigFd(fds[0], absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(c.status())) << c.status();
  close(fds[1]);

  ASSERT_EQ(pipe(fds), 0);  // more than a config can be
  const std::string flood(kMaxEncodedConfigBytes + 10, 'x');
  ASSERT_EQ(fcntl(fds[1], F_SETPIPE_SZ, 1 << 20) >= 0, true);
  ASSERT_EQ(write(fds[1], flood.data(), flood.size()), static_cast<ssize_t>(flood.size()));
  close(fds[1]);
  c = ReadVllmConfigFd(fds[0], absl::Seconds(5));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("more than"));

  EXPECT_FALSE(ReadVllmConfigFd(-1, absl::Seconds(1)).ok());  // not a descriptor
}

}  // namespace
}  // namespace vllm::config
