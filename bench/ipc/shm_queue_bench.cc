#include "bench/ipc/shm_queue_bench.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ipc/message_queue.h"

namespace vllm::bench {
namespace {

using ipc::ByteSpan;
using ipc::MessageQueueOptions;
using ipc::MessageQueueReader;
using ipc::MessageQueueWriter;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kStepTimeout = absl::Seconds(60);
constexpr size_t kReplyBytes = 64;

// The 64-byte reply: words 0..3 used, the rest zero.
struct Reply {
  uint64_t seq_or_count;
  uint64_t sum;
  int64_t recv_ns;  // when the reader had the message
  int64_t send_ns;  // the writer's stamp, echoed (wake-up runs)
  uint64_t pad[4];
};
static_assert(sizeof(Reply) == kReplyBytes);

// Start-up waits take absolute deadlines; per-message calls pass the timeout itself, which
// ipc::Deadline resolves only when a call has to wait (no clock read on the fast path).
absl::Time Deadline(absl::Duration d) { return absl::Now() + d; }

// The writer's side of one run: the broadcast queue, N reader processes and their reply queues.
struct Session {
  std::unique_ptr<MessageQueueWriter> broadcast;
  std::vector<std::unique_ptr<MessageQueueReader>> replies;
  std::vector<ChildProcess> children;
};

absl::StatusOr<std::string> ReadLineFromFd(int fd, absl::Duration timeout) {
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  while (line.empty() || line.back() != '\n') {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return absl::DeadlineExceededError("reader process did not send its handle");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return absl::UnavailableError("reader process exited before sending its handle");
    if (n < 0 && errno != EINTR) return absl::InternalError("read from reader pipe failed");
    if (n > 0) line.append(buf, static_cast<size_t>(n));
  }
  line.pop_back();
  return line;
}

absl::StatusOr<Session> StartSession(int n_readers, const char* mode) {
  Session s;
  MessageQueueOptions opt;
  opt.n_readers = static_cast<uint32_t>(n_readers);
  VLLM_ASSIGN_OR_RETURN(s.broadcast, MessageQueueWriter::Create(opt));
  const std::string handle = s.broadcast->handle().ToText();
  for (int r = 0; r < n_readers; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return absl::InternalError("pipe failed");
    // Everything the child needs is built before fork: it only calls execv.
    std::vector<std::string> args = {"ipc_bench",     "shm-reader",         handle,
                                     absl::StrCat(r), absl::StrCat(fds[1]), mode};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int read_fd = fds[0];
    auto child = ChildProcess::Fork([&argv, read_fd] {
      close(read_fd);
      execv("/proc/self/exe", argv.data());
      return 127;
    });
    close(fds[1]);
    if (!child.ok()) {
      close(fds[0]);
      return child.status();
    }
    s.children.push_back(std::move(*child));
    auto line = ReadLineFromFd(fds[0], kStartTimeout);
    close(fds[0]);
    if (!line.ok()) return line.status();
    VLLM_ASSIGN_OR_RETURN(ipc::Handle reply_handle, ipc::Handle::FromText(*line));
    VLLM_ASSIGN_OR_RETURN(auto reply, MessageQueueReader::Attach(reply_handle, 0));
    s.replies.push_back(std::move(reply));
  }
  VLLM_RETURN_IF_ERROR(s.broadcast->WaitUntilReady(Deadline(kStartTimeout)));
  for (auto& reply : s.replies)
    VLLM_RETURN_IF_ERROR(reply->WaitUntilReady(Deadline(kStartTimeout)));
  return s;
}

absl::Status FinishSession(Session& s) {
  s.broadcast->Close();
  return WaitForChildren(s.children, absl::Seconds(30));
}

absl::StatusOr<Reply> ReadReply(MessageQueueReader& q) {
  Reply reply{};
  VLLM_RETURN_IF_ERROR(q.Dequeue(
      [&](ByteSpan b) -> absl::Status {
        if (b.size() != kReplyBytes) return absl::DataLossError("reply of the wrong size");
        std::memcpy(&reply, b.data(), kReplyBytes);
        return absl::OkStatus();
      },
      kStepTimeout));
  return reply;
}

// Payload with a sequence number in its first word; the rest fixed, so the expected checksum
// is seq + TouchBytes(rest) (TouchBytes is a sum of words).
struct Payload {
  explicit Payload(size_t n) : buffer(n) {
    for (size_t i = 8; i < n; ++i) buffer.data()[i] = static_cast<uint8_t>(i * 131 + 7);
    rest_sum = n > 8 ? TouchBytes(buffer.data() + 8, n - 8) : 0;
  }
  void Stamp(uint64_t seq) { std::memcpy(buffer.data(), &seq, 8); }
  ByteSpan bytes() const { return {buffer.data(), buffer.size()}; }
  AlignedBuffer buffer;
  uint64_t rest_sum;
};

}  // namespace

absl::StatusOr<std::vector<double>> ShmQueueRoundTrip(const RoundTripConfig& config) {
  if (config.payload_bytes < 8) return absl::InvalidArgumentError("payload_bytes must be >= 8");
  VLLM_ASSIGN_OR_RETURN(Session s, StartSession(config.n_readers, "echo"));
  Payload payload(config.payload_bytes);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(config.iterations));
  for (int it = 0; it < config.warmup + config.iterations; ++it) {
    const uint64_t seq = static_cast<uint64_t>(it);
    payload.Stamp(seq);
    const int64_t t0 = NowNs();
    VLLM_RETURN_IF_ERROR(s.broadcast->Enqueue(payload.bytes(), kStepTimeout));
    for (auto& q : s.replies) {
      VLLM_ASSIGN_OR_RETURN(Reply reply, ReadReply(*q));
      if (reply.seq_or_count != seq || reply.sum != seq + payload.rest_sum) {
        return absl::DataLossError(absl::StrCat("bad reply at iteration ", it));
      }
    }
    const int64_t t1 = NowNs();
    if (it >= config.warmup) samples.push_back(static_cast<double>(t1 - t0));
  }
  VLLM_RETURN_IF_ERROR(FinishSession(s));
  return samples;
}

