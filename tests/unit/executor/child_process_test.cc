// ChildProcess (executor/child_process.h) over real processes (/bin/sh): the descriptor passed
// as fd 3, Check's description of how a child ended, Stop within the grace (SIGTERM) and past
// it (SIGKILL for a child that ignores SIGTERM), the destructor reaping, a spawn that fails.
// Synchronisation is through pipes and pidfds, never sleeps; every child is reaped.
#include "executor/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::executor {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<ChildProcess>> Shell(const std::string& script, int pass_fd = -1) {
  return ChildProcess::Spawn({"/bin/sh", "-c", script}, pass_fd, "the test child");
}

// Reads up to `n` bytes from `fd` (blocking) until EOF.
std::string ReadAll(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(ChildProcessTest, DescribesAnExitCode) {
  auto child = Shell("exit 3");
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->WaitForExit(absl::Seconds(30)));
  absl::Status s = (*child)->Check();
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("the test child (pid "));
  EXPECT_THAT(std::string(s.message()), EndsWith("exited with status 3"));
  EXPECT_TRUE((*child)->exited());
  EXPECT_EQ((*child)->Check(), s);  // the same answer once reaped
  (*child)->Signal(SIGTERM);        // ended: not an error
}

TEST(ChildProcessTest, PassesADescriptorAsFd3) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  auto child = Shell("echo hello >&3", pipe_fds[1]);
  close(pipe_fds[1]);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ReadAll(pipe_fds[0]), "hello\n");
  close(pipe_fds[0]);
  ASSERT_TRUE((*child)->WaitForExit(absl::Seconds(30)));
  EXPECT_THAT(std::string((*child)->Check().message()), EndsWith("exited with status 0"));
}

TEST(ChildProcessTest, StopEndsARunningChildWithSigterm) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  // It says when it runs (so the signal cannot come before the shell), then waits.
  auto child = Shell("echo up >&3; exec 3>&-; exec sleep 600", pipe_fds[1]);
  close(pipe_fds[1]);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ReadAll(pipe_fds[0]), "up\n");
  close(pipe_fds[0]);
  EXPECT_TRUE((*child)->Check().ok());
  EXPECT_FALSE((*child)->WaitForExit(absl::ZeroDuration()));
  const absl::Time start = absl::Now();
  (*child)->Stop(absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ASSERT_TRUE((*child)->wait_status().has_value());
  EXPECT_TRUE(WIFSIGNALED(*(*child)->wait_status()));
  EXPECT_EQ(WTERMSIG(*(*child)->wait_status()), SIGTERM);
  EXPECT_THAT(std::string((*child)->Check().message()), HasSubstr("was killed by signal 15"));
}

TEST(ChildProcessTest, StopKillsAChildThatIgnoresSigtermAfterTheGrace) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  // The ignored disposition survives exec; "up" only once it is in place.
  auto child = Shell("trap '' TERM; echo up >&3; exec 3>&-; exec sleep 600", pipe_fds[1]);
  close(pipe_fds[1]);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ReadAll(pipe_fds[0]), "up\n");
  close(pipe_fds[0]);
  const absl::Time start = absl::Now();
  (*child)->Stop(absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  ASSERT_TRUE((*child)->wait_status().has_value());
  EXPECT_TRUE(WIFSIGNALED(*(*child)->wait_status()));
  EXPECT_EQ(WTERMSIG(*(*child)->wait_status()), SIGKILL);
  EXPECT_THAT(std::string((*child)->Check().message()), HasSubstr("was killed by signal 9"));
  (*child)->Stop(absl::Seconds(1));  // idempotent
}

TEST(ChildProcessTest, StopWithoutTerminateWaitsForAnOrderlyEnd) {
  int to_child[2];
  ASSERT_EQ(pipe2(to_child, O_CLOEXEC), 0);
  // It ends when its descriptor 3 reaches EOF (as the DP coordinator does).
  auto child = Shell("cat <&3 >/dev/null; exit 7", to_child[0]);
  close(to_child[0]);
  ASSERT_TRUE(child.ok()) << child.status();
  close(to_child[1]);
  (*child)->Stop(absl::Seconds(60), /*terminate=*/false);
  ASSERT_TRUE((*child)->wait_status().has_value());
  EXPECT_TRUE(WIFEXITED(*(*child)->wait_status()));
  EXPECT_EQ(WEXITSTATUS(*(*child)->wait_status()), 7);
}

TEST(ChildProcessTest, TheDestructorStopsAndReaps) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  pid_t pid;
  {
    auto child = Shell("echo up >&3; exec 3>&-; exec sleep 600", pipe_fds[1]);
    close(pipe_fds[1]);
    ASSERT_TRUE(child.ok()) << child.status();
    EXPECT_EQ(ReadAll(pipe_fds[0]), "up\n");
    close(pipe_fds[0]);
    pid = (*child)->pid();
  }
  // Reaped: no such child any more.
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(ChildProcessTest, ASpawnThatFailsNamesTheChild) {
  auto child = ChildProcess::Spawn({"/nonexistent/vllm-launch"}, -1, "API server 3");
  ASSERT_FALSE(child.ok());
  EXPECT_THAT(std::string(child.status().message()), HasSubstr("cannot start API server 3: "));
  EXPECT_TRUE(absl::IsInvalidArgument(ChildProcess::Spawn({}, -1, "x").status()));
}

TEST(ChildProcessTest, SelfExecutableIsThisBinary) {
  absl::StatusOr<std::string> self = SelfExecutable();
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_THAT(*self, EndsWith("child_process_test"));
}

TEST(ChildProcessTest, DescribeExitCoversEveryKind) {
  EXPECT_EQ(DescribeExit(3 << 8), "exited with status 3");
  EXPECT_EQ(DescribeExit(SIGKILL), "was killed by signal 9 (Killed)");
  EXPECT_EQ(DescribeExit(0x7f | (SIGSTOP << 8)),
            absl::StrCat("ended with wait status ", 0x7f | (SIGSTOP << 8)));
}

}  // namespace
}  // namespace vllm::executor
