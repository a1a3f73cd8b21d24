#include "bench/ipc/remote_broadcast.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "bench/common/bench_util.h"
#include "bench/ipc/remote_broadcast_socket.h"
#include "ipc/handle.h"
#include "ipc/message_queue.h"

namespace vllm::bench {
namespace {

using ipc::ByteSpan;
using ipc::MessageQueueOptions;
using ipc::MessageQueueReader;
using ipc::MessageQueueWriter;

constexpr char kIp[] = "/usr/sbin/ip";
// Start-up (reader process up, connected, subscribed) and each round trip: fail after this.
constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kStepTimeout = absl::Seconds(30);
// A reader gives up after this long without a message: longer than the writer's step timeout,
// so that the writer is the one reporting a stall.
constexpr absl::Duration kReaderWait = absl::Seconds(60);
// The reader's exit after the writer said "done".
constexpr absl::Duration kShutdownTimeout = absl::Seconds(15);
// ZeroMQ calls in the writer return this often, to check the deadline and the reader.
constexpr int kZmqSliceMs = 100;
// How long a ZeroMQ reader's context keeps delivering its last reply once it is done.
constexpr int kZmqReaderLingerMs = 5000;
constexpr size_t kReplyBytes = 64;
// The ZeroMQ writer's "done" message: one byte, shorter than any payload (>= 8 bytes).
constexpr uint8_t kZmqStop = 0xff;

// The 64-byte reply: the message's sequence number and its TouchBytes sum.
struct Reply {
  uint64_t seq;
  uint64_t sum;
  uint64_t pad[6];
};
static_assert(sizeof(Reply) == kReplyBytes);

absl::Time Deadline(absl::Duration d) { return absl::Now() + d; }

// The writer's message: a fixed pattern whose first 8 bytes carry the sequence number. TouchBytes
// is a sum of words, so message `seq`'s expected sum is seq + (the sum of bytes 8..n).
class Payload {
 public:
  explicit Payload(size_t size) : buffer_(size) {
    for (size_t i = 8; i < size; ++i) buffer_.data()[i] = static_cast<uint8_t>(i * 131 + 7);
    rest_sum_ = TouchBytes(buffer_.data() + 8, size - 8);
  }
  void Stamp(uint64_t seq) { std::memcpy(buffer_.data(), &seq, 8); }
  uint64_t Expected(uint64_t seq) const { return seq + rest_sum_; }
  const uint8_t* data() const { return buffer_.data(); }
  size_t size() const { return buffer_.size(); }
  ByteSpan bytes() const { return {buffer_.data(), buffer_.size()}; }

 private:
  AlignedBuffer buffer_;
  uint64_t rest_sum_ = 0;
};

// What the reader does with every message: TouchBytes it in place, reply with (seq, sum).
Reply Consume(const void* data, size_t size) {
  Reply reply{};
  std::memcpy(&reply.seq, data, 8);
  reply.sum = TouchBytes(data, size);
  return reply;
}

// Warm-up, then timed round trips until max_iterations or the budget is spent;
// `exchange(payload, deadline)` sends the stamped payload and returns the reader's reply. The
// step's deadline is computed before the clock starts, so no transport pays for it.
template <typename Exchange>
absl::StatusOr<std::vector<double>> TimeRoundTrips(const RemoteRoundTripConfig& config,
                                                   Payload& payload, Exchange exchange) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(config.max_iterations));
  const auto warmup = static_cast<uint64_t>(config.warmup);
  const int64_t budget_ns = absl::ToInt64Nanoseconds(config.budget);
  int64_t stop_ns = std::numeric_limits<int64_t>::max();
  for (uint64_t seq = 0;; ++seq) {
    const bool timed = seq >= warmup;
    if (timed && (samples.size() >= static_cast<size_t>(config.max_iterations) ||
                  (!samples.empty() && NowNs() >= stop_ns))) {
      break;
    }
    payload.Stamp(seq);
    const absl::Time deadline = Deadline(kStepTimeout);
    const int64_t t0 = NowNs();
    VLLM_ASSIGN_OR_RETURN(const Reply reply, exchange(payload, deadline));
    const int64_t t1 = NowNs();
    if (reply.seq != seq || reply.sum != payload.Expected(seq)) {
      return absl::DataLossError(absl::StrCat("reply (seq ", reply.seq, ", sum ", reply.sum,
                                              "), expected (", seq, ", ", payload.Expected(seq),
                                              ")"));
    }
    if (!timed) continue;
    if (samples.empty()) stop_ns = t0 + budget_ns;
    samples.push_back(static_cast<double>(t1 - t0));
  }
  return samples;
}

