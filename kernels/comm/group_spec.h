// Describing, creating and joining a tensor-parallel communicator group.
//
//   executor (rank-less)                      worker process of rank r
//   ------------------------------------      -------------------------------------------
//   auto group = CommGroup::Create(kShm, N);
//   hand group->spec().Encode() to workers -> spec = CommGroupSpec::Decode(text)
//                                             comm = JoinGroup(spec, r, join_timeout)
//                                             comm->AllReduceSum(...) ... (collectively)
//   group.reset() once workers are gone        (removes whatever the backend left behind)
//
// Backends: kShm (ShmCommunicator: our shared-memory all-reduce, fast for small messages; one
// node) and kGloo (GlooCommunicator: gloo's ring all-reduce over TCP). kGloo ranks meet either
// through a FileStore directory (one node; the default) or, when the creator sets
// CommGroupOptions::store_host, through a StoreServer (tcp_store.h) that the creator runs: then
// the ranks may be on several nodes, each binding gloo's TCP device to CommOptions::hostname.
// Across nodes the rendezvous is authenticated and encrypted with CURVE when the creator and
// the ranks are given the cluster key (CommGroupOptions::curve, CommOptions::curve); gloo's own
// pair connections, which carry the all-reduce data, are plain TCP without authentication (as
// with PyTorch's / vLLM's gloo), so the nodes' network must be trusted.
#ifndef VLLM_KERNELS_COMM_GROUP_SPEC_H_
#define VLLM_KERNELS_COMM_GROUP_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ipc/curve.h"
#include "kernels/communicator.h"

namespace vllm::ipc {
class ShmSegment;
}

namespace vllm::kernels::comm {

class StoreServer;

// A serialisable description of a group: everything a rank needs to join it. A value type.
struct CommGroupSpec {
  enum class Backend { kShm, kGloo };

  Backend backend = Backend::kShm;
  int32_t world_size = 0;
  // kShm: the shared-memory segment's name (/dev/shm/<name>; [A-Za-z0-9._-], 1..200 chars).
  // kGloo: an absolute path of the FileStore rendezvous directory (no control characters,
  // at most 1024 chars), or the address of a StoreServer, "tcp://<host>:<port>" (host: 1..253
  // chars of [A-Za-z0-9.-], or a bracketed IPv6 address "[...]" of [0-9A-Fa-f:.]; port
  // 1..65535 in decimal without leading zeros).
  std::string name;

  // "vllm-comm/1;<shm|gloo>;<world_size>;<name>". The name is last and may contain ';'.
  [[nodiscard]] std::string Encode() const;
  // Parses Encode()'s output. InvalidArgument for anything malformed: wrong prefix or version,
  // unknown backend, world size outside [1, kMaxWorldSize], a name Validate() rejects, input
  // longer than kMaxEncodedBytes. Never reads past `text`.
  [[nodiscard]] static absl::StatusOr<CommGroupSpec> Decode(absl::string_view text);
  // OK if the fields are within the limits Decode() enforces.
  [[nodiscard]] absl::Status Validate() const;

  static constexpr int32_t kMaxWorldSize = 32;
  static constexpr size_t kMaxEncodedBytes = 2048;

