// BlockServer: the prefill (serving) side of our NixlConnector-shaped KV transfer. It serves
// the blocks of finished requests that the scheduler holds for a decode instance, over ZMQ
// (a ROUTER bound to tcp://host:port), to BlockReaders (kv_transfer/block_reader.h) speaking
// the frames of kv_wire.h: HELLO → WELCOME/REFUSE, READ → DATA/ERROR, DONE → ACK.
//
// Rules it keeps (../shared/DESIGN.md's hardening rules):
//   - With a cluster key file, the socket is a CURVE server that admits only clients holding
//     the cluster key (ipc/curve.h); without one it warns when the host is not loopback.
//   - A reader must say HELLO with the server's exact KvLayout (every field, tp_rank included)
//     before it may READ; a mismatch gets REFUSE naming the field ("block_size 16 != 32",
//     the reader's value first).
//   - It serves READ only for held requests and only their block ids; anything else gets
//     ERROR (logged once per request id), never a crash.
//   - Bounded: a header frame over kMaxHeaderBytes drops the connection (ZMQ_MAXMSGSIZE); a
//     READ asks for at most BlocksPerDataMessage(layout) blocks, so every DATA is within
//     kMaxDataBytes; each peer may keep limits.max_inflight_reads_per_peer READs unanswered
//     (announced in WELCOME): at most that many + 2 messages wait in its send queue
//     (ZMQ_SNDHWM; READs meeting a full queue wait, unanswered and uncopied, up to that many
//     more; past that they get ERROR), so a reader that never reads costs at most
//     (limit + 2) * 16 MiB; at most
//     limits.max_peers peers have said HELLO (a new one evicts the longest idle); at most
//     limits.max_held_requests requests are held.
//
// Block bytes are copied out of the cache under the server's lock, so Release() returning
// means no copy of the request's blocks is in progress or will start: the caller may reuse
// them at once.
//
// Thread-safety: Hold, Release, TakeFinished, stats and the accessors may be called from any
// thread; the server's own thread ("kv-block-server") owns the socket.
#ifndef VLLM_KV_TRANSFER_BLOCK_SERVER_H_
#define VLLM_KV_TRANSFER_BLOCK_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kv_transfer/kv_cache_view.h"
#include "kv_transfer/kv_wire.h"

namespace vllm::kv_transfer {

struct BlockServerLimits {
  // Readers (connections that said HELLO) remembered at once.
  int32_t max_peers = 64;
  // READs one peer may keep unanswered (1..kMaxInflightReads).
  int32_t max_inflight_reads_per_peer = 4;
  // Requests held at once (Hold beyond: ResourceExhausted).
  int32_t max_held_requests = 1 << 16;
  // A READ (or DONE) may arrive before the request is held: the prefill engine answered the
  // client at the end of a step and registers the hold at the start of its next one. Such a
  // READ waits this long for the Hold before it is refused (a request released or read already
  // is refused at once).
  absl::Duration hold_grace = absl::Seconds(5);
};

struct BlockServerOptions {
  // Address to listen at (an address of this node that readers can reach; not a wildcard).
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see BlockServer::port())
  // This engine's id (vLLM's engine_id), announced in WELCOME.
  std::string engine_id;
  // The cache to serve from (borrowed: must outlive the server).
  KvCacheView view;
  // --cluster-key-file: when set, CURVE with the cluster key (ipc/curve.h).
  std::string cluster_key_file;
  BlockServerLimits limits;
};

class BlockServer {
 public:
  // Counters since start (for tests, benchmarks and logs).
  struct Stats {
    int64_t reads_served = 0;   // DATA messages sent
    int64_t blocks_served = 0;  // blocks in them
    int64_t errors_sent = 0;    // ERROR replies
    int64_t refused = 0;        // REFUSE replies
    int64_t dropped = 0;        // replies dropped (peer gone or over its in-flight bound)
    int64_t awaited_hold = 0;   // requests a READ found not held yet (then waited, hold_grace)
  };

