// MessageQueue: one writer broadcasts byte messages to N readers, in order, exactly once each.
// vLLM's shm_broadcast.MessageQueue, the channel between an engine core and its workers.
//
//  - Readers on this node ("local") read from a shared-memory ring (shm_ring_buffer.h); a
//    message larger than a chunk is marked "overflow" in its chunk and travels over a ZMQ
//    PUB/SUB socket on a private ipc:// address (ipc_address.h), whose file is removed once
//    every local reader has subscribed.
//  - Readers on other nodes ("remote") receive every message over a TCP PUB/SUB socket,
//    optionally CURVE-authenticated with the cluster key (curve.h): then a reader without the
//    key receives nothing and does not count as attached.
//  - A Handle (handle.h) describes the queue; readers attach from it by rank.
//  - Both sides call WaitUntilReady(): the writer returns once every reader attached and
//    subscribed, then unlinks the segment's name and the ipc:// socket file so a kill -9 of
//    anyone leaves nothing in /dev/shm or the file system; a reader returns once the writer
//    said so (after the unlinking).
//  - Dead peers are reported (Unavailable naming the rank and pid), waits take deadlines
//    (DeadlineExceeded naming whom they wait for) and Cancel() ends them from another thread.
//
// ZMQ frames carry a one-byte kind first: 'D' data, 'R' ready, 'C' closed.
//
// Thread-safety: each side is used by one thread at a time; Cancel() is thread-safe.
#ifndef VLLM_IPC_MESSAGE_QUEUE_H_
#define VLLM_IPC_MESSAGE_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ipc/curve.h"
#include "ipc/handle.h"
#include "ipc/ipc_address.h"
#include "ipc/shm_ring_buffer.h"
#include "ipc/wait_strategy.h"

namespace vllm::ipc {

using ByteSpan = absl::Span<const uint8_t>;

struct MessageQueueOptions {
  uint32_t n_readers = 1;
  // Ranks (0..n_readers-1) that read through shared memory; nullopt: all of them.
  std::optional<std::vector<int32_t>> local_reader_ranks;
  uint64_t max_chunks = 10;
  uint64_t max_chunk_bytes = 16 << 20;  // multiple of 64
  // Where remote readers connect (an address of this node they can reach) and on which port
  // (0: any free one). Used only when some reader is remote.
  std::string remote_host = "127.0.0.1";
  int remote_port = 0;
  // Messages queued per remote reader before Enqueue waits (never drops).
  int remote_send_hwm = 1024;
  // The cluster key (curve.h): remote readers must hold it (CURVE). nullopt: plain TCP, for a
  // trusted network only. The handle records that CURVE is required, never the key.
  std::optional<CurveKeys> remote_curve;
  WaitOptions wait;
};

class MessageQueueWriter {
 public:
  // Creates the ring (when some reader is local) and binds the sockets. InvalidArgument for bad
  // options; ResourceExhausted when shared memory cannot be had; FailedPrecondition when
  // remote_curve is set and libzmq has no CURVE.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MessageQueueWriter>> Create(
      const MessageQueueOptions& options);
  // Closes the queue (readers drain, then see Cancelled) and releases everything.
  ~MessageQueueWriter();
  // Unlinks the ring segments of writers whose process is gone (killed before every reader
  // attached, so the name was never unlinked). A parent that has just killed and reaped
  // writer processes calls it; Create does it too.
  static void RemoveSegmentsOfDeadWriters();

  const Handle& handle() const { return handle_; }

  // Returns once every reader has attached and subscribed; then unlinks the segment name and
  // the local socket file, and tells the readers. DeadlineExceeded names the readers still
  // missing.
  [[nodiscard]] absl::Status WaitUntilReady(absl::Time deadline);

  // Broadcasts one message made of `parts` concatenated (a gather write). Waits while the ring
  // is full. Errors: FailedPrecondition before WaitUntilReady, Unavailable (a reader died),
  // DeadlineExceeded (naming the readers behind), Cancelled.
  [[nodiscard]] absl::Status EnqueueParts(absl::Span<const ByteSpan> parts,
                                          Deadline deadline = absl::InfiniteFuture());
  [[nodiscard]] absl::Status Enqueue(ByteSpan payload, Deadline deadline = absl::InfiniteFuture()) {
    return EnqueueParts({&payload, 1}, deadline);
  }
  // Packs `value` with msgpack (into a buffer reused across calls) and enqueues it.
  template <typename T>
  [[nodiscard]] absl::Status EnqueueMsgpack(const T& value,
                                            Deadline deadline = absl::InfiniteFuture()) {
    pack_buffer_.clear();
    msgpack::pack(pack_buffer_, value);
    return Enqueue({reinterpret_cast<const uint8_t*>(pack_buffer_.data()), pack_buffer_.size()},
                   deadline);
  }

