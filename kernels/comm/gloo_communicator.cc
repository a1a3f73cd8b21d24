#include "kernels/comm/gloo_communicator.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "kernels/comm/tcp_store.h"

namespace vllm::kernels::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds ToMs(absl::Duration d) {
  const int64_t ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, int64_t{1} << 40);
  return std::chrono::milliseconds(ms);
}

// gloo's FileStore bounded by one deadline: every wait (gloo's own waits included, which use a
// fixed 30 s otherwise) ends by `deadline` with gloo::IoException, like FileStore's timeout.
// FileStore::wait measures its timeout in whole seconds, so the wait is re-implemented here on
// its (protected) check() with a short poll: a file system offers nothing to block on.
class DeadlineFileStore final : public gloo::rendezvous::FileStore {
 public:
  DeadlineFileStore(const std::string& dir, Clock::time_point deadline)
      : FileStore(dir), deadline_(deadline) {}

  void wait(const std::vector<std::string>& keys) override { wait(keys, gloo::kNoTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Clock::time_point until = deadline_;
    if (timeout != gloo::kNoTimeout) until = std::min(until, Clock::now() + timeout);
    auto pause = std::chrono::microseconds(200);
    while (!check(keys)) {
      if (Clock::now() >= until) {
        throw gloo::IoException(absl::StrCat("timed out waiting for ", keys.size(),
                                             " peer address(es) in the gloo rendezvous directory ",
                                             basePath_));
      }
      std::this_thread::sleep_for(pause);  // polling a directory for peers' files
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
    }
  }

 private:
  Clock::time_point deadline_;
};

// gloo's TCP transport writes to sockets without MSG_NOSIGNAL: when a peer dies, the next write
// raises SIGPIPE, whose default action kills this process instead of letting gloo report
// EPIPE. Ignore it (once, process-wide) unless the program installed a handler of its own.
void IgnoreSigpipeUnlessHandled() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// Maps what gloo threw to a Status.
absl::Status FromGlooError(absl::string_view what, absl::string_view context) {
  const std::string message = absl::StrCat(context, ": ", what);
  if (absl::StrContains(what, "imed out") || absl::StrContains(what, "imeout")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

// OK when `hostname` resolves to an address a TCP socket of this machine can bind. Checked
// before gloo's CreateDevice, whose failure path leaks getaddrinfo's list.
absl::Status CheckBindable(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(hostname.c_str(), "0", &hints, &found); e != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", hostname, "' (", gai_strerror(e), ")"));
  }
  bool bound = false;
  int error = 0;
  for (addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) error = errno;
    close(fd);
  }
  freeaddrinfo(found);
  if (bound) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("no address of this machine: ", strerror(error)));
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context, int32_t rank,
                                   int32_t world_size, const CommOptions& options)
    : context_(std::move(context)),
      rank_(rank),
      world_size_(world_size),
      collective_timeout_(options.collective_timeout) {}

GlooCommunicator::~GlooCommunicator() {
  try {
    context_.reset();  // closes the pairs and stops the device's event loop
  } catch (...) {
  }
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Join(
    const std::string& store, int32_t world_size, int32_t rank, absl::Duration join_timeout,
    const CommOptions& options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo comm group: rank ", rank, " of world size ", world_size));
  }
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError("gloo comm group: empty CommOptions::hostname");
  }
  const std::string where = absl::StrCat("gloo comm group '", store, "' rank ", rank);
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(ToMs(join_timeout));
  std::unique_ptr<gloo::rendezvous::Store> rendezvous;
  if (absl::StartsWith(store, "tcp://")) {
    VLLM_ASSIGN_OR_RETURN(rendezvous, TcpStoreClient::Connect(store, options.curve, join_timeout));
  } else {
    struct stat st {};
    if (stat(store.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("gloo comm group: rendezvous directory '", store,
                                              "' does not exist (was the group destroyed?)"));
    }
    rendezvous = std::make_unique<DeadlineFileStore>(store, deadline);
  }
  IgnoreSigpipeUnlessHandled();
  if (absl::Status bindable = CheckBindable(options.hostname); !bindable.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": cannot bind gloo's TCP device to '", options.hostname,
                     "' (CommOptions::hostname): ", bindable.message()));
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": cannot bind gloo's TCP device to '",
                                                   options.hostname,
                                                   "' (CommOptions::hostname): ", e.what()));
  }
  try {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    context->setTimeout(ToMs(join_timeout));  // connecting the pairs
    context->connectFullMesh(*rendezvous, device);
    context->setTimeout(ToMs(options.collective_timeout));
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(std::move(context), rank, world_size, options));
  } catch (const gloo::IoException& e) {
    return FromGlooError(e.what(), absl::StrCat(where, ": joining"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(where, ": joining: ", e.what()));
  }
}

absl::Status GlooCommunicator::AllReduceSum(float* data, size_t count) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("gloo comm group is unusable after an earlier error: ", broken_.ToString()));
  }
  if (world_size_ == 1 || count == 0) return absl::OkStatus();
  const std::string where = absl::StrCat("gloo all-reduce of ", count, " floats, rank ", rank_);
  try {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag_++);
    opts.setTimeout(ToMs(collective_timeout_));
    gloo::allreduce(opts);
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    broken_ = FromGlooError(e.what(), where);
  } catch (const std::exception& e) {
    broken_ = absl::InternalError(absl::StrCat(where, ": ", e.what()));
  }
  return broken_;
}

}  // namespace vllm::kernels::comm