  // Validates the options (view, engine id length, limits), loads the key file, binds and
  // starts the thread. InvalidArgument / the key file's error / Unavailable when it cannot
  // bind.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BlockServer>> Start(
      BlockServerOptions options);
  // Stops the thread and closes the socket (readers then see the connection drop).
  ~BlockServer();
  BlockServer(const BlockServer&) = delete;
  BlockServer& operator=(const BlockServer&) = delete;

  // "tcp://127.0.0.1:43125" and its port.
  const std::string& endpoint() const { return endpoint_; }
  int port() const { return port_; }
  const std::string& engine_id() const { return options_.engine_id; }

  // Makes blocks `block_ids` of request `req_id` readable (a finished prefill whose blocks the
  // scheduler keeps for a decode instance). Holding a held request again replaces its blocks.
  // InvalidArgument for an empty or over-long id or a block id outside the view;
  // ResourceExhausted past limits.max_held_requests.
  [[nodiscard]] absl::Status Hold(const std::string& req_id, const std::vector<int32_t>& block_ids)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stops serving `req_id` (not an error when it is not held). Returns once no copy of its
  // blocks is in progress; none starts after. The request is not reported by TakeFinished
  // afterwards.
  void Release(const std::string& req_id) ABSL_LOCKS_EXCLUDED(mu_);

  // The requests whose reader sent DONE since the last call (each once); they are no longer
  // held (their blocks may be freed).
  std::vector<std::string> TakeFinished() ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const;

 private:
  struct Peer {
    std::string engine_id;
    std::string address;  // the peer's IP, for logs
    absl::Time last_active;
    // READs not answered yet because the peer's send queue was full, in arrival order (at most
    // limits.max_inflight_reads_per_peer).
    std::deque<KvRead> deferred;
  };

  explicit BlockServer(BlockServerOptions options);
  void Run();
  void HandleMessage(const std::string& identity, const std::string& address,
                     std::span<const uint8_t> header);
  void HandleHello(const std::string& identity, const std::string& address, const KvHello& hello);
  void HandleRead(const std::string& identity, Peer& peer, KvRead read);
  // Answers the deferred READs, in order, while the peers' send queues take them.
  void FlushDeferred();
  // Sends the answer to `read` (DATA, or ERROR) unless the peer's send queue is full or the
  // request is not held yet within limits.hold_grace (false: try again later).
  bool TryServe(const std::string& identity, const KvRead& read);
  // Whether `read`'s request is not held yet but may still be (see hold_grace).
  bool AwaitingHold(const KvRead& read) ABSL_LOCKS_EXCLUDED(mu_);
  // Remembers a request that was released or read (bounded, oldest forgotten first).
  void RememberGone(const std::string& req_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleDone(const std::string& identity, const KvDone& done);
  void EvictLongestIdlePeer();
  // Copies the READ's blocks under mu_ into `data`; an error is the ERROR reason.
  absl::Status CopyBlocks(const KvRead& read, zmq::message_t* data) ABSL_LOCKS_EXCLUDED(mu_);
  void SendError(const std::string& identity, uint64_t read_id, const std::string& reason);
  // Sends [identity, header(message), data?] without waiting; counts a drop when it cannot.
  void Send(const std::string& identity, const KvMessage& message, zmq::message_t* data);
  // Logs `message` at warning level the first time `key` is seen (bounded memory).
  void WarnOnce(const std::string& key, const std::string& message);

  const BlockServerOptions options_;
  std::string endpoint_;
  int port_ = 0;
  zmq::socket_t socket_;  // used by the thread only once it runs
  int wake_fd_ = -1;      // eventfd: the destructor wakes the thread
  std::atomic<bool> stop_{false};
  std::thread thread_;

  // The thread's own state.
  absl::flat_hash_map<std::string, Peer> peers_;
  absl::flat_hash_set<std::string> warned_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<int32_t>> held_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> finished_ ABSL_GUARDED_BY(mu_);
  // Requests released or read lately (their READs fail at once), oldest first.
  absl::flat_hash_set<std::string> gone_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> gone_order_ ABSL_GUARDED_BY(mu_);
  // DONE that arrived before the Hold (a decode side that needed no block): the Hold then
  // finishes at once. Bounded like gone_.
  absl::flat_hash_set<std::string> early_done_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> early_done_order_ ABSL_GUARDED_BY(mu_);
  // When a READ first found its request not held.
  absl::flat_hash_map<std::string, absl::Time> unheld_since_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vllm::kv_transfer

#endif  // VLLM_KV_TRANSFER_BLOCK_SERVER_H_