// Starts `<exe> reader args...`, inside placement.netns when set. `close_in_child`: a file
// descriptor of the writer's the reader must not hold (-1: none). Everything the child needs is
// built before the fork: the child only closes and execs.
absl::StatusOr<ChildProcess> SpawnReader(const ReaderPlacement& placement,
                                         const std::vector<std::string>& args,
                                         int close_in_child = -1) {
  std::vector<std::string> argv;
  if (!placement.netns.empty()) argv = {kIp, "netns", "exec", placement.netns};
  argv.push_back(placement.exe);
  argv.push_back("reader");
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  return ChildProcess::Fork([&c_argv, close_in_child] {
    if (close_in_child >= 0) close(close_in_child);
    execv(c_argv[0], c_argv.data());
    return 127;
  });
}

// Runs `body`, turning an escaping exception (zmq::error_t, std::bad_alloc) into a Status.
template <typename Body>
auto CatchAll(absl::string_view what, Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

// ---------------------------------------------------------------------------------------------
// MessageQueue

MessageQueueOptions BroadcastOptions(const ReaderPlacement& placement) {
  // The executor's broadcast geometry (MultiprocExecutorOptions): 1 MiB fits a chunk.
  MessageQueueOptions o;
  o.n_readers = 1;
  o.max_chunks = 8;
  o.max_chunk_bytes = 4 << 20;
  if (placement.remote) {
    o.local_reader_ranks = std::vector<int32_t>{};  // rank 0 reads over TCP
    o.remote_host = placement.writer_host;
  }
  return o;
}

MessageQueueOptions ReplyOptions(absl::string_view reply_host) {
  // The worker's response queue geometry (worker/worker_proc.cc).
  MessageQueueOptions o;
  o.n_readers = 1;
  o.max_chunks = 4;
  o.max_chunk_bytes = 1 << 20;
  if (reply_host != "shm") {
    o.local_reader_ranks = std::vector<int32_t>{};
    o.remote_host = std::string(reply_host);
  }
  return o;
}

absl::StatusOr<Reply> MessageQueueExchange(MessageQueueWriter& broadcast,
                                           MessageQueueReader& replies, const Payload& p,
                                           absl::Time deadline) {
  VLLM_RETURN_IF_ERROR(broadcast.Enqueue(p.bytes(), deadline));
  Reply reply{};
  VLLM_RETURN_IF_ERROR(replies.Dequeue(
      [&](ByteSpan b) -> absl::Status {
        if (b.size() != kReplyBytes) return absl::DataLossError("reply of the wrong size");
        std::memcpy(&reply, b.data(), kReplyBytes);
        return absl::OkStatus();
      },
      deadline));
  return reply;
}

absl::StatusOr<std::vector<double>> MessageQueueRoundTrip(const ReaderPlacement& placement,
                                                          const RemoteRoundTripConfig& config) {
  VLLM_ASSIGN_OR_RETURN(auto broadcast, MessageQueueWriter::Create(BroadcastOptions(placement)));
  // The reader sends its reply queue's handle back on a pipe (inherited across `ip netns exec`).
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  ScopedFd read_end(fds[0]), write_end(fds[1]);
  const std::vector<std::string> args = {"mq", absl::StrCat(config.payload_bytes),
                                         broadcast->handle().ToText(), absl::StrCat(fds[1]),
                                         placement.remote ? placement.reader_host : "shm"};
  VLLM_ASSIGN_OR_RETURN(ChildProcess child, SpawnReader(placement, args, fds[0]));
  write_end.Reset();
  VLLM_ASSIGN_OR_RETURN(const std::string line, ReadLine(read_end.get(), Deadline(kStartTimeout)));
  VLLM_ASSIGN_OR_RETURN(const ipc::Handle reply_handle, ipc::Handle::FromText(line));
  VLLM_ASSIGN_OR_RETURN(auto replies, MessageQueueReader::Attach(reply_handle, 0));
  VLLM_RETURN_IF_ERROR(broadcast->WaitUntilReady(Deadline(kStartTimeout)));
  VLLM_RETURN_IF_ERROR(replies->WaitUntilReady(Deadline(kStartTimeout)));

  Payload payload(config.payload_bytes);
  VLLM_ASSIGN_OR_RETURN(std::vector<double> samples,
                        TimeRoundTrips(config, payload, [&](const Payload& p, absl::Time deadline) {
                          return MessageQueueExchange(*broadcast, *replies, p, deadline);
                        }));
  // Close tells the reader to finish; the queue stays alive until it has (a remote reader's
  // close message is still in flight when Close returns).
  broadcast->Close();
  VLLM_RETURN_IF_ERROR(child.Wait(kShutdownTimeout));
  return samples;
}

int MessageQueueReaderMain(size_t payload_bytes, const std::string& handle_text, int reply_fd,
                           const std::string& reply_host) {
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "remote_broadcast_bench reader (mq, pid %d): %s\n", getpid(),
                 st.ToString().c_str());
    return 1;
  };
  auto handle = ipc::Handle::FromText(handle_text);
  if (!handle.ok()) return fail(handle.status());
  auto reader = MessageQueueReader::Attach(*handle, 0);
  if (!reader.ok()) return fail(reader.status());
  auto replies = MessageQueueWriter::Create(ReplyOptions(reply_host));
  if (!replies.ok()) return fail(replies.status());
  const std::string line = (*replies)->handle().ToText() + "\n";
  if (absl::Status st = WriteAll(reply_fd, line.data(), line.size()); !st.ok()) return fail(st);
  close(reply_fd);
  if (auto st = (*replies)->WaitUntilReady(Deadline(kStartTimeout)); !st.ok()) return fail(st);
  if (auto st = (*reader)->WaitUntilReady(Deadline(kStartTimeout)); !st.ok()) return fail(st);
  while (true) {
    Reply reply{};
    absl::Status st = (*reader)->Dequeue(
        [&](ByteSpan b) -> absl::Status {
          if (b.size() != payload_bytes) {
            return absl::DataLossError(
                absl::StrCat("got ", b.size(), " bytes, expected ", payload_bytes));
          }
          reply = Consume(b.data(), b.size());
          return absl::OkStatus();
        },
        Deadline(kReaderWait));
    if (absl::IsCancelled(st)) return 0;  // the writer closed the queue: the session is over
    if (!st.ok()) return fail(st);
    st = (*replies)->Enqueue({reinterpret_cast<const uint8_t*>(&reply), kReplyBytes},
                             Deadline(kReaderWait));
    if (!st.ok()) return fail(st);
  }
}