absl::StatusOr<ThroughputResult> ShmQueueThroughput(const ThroughputConfig& config) {
  if (config.payload_bytes < 8) return absl::InvalidArgumentError("payload_bytes must be >= 8");
  VLLM_ASSIGN_OR_RETURN(Session s, StartSession(config.n_readers, "stream"));
  Payload payload(config.payload_bytes);
  const uint64_t n = static_cast<uint64_t>(config.messages);
  const int64_t t0 = NowNs();
  for (uint64_t i = 0; i < n; ++i) {
    payload.Stamp(i);
    VLLM_RETURN_IF_ERROR(s.broadcast->Enqueue(payload.bytes(), kStepTimeout));
  }
  s.broadcast->Close();
  const uint64_t expected_sum = n * (n - 1) / 2 + n * payload.rest_sum;
  for (auto& q : s.replies) {
    VLLM_ASSIGN_OR_RETURN(Reply reply, ReadReply(*q));
    if (reply.seq_or_count != n || reply.sum != expected_sum) {
      return absl::DataLossError(absl::StrCat("reader saw ", reply.seq_or_count, " of ", n,
                                              " messages or a wrong checksum"));
    }
  }
  const double seconds = static_cast<double>(NowNs() - t0) / 1e9;
  VLLM_RETURN_IF_ERROR(WaitForChildren(s.children, absl::Seconds(30)));
  ThroughputResult result;
  result.messages_per_s = static_cast<double>(n) / seconds;
  result.gb_per_s = result.messages_per_s * static_cast<double>(config.payload_bytes) / 1e9;
  return result;
}

