// Communicator groups across real processes (tests/integration/comm/comm_test_helper), for
// both backends and world sizes 2 and 4, and gloo with its rendezvous through the creator's
// StoreServer (tcp://127.0.0.1, with and without a CURVE cluster key): exact sums over many
// consecutive all-reduces of 1 to 3 M floats (crossing the shm chunk size), a rank killed
// mid-collective, a rank that never arrives. Every test checks that no child, no /dev/shm entry
// and no rendezvous directory is left behind.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <list>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "kernels/comm/group_spec.h"
#include "tests/support/process.h"

namespace vllm::kernels::comm {
namespace {

using ::vllm::testing::DescribeWaitStatus;
using ::vllm::testing::ShmEntries;
using ::vllm::testing::Subprocess;
using Backend = CommGroupSpec::Backend;

// Where gloo's ranks meet: a FileStore directory, or a StoreServer (plain or with CURVE).
enum class Store { kDirectory, kTcp, kTcpCurve };

struct Param {
  Backend backend;
  int32_t world_size;
  Store store = Store::kDirectory;
};

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat(BackendName(info.param.backend), info.param.world_size,
                      info.param.store == Store::kTcp        ? "tcp"
                      : info.param.store == Store::kTcpCurve ? "tcpcurve"
                                                             : "");
}

class CommProcessTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    shm_before_ = ShmEntries();
    CommGroupOptions options;
    if (GetParam().store != Store::kDirectory) options.store_host = "127.0.0.1";
    if (GetParam().store == Store::kTcpCurve) {
      const char* tmp = getenv("TMPDIR");
      std::string dir =
          absl::StrCat(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp", "/vllm-comm-key-XXXXXX");
      ASSERT_NE(mkdtemp(dir.data()), nullptr);
      key_dir_ = dir;
      auto keys = ipc::CreateCurveKeyFile(key_dir_ + "/cluster.key");
      ASSERT_TRUE(keys.ok()) << keys.status();
      options.curve = *keys;
    }
    auto group = CommGroup::Create(GetParam().backend, GetParam().world_size, options);
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = std::move(*group);
    spec_ = group_->spec();
  }

  void TearDown() override {
    children_.clear();  // kills and reaps anything still running
    group_.reset();
    for (const std::string& name : ShmEntries()) {
      EXPECT_TRUE(shm_before_.count(name)) << "left in /dev/shm: " << name;
    }
    if (!key_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(key_dir_, ec);
    }
    if (spec_.backend == Backend::kGloo && GetParam().store == Store::kDirectory) {
      struct stat st {};
      EXPECT_NE(stat(spec_.name.c_str(), &st), 0) << "left behind: " << spec_.name;
    }
  }

  bool shm() const { return GetParam().backend == Backend::kShm; }
  int32_t world() const { return GetParam().world_size; }

  Subprocess& Start(const std::string& mode, int32_t rank, const std::string& counts,
                    int iterations, int64_t timeout_ms) {
    std::vector<std::string> args = {::vllm::testing::BinDir() + "/comm_test_helper",
                                     mode,
                                     spec_.Encode(),
                                     absl::StrCat(rank),
                                     counts,
                                     absl::StrCat(iterations),
                                     absl::StrCat(timeout_ms)};
    if (!key_dir_.empty()) args.push_back(key_dir_ + "/cluster.key");
    auto p = Subprocess::Spawn(args);
    EXPECT_TRUE(p.ok()) << p.status();
    children_.push_back(std::move(*p));
    return children_.back();
  }

  // Reads one line and returns it ("" after a failure was recorded).
  std::string Line(Subprocess& p, absl::Duration timeout) {
    auto line = p.ReadLine(timeout);
    EXPECT_TRUE(line.ok()) << "pid " << p.pid() << ": " << line.status();
    return line.ok() ? *line : "";
  }

  void ExpectExit(Subprocess& p, int code, absl::Duration timeout) {
    auto st = p.Wait(timeout);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == code)
        << "pid " << p.pid() << " " << DescribeWaitStatus(*st);
  }

  // After every rank printed "joined" nothing of the group may remain in /dev/shm.
  void ExpectNoNewShm() {
    for (const std::string& name : ShmEntries()) {
      EXPECT_TRUE(shm_before_.count(name)) << "still in /dev/shm after all joined: " << name;
    }
  }

  std::set<std::string> shm_before_;
  std::unique_ptr<CommGroup> group_;
  CommGroupSpec spec_;
  std::list<Subprocess> children_;
  std::string key_dir_;  // kTcpCurve: holds the cluster key file
};