// ---------------------------------------------------------------------------------------------
// ZeroMQ PUB/SUB + PUSH/PULL over TCP

// Waits for the reader's subscription on the XPUB (XPUB_VERBOSE passes it up): from then on the
// reader receives everything sent.
absl::Status AwaitSubscription(zmq::socket_t& xpub, ChildProcess& child) {
  const absl::Time deadline = Deadline(kStartTimeout);
  zmq::message_t message;
  while (true) {
    if (xpub.recv(message) && message.size() >= 1 &&
        *static_cast<const uint8_t*>(message.data()) == 1) {
      return absl::OkStatus();
    }
    VLLM_RETURN_IF_ERROR(child.CheckNotFailed());
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("the ZeroMQ reader did not subscribe");
    }
  }
}

absl::StatusOr<Reply> ZmqExchange(zmq::socket_t& xpub, zmq::socket_t& pull, const Payload& p,
                                  absl::Time deadline, ChildProcess& child) {
  while (!xpub.send(zmq::buffer(p.data(), p.size()))) {
    VLLM_RETURN_IF_ERROR(child.CheckNotFailed());
    if (absl::Now() > deadline) return absl::DeadlineExceededError("ZeroMQ send");
  }
  zmq::message_t message;
  while (!pull.recv(message)) {
    VLLM_RETURN_IF_ERROR(child.CheckNotFailed());
    if (absl::Now() > deadline) return absl::DeadlineExceededError("a ZeroMQ reply");
  }
  if (message.size() != kReplyBytes) return absl::DataLossError("ZeroMQ reply of the wrong size");
  Reply reply;
  std::memcpy(&reply, message.data(), kReplyBytes);
  return reply;
}