  // Tells the readers that no message follows. Idempotent. Local readers get everything that
  // was enqueued. Remote (TCP) readers receive asynchronously: messages still in flight are
  // lost if this process exits at once (ZMQ PUB has no delivery acknowledgement), so a writer
  // waits for its readers' replies before it exits, as an engine core does.
  void Close();
  // Ends a wait in progress, and every later one, with Cancelled. Thread-safe.
  void Cancel();

 private:
  MessageQueueWriter() = default;
  absl::Status CheckCancelled() const;
  absl::Status CountSubscriptions(zmq::socket_t& socket, uint32_t& count);

  Handle handle_;
  WaitOptions wait_;
  std::unique_ptr<RingWriter> ring_;     // when some reader is local
  ScopedIpcAddress local_address_;       // local_'s socket file, until every reader subscribed
  std::optional<zmq::socket_t> local_;   // XPUB for oversize payloads to local readers
  std::optional<zmq::socket_t> remote_;  // XPUB for every payload to remote readers
  uint32_t n_local_ = 0, n_remote_ = 0;
  uint32_t local_subscribed_ = 0, remote_subscribed_ = 0;
  bool ready_ = false;
  bool closed_ = false;
  std::atomic<bool> cancelled_{false};
  msgpack::sbuffer pack_buffer_;
};

class MessageQueueReader {
 public:
  // Attaches as reader `rank` of the queue `handle` describes: through shared memory if the
  // rank is local, else over TCP, with `curve` (the cluster key) when the handle says the
  // writer requires it. NotFound if the segment is gone (the writer is ready already or died),
  // FailedPrecondition if another process attached as this rank, or if `curve` is missing
  // (or given) for a remote rank and the writer does (or does not) use CURVE.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MessageQueueReader>> Attach(
      const Handle& handle, int32_t rank, const WaitOptions& wait = {},
      const std::optional<CurveKeys>& curve = std::nullopt);
  ~MessageQueueReader();

  // Returns once the writer has seen every reader attach.
  [[nodiscard]] absl::Status WaitUntilReady(absl::Time deadline);

  // Waits for the next message and calls visit() with its bytes in place (shared memory or the
  // ZMQ frame), then releases it; returns visit()'s status. The bytes are valid only during the
  // call. Errors: Cancelled (writer closed and every message was read, or Cancel()),
  // Unavailable (writer died), DeadlineExceeded (the message is not consumed and the next call
  // waits for it again), DataLoss (a corrupt frame), PermissionDenied (a remote writer refused
  // this reader's CURVE key, or the security handshake failed).
  [[nodiscard]] absl::Status Dequeue(absl::FunctionRef<absl::Status(ByteSpan)> visit,
                                     Deadline deadline = absl::InfiniteFuture());
  // Copies the next message out.
  [[nodiscard]] absl::StatusOr<std::vector<uint8_t>> DequeueBytes(
      Deadline deadline = absl::InfiniteFuture());

  // True when the next Dequeue() will not wait (local readers only; remote readers say false).
  bool Poll() const { return ring_ != nullptr && ring_->Poll(); }
  // Ends a wait in progress, and every later one, with Cancelled. Thread-safe.
  void Cancel();

  int32_t rank() const { return rank_; }
  bool is_local() const { return ring_ != nullptr; }

 private:
  MessageQueueReader() = default;
  absl::Status Check() const;
  absl::Status DequeueLocal(absl::FunctionRef<absl::Status(ByteSpan)> visit,
                            const Deadline& deadline);
  absl::Status DequeueRemote(absl::FunctionRef<absl::Status(ByteSpan)> visit, int64_t deadline_ns);
  absl::Status RecvFrame(int64_t deadline_ns, absl::string_view what);

  Handle handle_;
  int32_t rank_ = -1;
  WaitOptions wait_;
  std::unique_ptr<RingReader> ring_;      // local readers
  std::optional<zmq::socket_t> sub_;      // SUB: oversize (local) or every message (remote)
  std::optional<zmq::socket_t> monitor_;  // remote: connection events of sub_
  bool connected_ = false;                // remote: a handshake with the writer succeeded
  std::vector<zmq::message_t> parts_;     // last received frame
  std::atomic<bool> cancelled_{false};
};

}  // namespace vllm::ipc

#endif  // VLLM_IPC_MESSAGE_QUEUE_H_
