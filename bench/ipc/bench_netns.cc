#include "bench/ipc/bench_netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace vllm::bench {
namespace {

constexpr char kIp[] = "/usr/sbin/ip";
constexpr char kPrefixA[] = "vbench-a-";
constexpr char kPrefixB[] = "vbench-b-";

// Runs `ip args...` to completion with stdin and stdout on /dev/null (stderr stays, so that
// ip's own reason reaches the user); Internal naming the command unless it exits with 0.
absl::Status Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kIp};
  argv.insert(argv.end(), args.begin(), args.end());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, kIp, &actions, nullptr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  const std::string command = absl::StrJoin(argv, " ");
  if (err != 0) return absl::InternalError(absl::StrCat(command, ": ", std::strerror(err)));
  // `ip` returns in milliseconds; it has no reason to block, so this wait needs no deadline
  // beyond the process's own.
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("`", command, "` failed (",
                                            WIFEXITED(status)
                                                ? absl::StrCat("exit ", WEXITSTATUS(status))
                                                : absl::StrCat("signal ", WTERMSIG(status)),
                                            ")"));
  }
  return absl::OkStatus();
}

// The pid in a "vbench-{a,b}-<pid>" name, or -1.
pid_t OwnerPid(const std::string& name) {
  for (const char* prefix : {kPrefixA, kPrefixB}) {
    if (name.rfind(prefix, 0) != 0) continue;
    int pid = 0;
    if (absl::SimpleAtoi(name.substr(std::strlen(prefix)), &pid) && pid > 0) return pid;
  }
  return -1;
}

// True while `pid` runs: it exists and is not a zombie (a killed run whose parent has not reaped
// it yet is gone for our purpose).
bool Running(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

}  // namespace

void BenchNetns::RemoveStale() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    const pid_t pid = OwnerPid(name);
    if (pid > 0 && !Running(pid)) (void)Ip({"netns", "del", name});
  }
}

absl::StatusOr<std::unique_ptr<BenchNetns>> BenchNetns::Create() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError("network namespaces need root (this process is not)");
  }
  if (access(kIp, X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(kIp, " (iproute2) is missing"));
  }
  RemoveStale();
  std::unique_ptr<BenchNetns> n(new BenchNetns);
  const pid_t pid = getpid();
  n->head_ = absl::StrCat(kPrefixA, pid);
  n->remote_ = absl::StrCat(kPrefixB, pid);
  n->head_address_ = "10.215.0.1";
  n->remote_address_ = "10.215.0.2";
  // Interface names are at most 15 characters: "vba" + a pid of at most 7 digits.
  const std::string veth_a = absl::StrCat("vba", pid), veth_b = absl::StrCat("vbb", pid);
  const std::vector<std::vector<std::string>> steps = {
      {"netns", "add", n->head_},
      {"netns", "add", n->remote_},
      {"-n", n->head_, "link", "set", "lo", "up"},
      {"-n", n->remote_, "link", "set", "lo", "up"},
      {"-n", n->head_, "link", "add", veth_a, "type", "veth", "peer", "name", veth_b, "netns",
       n->remote_},
      {"-n", n->head_, "addr", "add", n->head_address_ + "/24", "dev", veth_a},
      {"-n", n->remote_, "addr", "add", n->remote_address_ + "/24", "dev", veth_b},
      {"-n", n->head_, "link", "set", veth_a, "up"},
      {"-n", n->remote_, "link", "set", veth_b, "up"}};
  for (const std::vector<std::string>& step : steps) {
    // On failure the destructor removes whatever exists.
    if (absl::Status s = Ip(step); !s.ok()) return s;
  }
  return n;
}

BenchNetns::~BenchNetns() { Remove(); }

void BenchNetns::Remove() {
  absl::MutexLock lock(&remove_mutex_);
  if (removed_) return;
  removed_ = true;
  // Deleting a namespace destroys its end of the veth pair, and so the other end. A name that
  // was never made fails quietly (ip says so on stderr only when it existed and could not go).
  for (const std::string* name : {&head_, &remote_}) {
    if (!name->empty() && std::filesystem::exists("/run/netns/" + *name)) {
      (void)Ip({"netns", "del", *name});
    }
  }
}

absl::Status BenchNetns::EnterHead() const {
  const std::string path = "/run/netns/" + head_;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("setns ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

std::vector<std::string> BenchNetns::InRemote(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {kIp, "netns", "exec", remote_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace vllm::bench