// Many consecutive all-reduces of different sizes and values; every rank checks every element.
TEST_P(CommProcessTest, SumsExactly) {
  // 65537 and 3 M floats cross the 1 MiB (262144-float) slot: 1 and 12 chunks.
  const std::string counts = "1x200,1000x200,65537x10,3000000x2";
  std::vector<Subprocess*> ranks;
  for (int32_t r = 0; r < world(); ++r) ranks.push_back(&Start("sum", r, counts, 1, 10'000));
  for (Subprocess* p : ranks) EXPECT_EQ(Line(*p, absl::Seconds(10)), "joined");
  ExpectNoNewShm();
  for (Subprocess* p : ranks) EXPECT_EQ(Line(*p, absl::Seconds(30)), "ok 412");
  for (Subprocess* p : ranks) ExpectExit(*p, 0, absl::Seconds(5));
}

// kill -9 of one rank while every rank loops over 12 MB all-reduces: the others return an
// error within 2 s. shm: Unavailable naming the dead rank (found by its liveness lock; the
// collective timeout is 10 s, so the timeout cannot be what fires). gloo: whatever gloo
// reports within its timeout (1 s here).
TEST_P(CommProcessTest, KilledRankFailsTheOthersQuickly) {
  const int64_t timeout_ms = shm() ? 10'000 : 1'000;
  std::vector<Subprocess*> ranks;
  for (int32_t r = 0; r < world(); ++r) {
    ranks.push_back(&Start("loop", r, "3000000", 1'000'000, timeout_ms));
  }
  for (Subprocess* p : ranks) EXPECT_EQ(Line(*p, absl::Seconds(10)), "joined");
  for (Subprocess* p : ranks) EXPECT_EQ(Line(*p, absl::Seconds(10)), "looping");
  const int32_t victim = world() - 1;
  ranks[victim]->Kill(SIGKILL);
  const absl::Time killed = absl::Now();
  for (int32_t r = 0; r < victim; ++r) {
    const std::string line = Line(*ranks[r], absl::Seconds(2) - (absl::Now() - killed));
    EXPECT_TRUE(absl::StartsWith(line, "error ")) << "rank " << r << " said: " << line;
    if (shm()) {
      EXPECT_TRUE(absl::StartsWith(line, "error UNAVAILABLE rank " + absl::StrCat(victim))) << line;
    }
  }
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  for (int32_t r = 0; r < victim; ++r) ExpectExit(*ranks[r], 1, absl::Seconds(5));
}

// A rank that never calls the collective: the others fail with DeadlineExceeded after their
// timeout; shm names the missing rank.
TEST_P(CommProcessTest, MissingRankTimesOut) {
  std::vector<Subprocess*> ranks;
  for (int32_t r = 0; r + 1 < world(); ++r) ranks.push_back(&Start("stall", r, "1000", 1, 300));
  Subprocess& idle = Start("idle", world() - 1, "1", 1, 300);
  for (Subprocess* p : ranks) EXPECT_EQ(Line(*p, absl::Seconds(10)), "joined");
  EXPECT_EQ(Line(idle, absl::Seconds(10)), "joined");
  bool named = false;
  for (Subprocess* p : ranks) {
    const std::string line = Line(*p, absl::Seconds(5));
    EXPECT_TRUE(absl::StartsWith(line, "error ")) << line;
    if (shm()) {
      EXPECT_TRUE(absl::StartsWith(line, "error DEADLINE_EXCEEDED")) << line;
    }
    named |= absl::StrContains(line, absl::StrCat("rank ", world() - 1, " of"));
  }
  if (shm()) {
    EXPECT_TRUE(named) << "no rank named the missing rank " << world() - 1;
  }
  for (Subprocess* p : ranks) ExpectExit(*p, 1, absl::Seconds(5));
}

INSTANTIATE_TEST_SUITE_P(Backends, CommProcessTest,
                         ::testing::Values(Param{Backend::kShm, 2}, Param{Backend::kShm, 4},
                                           Param{Backend::kGloo, 2}, Param{Backend::kGloo, 4},
                                           Param{Backend::kGloo, 2, Store::kTcp},
                                           Param{Backend::kGloo, 2, Store::kTcpCurve}),
                         ParamName);

}  // namespace
}  // namespace vllm::kernels::comm
