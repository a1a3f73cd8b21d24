// BlockReader: the decode (reading) side of our NixlConnector-shaped KV transfer. For each
// submitted LoadSpec its thread reads the remote blocks from the prefill worker's BlockServer
// (kv_transfer/block_server.h, frames of kv_wire.h), verifies them, writes them into the local
// cache, and tells the server it is DONE so that the server frees them.
//
// Connections: one ZMQ DEALER per remote host:port, made on first use and reused by every
// later transfer to it; HELLO/WELCOME once per connection (the server's layout must equal ours
// in every field, its engine id must equal each LoadSpec's remote_engine_id). A connection
// that fails (refused, dropped, CURVE refused, REFUSE, a connection-level ERROR, silence past
// the timeout) is closed and every transfer on it fails; the next Submit to that address makes
// a new one. Per connection at most min(max_inflight_reads, the server's) READs are unanswered;
// transfers on one connection take turns, one READ (<= 16 MiB) at a time.
//
// Guarantees:
//   - Every block is checked (size, request, position, XXH3-64) before it is copied; a block
//     whose checksum fails is never copied (nor is the rest of its message). A failed
//     request's blocks may have been partly written: the scheduler recomputes or fails it.
//   - Every submitted request is reported exactly once by TakeResults (finished or failed)
//     unless it is cancelled. A failure logs one warning naming the request and the reason.
//   - A request that finished, failed for a reason other than the server (engine id or
//     layout mismatch, refused, unreachable), or was cancelled gets DONE sent, when its
//     connection is up, so the server releases its blocks.
//   - After Cancel(req_id) returns, nothing is written into that request's local blocks.
//
// Thread-safety: Submit, TakeResults and Cancel may be called from one caller thread (or
// several, serialised by the caller); the reader's own thread ("kv-block-reader") does the rest.
#ifndef VLLM_KV_TRANSFER_BLOCK_READER_H_
#define VLLM_KV_TRANSFER_BLOCK_READER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kv_transfer/kv_cache_view.h"
#include "kv_transfer/types.h"

namespace vllm::kv_transfer {

struct BlockReaderOptions {
  // This engine's id (vLLM's engine_id), sent in HELLO.
  std::string engine_id;
  // The local cache to write into (borrowed: must outlive the reader).
  KvCacheView view;
  // --cluster-key-file: when set, CURVE with the cluster key (ipc/curve.h).
  std::string cluster_key_file;
  // A transfer that has not finished this long after Submit fails (connecting included).
  absl::Duration transfer_timeout = absl::Seconds(30);
  // Unanswered READs per connection (1..kMaxInflightReads; the server's WELCOME may lower it).
  int32_t max_inflight_reads = 4;
  // Connections kept at once; a new address past this closes the least recently used idle one
  // (a transfer that finds none idle fails).
  int32_t max_connections = 64;
  // Blocks per READ; 0: as many as fit one DATA message (BlocksPerDataMessage). Smaller values
  // only make more, smaller messages (tests use 1).
  int32_t max_blocks_per_read = 0;
};

class BlockReader {
 public:
  struct Results {
    std::vector<std::string> finished;  // req ids whose blocks are all in the local cache
    std::vector<std::string> failed;    // req ids whose load failed (see the log line)
  };

  // Validates the options, loads the key file and starts the thread. InvalidArgument / the key
  // file's error.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BlockReader>> Start(
      BlockReaderOptions options);
  // Stops the thread and closes the connections; unfinished transfers are dropped unreported.
  ~BlockReader();
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  // Starts loading `spec` (req_id, local_block_ids, remote_block_ids of the same length,
  // remote_host, remote_port, remote_engine_id, remote_request_id) in the background; its
  // result comes from TakeResults. InvalidArgument, and nothing queued, for a malformed spec
  // (lengths differ, a local block id outside the view, an empty or over-long id or host, a
  // port outside 1..65535, more than kMaxRemoteBlockIds blocks); AlreadyExists while a
  // request of that id is loading or its result is untaken.
  [[nodiscard]] absl::Status Submit(const LoadSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);

  // The requests that finished or failed since the last call.
  Results TakeResults() ABSL_LOCKS_EXCLUDED(mu_);

  // The request was aborted while loading: its result is dropped (also one not yet taken),
  // nothing more is written into its blocks once this returns, and DONE is still sent so the
  // server releases. Not an error when the request is unknown.
  void Cancel(const std::string& req_id) ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // Requests submitted and not yet reported (nor cancelled).
  size_t num_pending() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Loop;  // the thread's state (block_reader.cc)
  // A submission; `generation` tells a request apart from an earlier one of the same id.
  struct SubmitCommand {
    LoadSpec spec;
    uint64_t generation = 0;
  };
  struct CancelCommand {
    std::string req_id;
  };
  using Command = std::variant<SubmitCommand, CancelCommand>;

  explicit BlockReader(BlockReaderOptions options);
  void Wake();
  void Run();
  // For the thread: takes the queued commands.
  std::deque<Command> TakeCommands() ABSL_LOCKS_EXCLUDED(mu_);
  // For the thread: reports a result unless the request (this generation) was cancelled.
  void Report(const std::string& req_id, uint64_t generation, bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // For the thread: copies verified blocks into the local cache unless the request was
  // cancelled (under write_mu_, which Cancel takes too). False when cancelled.
  bool WriteBlocks(const std::string& req_id, const std::vector<int32_t>& local_ids,
                   const uint8_t* data) ABSL_LOCKS_EXCLUDED(write_mu_);
  // For the thread: the cancel of `req_id` has been applied.
  void ForgetCancel(const std::string& req_id) ABSL_LOCKS_EXCLUDED(write_mu_);

  const BlockReaderOptions options_;
  int wake_fd_ = -1;  // eventfd: Submit, Cancel and the destructor wake the thread
  std::atomic<bool> stop_{false};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;

  // Held while blocks are copied into the cache; Cancel takes it to mark a request cancelled.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::flat_hash_set<std::string> cancelled_ ABSL_GUARDED_BY(write_mu_);

  mutable absl::Mutex mu_;
  std::deque<Command> commands_ ABSL_GUARDED_BY(mu_);
  // Submitted, not cancelled, result not yet taken: req id -> generation.
  absl::flat_hash_map<std::string, uint64_t> active_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  Results results_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vllm::kv_transfer

#endif  // VLLM_KV_TRANSFER_BLOCK_READER_H_
