#include "tests/support/netns.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace vllm::testing {
namespace {

constexpr char kIp[] = "/usr/sbin/ip";

absl::Status Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kIp};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<int> rc = RunQuietly(argv);
  if (!rc.ok()) return rc.status();
  if (*rc != 0) {
    std::string cmd;
    for (const std::string& a : argv) absl::StrAppend(&cmd, cmd.empty() ? "" : " ", a);
    return absl::InternalError(absl::StrCat("`", cmd, "` exited with ", *rc));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> RunQuietly(const std::vector<std::string>& argv) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return absl::InternalError(absl::StrCat(argv[0], ": ", strerror(err)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

absl::StatusOr<std::unique_ptr<NetnsPair>> NetnsPair::Create() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError("network namespaces need root (multi-node tests)");
  }
  if (access(kIp, X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(kIp, " (iproute2) is missing"));
  }
  static std::atomic<int> counter{0};
  const int n = counter.fetch_add(1) % 250;
  std::unique_ptr<NetnsPair> p(new NetnsPair);
  const std::string base = absl::StrCat("vllm-", getpid(), "-", n);
  p->a_ = base + "-a";
  p->b_ = base + "-b";
  p->addr_a_ = absl::StrCat("10.213.", n, ".1");
  p->addr_b_ = absl::StrCat("10.213.", n, ".2");
  // veth names are at most 15 characters.
  const std::string veth_a = absl::StrCat("vv", getpid() % 100000, "a", n);
  const std::string veth_b = absl::StrCat("vv", getpid() % 100000, "b", n);
  for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
           {"netns", "add", p->a_},
           {"netns", "add", p->b_},
           {"-n", p->a_, "link", "set", "lo", "up"},
           {"-n", p->b_, "link", "set", "lo", "up"},
           {"-n", p->a_, "link", "add", veth_a, "type", "veth", "peer", "name", veth_b, "netns",
            p->b_},
           {"-n", p->a_, "link", "set", veth_a, "name", "eth0"},
           {"-n", p->b_, "link", "set", veth_b, "name", "eth0"},
           {"-n", p->a_, "addr", "add", p->addr_a_ + "/24", "dev", "eth0"},
           {"-n", p->b_, "addr", "add", p->addr_b_ + "/24", "dev", "eth0"},
           {"-n", p->a_, "link", "set", "eth0", "up"},
           {"-n", p->b_, "link", "set", "eth0", "up"}}) {
    if (absl::Status s = Ip(step); !s.ok()) return s;  // the destructor removes what exists
  }
  return p;
}

NetnsPair::~NetnsPair() {
  // Deleting a namespace removes its end of the veth pair, and with it the other end.
  if (!a_.empty()) (void)Ip({"netns", "del", a_});
  if (!b_.empty()) (void)Ip({"netns", "del", b_});
}

std::vector<std::string> NetnsPair::InA(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {kIp, "netns", "exec", a_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> NetnsPair::InB(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {kIp, "netns", "exec", b_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status NetnsPair::SetLinkUp(bool up) {
  return Ip({"-n", a_, "link", "set", "eth0", up ? "up" : "down"});
}

}  // namespace vllm::testing