absl::StatusOr<std::vector<double>> ZmqRoundTrip(const ReaderPlacement& placement,
                                                 const RemoteRoundTripConfig& config) {
  // Declaration order: the sockets close (linger 0) before the context terminates.
  zmq::context_t context(1);
  zmq::socket_t xpub(context, zmq::socket_type::xpub);
  zmq::socket_t pull(context, zmq::socket_type::pull);
  for (zmq::socket_t* s : {&xpub, &pull}) {
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::rcvtimeo, kZmqSliceMs);
    s->set(zmq::sockopt::sndtimeo, kZmqSliceMs);
  }
  xpub.set(zmq::sockopt::xpub_verbose, 1);
  xpub.bind(absl::StrCat("tcp://", placement.writer_host, ":*"));
  pull.bind(absl::StrCat("tcp://", placement.writer_host, ":*"));
  const std::vector<std::string> args = {"zmq", absl::StrCat(config.payload_bytes),
                                         xpub.get(zmq::sockopt::last_endpoint),
                                         pull.get(zmq::sockopt::last_endpoint)};
  VLLM_ASSIGN_OR_RETURN(ChildProcess child, SpawnReader(placement, args));
  VLLM_RETURN_IF_ERROR(AwaitSubscription(xpub, child));
  Payload payload(config.payload_bytes);
  VLLM_ASSIGN_OR_RETURN(std::vector<double> samples,
                        TimeRoundTrips(config, payload, [&](const Payload& p, absl::Time deadline) {
                          return ZmqExchange(xpub, pull, p, deadline, child);
                        }));
  const uint8_t stop = kZmqStop;
  if (!xpub.send(zmq::buffer(&stop, 1))) return absl::UnavailableError("ZeroMQ stop message");
  VLLM_RETURN_IF_ERROR(child.Wait(kShutdownTimeout));
  return samples;
}

int ZmqReaderMain(size_t payload_bytes, const std::string& pub, const std::string& push_to) {
  auto fail = [](absl::string_view why) {
    std::fprintf(stderr, "remote_broadcast_bench reader (zmq, pid %d): %s\n", getpid(),
                 std::string(why).c_str());
    return 1;
  };
  const int wait_ms = static_cast<int>(absl::ToInt64Milliseconds(kReaderWait));
  zmq::context_t context(1);
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::rcvtimeo, wait_ms);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(pub);
  zmq::socket_t push(context, zmq::socket_type::push);
  push.set(zmq::sockopt::sndtimeo, wait_ms);
  push.set(zmq::sockopt::linger, kZmqReaderLingerMs);
  push.connect(push_to);
  zmq::message_t message;
  while (true) {
    if (!sub.recv(message)) return fail("no message within the timeout");
    if (message.size() == 1 && *static_cast<const uint8_t*>(message.data()) == kZmqStop) return 0;
    if (message.size() != payload_bytes) {
      return fail(absl::StrCat("got ", message.size(), " bytes, expected ", payload_bytes));
    }
    const Reply reply = Consume(message.data(), message.size());
    if (!push.send(zmq::buffer(&reply, kReplyBytes))) return fail("could not send a reply");
  }
}

// ---------------------------------------------------------------------------------------------
// Raw TCP ping-pong: the floor