absl::StatusOr<WakeupResult> ShmQueueWakeup(absl::Duration idle, absl::Duration period,
                                            int messages) {
  VLLM_ASSIGN_OR_RETURN(Session s, StartSession(1, "echo"));
  const pid_t reader = s.children[0].pid();
  Payload payload(64);
  WakeupResult result;
  // A few quick exchanges first, so the reader is past start-up.
  for (uint64_t i = 0; i < 10; ++i) {
    payload.Stamp(i);
    VLLM_RETURN_IF_ERROR(s.broadcast->Enqueue(payload.bytes(), kStepTimeout));
    VLLM_RETURN_IF_ERROR(ReadReply(*s.replies[0]).status());
  }
  // Idle: nothing to read for `idle`.
  double cpu0 = ProcessCpuSeconds(reader);
  absl::SleepFor(idle);
  double cpu1 = ProcessCpuSeconds(reader);
  result.idle_cpu_percent = 100.0 * (cpu1 - cpu0) / absl::ToDoubleSeconds(idle);

  // Periodic: one message every `period`, at absolute times (no drift).
  std::vector<double> wakeups;
  const int64_t period_ns = absl::ToInt64Nanoseconds(period);
  cpu0 = ProcessCpuSeconds(reader);
  const int64_t start = NowNs();
  int64_t next = start + period_ns;
  for (int i = 0; i < messages; ++i, next += period_ns) {
    timespec ts{static_cast<time_t>(next / 1'000'000'000), static_cast<long>(next % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    const uint64_t seq = 1000 + static_cast<uint64_t>(i);
    payload.Stamp(seq);
    const int64_t send_ns = NowNs();
    std::memcpy(payload.buffer.data() + 8, &send_ns, 8);
    VLLM_RETURN_IF_ERROR(s.broadcast->Enqueue(payload.bytes(), kStepTimeout));
    VLLM_ASSIGN_OR_RETURN(Reply reply, ReadReply(*s.replies[0]));
    if (reply.seq_or_count != seq || reply.send_ns != send_ns) {
      return absl::DataLossError("bad reply in the wake-up run");
    }
    wakeups.push_back(static_cast<double>(reply.recv_ns - send_ns));
  }
  cpu1 = ProcessCpuSeconds(reader);
  result.periodic_cpu_percent =
      100.0 * (cpu1 - cpu0) / (static_cast<double>(NowNs() - start) / 1e9);
  result.wakeup = Summarize(std::move(wakeups));
  result.messages = messages;
  VLLM_RETURN_IF_ERROR(FinishSession(s));
  return result;
}

int RunShmQueueReader(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return ChildProcess::kParentGoneExitCode;
  int rank = 0, reply_fd = -1;
  if (argc != 6 || !absl::SimpleAtoi(argv[3], &rank) || !absl::SimpleAtoi(argv[4], &reply_fd)) {
    std::fprintf(stderr, "usage: ipc_bench shm-reader HANDLE RANK REPLY_FD echo|stream\n");
    return 2;
  }
  const bool stream = std::string(argv[5]) == "stream";
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "shm-reader: %s\n", st.ToString().c_str());
    return 1;
  };
  auto handle = ipc::Handle::FromText(argv[2]);
  if (!handle.ok()) return fail(handle.status());
  auto reader = MessageQueueReader::Attach(*handle, rank);
  if (!reader.ok()) return fail(reader.status());
  MessageQueueOptions reply_opt;
  reply_opt.max_chunk_bytes = 4096;
  auto replies = MessageQueueWriter::Create(reply_opt);
  if (!replies.ok()) return fail(replies.status());
  const std::string line = (*replies)->handle().ToText() + "\n";
  if (write(reply_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 1;
  close(reply_fd);
  if (auto st = (*replies)->WaitUntilReady(Deadline(kStartTimeout)); !st.ok()) return fail(st);
  if (auto st = (*reader)->WaitUntilReady(Deadline(kStartTimeout)); !st.ok()) return fail(st);

  uint64_t count = 0, total = 0;
  while (true) {
    Reply reply{};
    absl::Status st = (*reader)->Dequeue([&](ByteSpan b) {
      reply.recv_ns = NowNs();
      std::memcpy(&reply.seq_or_count, b.data(), 8);
      if (b.size() >= 16) std::memcpy(&reply.send_ns, b.data() + 8, 8);
      reply.sum = TouchBytes(b.data(), b.size());
      return absl::OkStatus();
    });
    if (absl::IsCancelled(st)) break;  // the writer closed the queue: the run is over
    if (!st.ok()) return fail(st);
    if (stream) {
      if (reply.seq_or_count != count) return fail(absl::DataLossError("out of order"));
      ++count;
      total += reply.sum;
      continue;
    }
    if (auto rst =
            (*replies)->Enqueue({reinterpret_cast<uint8_t*>(&reply), kReplyBytes}, kStepTimeout);
        !rst.ok()) {
      return fail(rst);
    }
  }
  if (stream) {
    Reply done{count, total, 0, 0, {}};
    if (auto st =
            (*replies)->Enqueue({reinterpret_cast<uint8_t*>(&done), kReplyBytes}, kStepTimeout);
        !st.ok()) {
      return fail(st);
    }
  }
  return 0;
}

}  // namespace vllm::bench
