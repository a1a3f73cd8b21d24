// kernels/comm/ in one process: CommGroupSpec encoding, and the shm protocol with one thread
// per rank (each rank opens the segment itself, so liveness locks work as between processes).
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/comm/group_spec.h"
#include "tests/support/process.h"

namespace vllm::kernels::comm {
namespace {

using Backend = CommGroupSpec::Backend;

// Names this process created: other tests running in parallel create their own.
std::set<std::string> ShmNames() { return ::vllm::testing::ShmEntriesOf(getpid()); }

TEST(CommGroupSpecTest, RoundTrips) {
  for (const CommGroupSpec& spec :
       {CommGroupSpec{Backend::kShm, 1, "vllm-comm-1-2-abc"},
        CommGroupSpec{Backend::kShm, 32, "a.b_c-D"},
        CommGroupSpec{Backend::kGloo, 4, "/tmp/vllm-comm-gloo-12-xY;z with space"}}) {
    auto back = CommGroupSpec::Decode(spec.Encode());
    ASSERT_TRUE(back.ok()) << spec.Encode() << ": " << back.status();
    EXPECT_EQ(*back, spec);
  }
  EXPECT_EQ((CommGroupSpec{Backend::kShm, 2, "x"}.Encode()), "vllm-comm/1;shm;2;x");
}

TEST(CommGroupSpecTest, RejectsMalformed) {
  const std::string long_name(300, 'a');
  const std::string huge(5000, '/');
  for (const std::string& text : std::vector<std::string>{"",
                                                          "vllm-comm/1",
                                                          "vllm-comm/1;shm;2",
                                                          "vllm-comm/2;shm;2;x",
                                                          "VLLM-COMM/1;shm;2;x",
                                                          "vllm-comm/1;nccl;2;x",
                                                          "vllm-comm/1;shm;0;x",
                                                          "vllm-comm/1;shm;33;x",
                                                          "vllm-comm/1;shm;-1;x",
                                                          "vllm-comm/1;shm;+2;x",
                                                          "vllm-comm/1;shm; 2;x",
                                                          "vllm-comm/1;shm;0002;x",
                                                          "vllm-comm/1;shm;2;",
                                                          "vllm-comm/1;shm;2;a/b",
                                                          "vllm-comm/1;shm;2;..",
                                                          "vllm-comm/1;shm;2;" + long_name,
                                                          "vllm-comm/1;gloo;2;rel/dir",
                                                          "vllm-comm/1;gloo;2;/tmp/a\nb",
                                                          std::string("vllm-comm/1;shm;2;a\0b", 21),
                                                          "vllm-comm/1;gloo;2;" + huge}) {
    auto spec = CommGroupSpec::Decode(text);
    EXPECT_FALSE(spec.ok()) << "accepted: " << text;
    if (!spec.ok()) {
      EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(CommGroupTest, RejectsBadArguments) {
  EXPECT_FALSE(CommGroup::Create(Backend::kShm, 0).ok());
  EXPECT_FALSE(CommGroup::Create(Backend::kGloo, 33).ok());
  CommGroupOptions odd;
  odd.shm_slot_bytes = 100;
  EXPECT_FALSE(CommGroup::Create(Backend::kShm, 2, odd).ok());
}

class ShmThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = ShmNames(); }
  void TearDown() override {
    for (const std::string& name : ShmNames()) {
      EXPECT_TRUE(shm_before_.count(name)) << "left in /dev/shm: " << name;
    }
  }
  std::set<std::string> shm_before_;
};

// Element i of rank r's input in all-reduce `it`: an integer, so sums are exact.
float Value(int32_t r, int it, size_t i) {
  return static_cast<float>(
      static_cast<int>((i * 5 + static_cast<size_t>(it) * 11 + static_cast<size_t>(r) * 17) % 201) -
      100);
}

// One thread per rank; a 4 KiB slot makes every size cross chunks, and world size 3 with
// larger chunks takes the reduce-scatter path.
TEST_F(ShmThreadsTest, SumsExactlyWithSmallSlots) {
  for (int32_t world : {1, 2, 3}) {
    CommGroupOptions options;
    options.shm_slot_bytes = 4096;
    auto group = CommGroup::Create(Backend::kShm, world, options);
    ASSERT_TRUE(group.ok()) << group.status();
    const CommGroupSpec spec = (*group)->spec();
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto comm = JoinGroup(spec, r, absl::Seconds(10));
        if (!comm.ok()) {
          ADD_FAILURE() << comm.status();
          ++failures;
          return;
        }
        int it = 0;
        for (size_t count : {size_t{1}, size_t{15}, size_t{1000}, size_t{1025}, size_t{5000}}) {
          for (int k = 0; k < 20; ++k, ++it) {
            std::vector<float> data(count);
            for (size_t i = 0; i < count; ++i) data[i] = Value(r, it, i);
            absl::Status st = (*comm)->AllReduceSum(data.data(), count);
            if (!st.ok()) {
              ADD_FAILURE() << st;
              ++failures;
              return;
            }
            for (size_t i = 0; i < count; ++i) {
              float want = 0;
              for (int32_t j = 0; j < world; ++j) want += Value(j, it, i);
              if (data[i] != want) {
                ADD_FAILURE() << "rank " << r << " count " << count << " element " << i;
                ++failures;
                return;
              }
            }
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0) << "world " << world;
  }
}

TEST_F(ShmThreadsTest, JoinTimesOutNamingMissingRanks) {
  auto group = CommGroup::Create(Backend::kShm, 3);
  ASSERT_TRUE(group.ok()) << group.status();
  auto comm = JoinGroup((*group)->spec(), 1, absl::Milliseconds(200));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_TRUE(absl::StrContains(comm.status().message(), "ranks 0, 2 ")) << comm.status();
}

TEST_F(ShmThreadsTest, BadRankWrongSizeAndLatecomerRejected) {
  auto group = CommGroup::Create(Backend::kShm, 2);
  ASSERT_TRUE(group.ok()) << group.status();
  const CommGroupSpec spec = (*group)->spec();
  EXPECT_EQ(JoinGroup(spec, 2, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  CommGroupSpec wrong = spec;
  wrong.world_size = 3;
  EXPECT_EQ(JoinGroup(wrong, 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<Communicator>> second;
  std::thread joiner([&] { second = JoinGroup(spec, 1, absl::Seconds(10)); });
  auto first = JoinGroup(spec, 0, absl::Seconds(10));
  joiner.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  // Everyone joined: the name is gone, so a latecomer finds nothing.
  EXPECT_EQ(JoinGroup(spec, 1, absl::Seconds(1)).status().code(), absl::StatusCode::kNotFound);
}

// A rank whose communicator is destroyed while a peer waits in a collective: the peer gets
// Unavailable naming it, promptly (the collective timeout is far away), and stays failed.
TEST_F(ShmThreadsTest, PeerLeavingIsUnavailable) {
  auto group = CommGroup::Create(Backend::kShm, 2);
  ASSERT_TRUE(group.ok()) << group.status();
  const CommGroupSpec spec = (*group)->spec();
  CommOptions options;
  options.collective_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Communicator>> leaver;
  std::thread joiner([&] { leaver = JoinGroup(spec, 1, absl::Seconds(10), options); });
  auto stayer = JoinGroup(spec, 0, absl::Seconds(10), options);
  joiner.join();
  ASSERT_TRUE(stayer.ok()) << stayer.status();
  ASSERT_TRUE(leaver.ok()) << leaver.status();
  std::thread leave([&] { leaver->reset(); });  // races with the collective below on purpose
  std::vector<float> data(100, 1.0f);
  const absl::Time start = absl::Now();
  absl::Status st = (*stayer)->AllReduceSum(data.data(), data.size());
  leave.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 1 ")) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ((*stayer)->AllReduceSum(data.data(), data.size()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(GlooGroupTest, DirectoryRemovedAndSingleRankWorks) {
  std::string dir;
  {
    auto group = CommGroup::Create(Backend::kGloo, 1);
    ASSERT_TRUE(group.ok()) << group.status();
    dir = (*group)->spec().name;
    auto comm = JoinGroup((*group)->spec(), 0, absl::Seconds(5));
    ASSERT_TRUE(comm.ok()) << comm.status();
    float x = 3;
    EXPECT_TRUE((*comm)->AllReduceSum(&x, 1).ok());
    EXPECT_EQ(x, 3);
  }
  EXPECT_EQ(opendir(dir.c_str()), nullptr) << dir << " still exists";
}

}  // namespace
}  // namespace vllm::kernels::comm