absl::StatusOr<std::vector<double>> RawTcpRoundTrip(const ReaderPlacement& placement,
                                                    const RemoteRoundTripConfig& config) {
  VLLM_ASSIGN_OR_RETURN(TcpListener listener, TcpListener::Bind(placement.writer_host));
  const std::vector<std::string> args = {"tcp", absl::StrCat(config.payload_bytes),
                                         placement.writer_host, absl::StrCat(listener.port())};
  VLLM_ASSIGN_OR_RETURN(ChildProcess child, SpawnReader(placement, args));
  VLLM_ASSIGN_OR_RETURN(ScopedFd conn, listener.Accept(Deadline(kStartTimeout)));
  VLLM_RETURN_IF_ERROR(ConfigureTcp(conn.get(), kStepTimeout));
  Payload payload(config.payload_bytes);
  VLLM_ASSIGN_OR_RETURN(
      std::vector<double> samples,
      // Each blocking call is bounded by the socket's timeouts (ConfigureTcp), not `deadline`.
      TimeRoundTrips(config, payload, [&](const Payload& p, absl::Time) -> absl::StatusOr<Reply> {
        VLLM_RETURN_IF_ERROR(SendAll(conn.get(), p.data(), p.size()));
        Reply reply;
        VLLM_ASSIGN_OR_RETURN(const bool got, RecvAll(conn.get(), &reply, kReplyBytes));
        if (!got) return absl::UnavailableError("the TCP reader closed the connection");
        return reply;
      }));
  conn.Reset();  // end of stream: the reader exits
  VLLM_RETURN_IF_ERROR(child.Wait(kShutdownTimeout));
  return samples;
}

int RawTcpReaderMain(size_t payload_bytes, const std::string& host, int port) {
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "remote_broadcast_bench reader (tcp, pid %d): %s\n", getpid(),
                 st.ToString().c_str());
    return 1;
  };
  auto conn = TcpConnect(host, port, Deadline(kStartTimeout));
  if (!conn.ok()) return fail(conn.status());
  if (auto st = ConfigureTcp(conn->get(), kReaderWait); !st.ok()) return fail(st);
  AlignedBuffer buffer(payload_bytes);
  while (true) {
    auto got = RecvAll(conn->get(), buffer.data(), payload_bytes);
    if (!got.ok()) return fail(got.status());
    if (!*got) return 0;  // the writer closed the connection between messages: done
    const Reply reply = Consume(buffer.data(), payload_bytes);
    if (auto st = SendAll(conn->get(), &reply, kReplyBytes); !st.ok()) return fail(st);
  }
}

}  // namespace

absl::StatusOr<std::vector<double>> RemoteBroadcastRoundTrip(BroadcastTransport transport,
                                                             const ReaderPlacement& placement,
                                                             const RemoteRoundTripConfig& config) {
  if (config.payload_bytes < 8) return absl::InvalidArgumentError("payload_bytes must be >= 8");
  if (config.max_iterations < 1 || config.warmup < 0) {
    return absl::InvalidArgumentError("need max_iterations >= 1 and warmup >= 0");
  }
  return CatchAll("round trip", [&]() -> absl::StatusOr<std::vector<double>> {
    switch (transport) {
      case BroadcastTransport::kMessageQueue:
        return MessageQueueRoundTrip(placement, config);
      case BroadcastTransport::kZmq:
        return ZmqRoundTrip(placement, config);
      case BroadcastTransport::kRawTcp:
        return RawTcpRoundTrip(placement, config);
    }
    return absl::InvalidArgumentError("unknown transport");
  });
}

int RunRemoteBroadcastReader(int argc, char** argv) {
  // Die with the writer (ChildProcess armed this too; `ip netns exec` keeps it, but a reader
  // started by hand should not linger either).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return ChildProcess::kParentGoneExitCode;
  const std::string kind = argc >= 3 ? argv[2] : "";
  size_t payload_bytes = 0;
  int number = 0;
  const bool sized = argc >= 4 && absl::SimpleAtoi(argv[3], &payload_bytes) && payload_bytes >= 8;
  try {
    if (sized && kind == "mq" && argc == 7 && absl::SimpleAtoi(argv[5], &number)) {
      return MessageQueueReaderMain(payload_bytes, argv[4], number, argv[6]);
    }
    if (sized && kind == "zmq" && argc == 6) return ZmqReaderMain(payload_bytes, argv[4], argv[5]);
    if (sized && kind == "tcp" && argc == 6 && absl::SimpleAtoi(argv[5], &number)) {
      return RawTcpReaderMain(payload_bytes, argv[4], number);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_broadcast_bench reader (%s): %s\n", kind.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: remote_broadcast_bench reader mq BYTES HANDLE FD REPLY_HOST|shm\n"
               "       remote_broadcast_bench reader zmq BYTES PUB_ENDPOINT PULL_ENDPOINT\n"
               "       remote_broadcast_bench reader tcp BYTES HOST PORT\n");
  return 2;
}

}  // namespace vllm::bench