  friend bool operator==(const CommGroupSpec&, const CommGroupSpec&) = default;
};

// "shm" / "gloo".
absl::string_view BackendName(CommGroupSpec::Backend backend);

// Tunables of a group, chosen by its creator.
struct CommGroupOptions {
  // kShm: bytes of one rank's slot in each of the two buffers (a multiple of 64). Messages
  // larger than this are all-reduced in chunks of this size. The segment holds
  // 8 KiB + 2 * world_size * shm_slot_bytes.
  size_t shm_slot_bytes = size_t{1} << 20;
  // kGloo: empty, the ranks meet in a FileStore directory (all ranks on this node). Otherwise
  // an address of this node that every rank's node can reach (an IP, host name or interface
  // name, not a wildcard): the group runs a StoreServer bound there, and the spec's name is its
  // address "tcp://<ip>:<port>". kShm is node-local and refuses a store_host (InvalidArgument).
  std::string store_host;
  // With store_host: the cluster key; the StoreServer then admits only ranks holding it
  // (CommOptions::curve) and encrypts the rendezvous. Ignored without store_host.
  std::optional<ipc::CurveKeys> curve;
};

// How a rank behaves inside the group.
struct CommOptions {
  // Each AllReduceSum must complete within this (from its start), else DeadlineExceeded. A
  // peer that dies is reported sooner: shm within ~50 ms (liveness locks), gloo as soon as
  // its TCP connection breaks. kGloo also uses it for gloo's own operation timeout.
  absl::Duration collective_timeout = absl::Seconds(120);
  // kGloo: the address this rank's gloo TCP device binds and advertises to its peers (an IP or
  // host name of this node that the other ranks' nodes can reach). Not empty.
  std::string hostname = "127.0.0.1";
  // kGloo with a tcp:// spec: the cluster key for the store (required when the creator gave
  // CommGroupOptions::curve; a rank without it is not admitted and its join times out).
  std::optional<ipc::CurveKeys> curve;
};

// The creator's handle on a group (the executor holds it, it joins no rank). Create() makes a
// unique name and whatever the backend needs before ranks can join: kShm creates and
// initialises the shared-memory segment (and removes segments left by creators that died);
// kGloo creates an empty rendezvous directory, or with CommGroupOptions::store_host starts a
// StoreServer, which the group keeps serving until it is destroyed. The destructor removes what
// is left: the shm name if not every rank joined (the ranks unlink it themselves once all have
// attached, so nothing stays in /dev/shm while the group runs), the gloo directory and its
// files, or stops the StoreServer.
//
// Not thread-safe; destroy it once the ranks are done (or dead) — ranks that already joined
// keep working, later joins fail with NotFound.
class CommGroup {
 public:
  // InvalidArgument for world_size outside [1, CommGroupSpec::kMaxWorldSize], a bad slot
  // size, or a store_host with kShm; ResourceExhausted / Internal when the segment or directory
  // cannot be made; StoreServer::Start's errors for the store.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CommGroup>> Create(
      CommGroupSpec::Backend backend, int32_t world_size, const CommGroupOptions& options = {});
  ~CommGroup();
  CommGroup(const CommGroup&) = delete;
  CommGroup& operator=(const CommGroup&) = delete;

  const CommGroupSpec& spec() const { return spec_; }

 private:
  CommGroup() = default;

  CommGroupSpec spec_;
  std::unique_ptr<ipc::ShmSegment> segment_;  // kShm: the creator's mapping (unlinks on exit)
  std::unique_ptr<StoreServer> store_;        // kGloo with store_host: the rendezvous
};

// Joins the group as `rank` (0 <= rank < spec.world_size); returns once every rank has joined
// or fails after `join_timeout` with DeadlineExceeded naming the ranks that did not join.
// Unavailable if a rank that had joined dies meanwhile; NotFound if the group does not exist
// (its creator is gone, or every rank already joined; with a tcp:// kGloo spec an unreachable
// store is instead DeadlineExceeded saying it did not answer); FailedPrecondition if `rank` is
// taken; InvalidArgument for a rank out of range, a spec that does not match the group, or an
// empty CommOptions::hostname.
// The communicator's AllReduceSum follows `options` (see CommOptions); after any error the
// communicator stays unusable (FailedPrecondition). Each rank's communicator is used by one
// thread.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> JoinGroup(
    const CommGroupSpec& spec, int32_t rank, absl::Duration join_timeout,
    const CommOptions& options = {});

}  // namespace vllm::kernels::comm

#endif  // VLLM_KERNELS_COMM_GROUP_SPEC_H_
