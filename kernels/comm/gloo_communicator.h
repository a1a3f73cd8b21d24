// GlooCommunicator: gloo's all-reduce over its TCP transport. Ranks meet through a gloo
// FileStore in a directory (one node; the CommGroup's creator makes and removes it) or through
// the creator's StoreServer (tcp_store.h; ranks on several nodes, CURVE-authenticated with the
// cluster key). Each rank's device binds CommOptions::hostname (default 127.0.0.1), its address
// is published in the store and gloo connects a full mesh of TCP pairs. Those pair connections
// carry the all-reduce data as plain, unauthenticated TCP (as PyTorch's gloo does): across
// nodes their network must be trusted.
//
// gloo reports errors by throwing (gloo::IoException for a broken connection or a timeout,
// gloo::EnforceNotMet for violated preconditions); every call into gloo is wrapped and turned
// into a Status, no exception leaves this class.
//
// Side effect: Join() sets SIGPIPE to SIG_IGN if it is at its default action, because gloo
// writes to sockets without MSG_NOSIGNAL and a dead peer would otherwise kill this process.
#ifndef VLLM_KERNELS_COMM_GLOO_COMMUNICATOR_H_
#define VLLM_KERNELS_COMM_GLOO_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/comm/group_spec.h"
#include "kernels/communicator.h"

namespace gloo {
class Context;
}

namespace vllm::kernels::comm {

class GlooCommunicator final : public Communicator {
 public:
  // Connects rank `rank` of `world_size` through `store`: a FileStore directory (an absolute
  // path) or a StoreServer's "tcp://<host>:<port>" (with options.curve as the client's key).
  // The device binds options.hostname. Every wait (for the store, for peers' addresses, for
  // connections) ends by `join_timeout` with DeadlineExceeded. Unavailable when a connection
  // fails, NotFound when the directory does not exist, InvalidArgument when the device cannot
  // bind options.hostname (or it is empty).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Join(
      const std::string& store, int32_t world_size, int32_t rank, absl::Duration join_timeout,
      const CommOptions& options);

  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_size_; }
  // Not thread-safe (one thread per rank). Errors: Unavailable (a connection broke: a peer
  // died), DeadlineExceeded (gloo's timeout, CommOptions::collective_timeout), Internal (any
  // other gloo error), FailedPrecondition after an earlier error.
  [[nodiscard]] absl::Status AllReduceSum(float* data, size_t count) override;

 private:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int32_t rank, int32_t world_size,
                   const CommOptions& options);

  std::shared_ptr<gloo::Context> context_;
  int32_t rank_;
  int32_t world_size_;
  absl::Duration collective_timeout_;
  uint32_t tag_ = 0;     // gloo tag of the next operation (identical on all ranks)
  absl::Status broken_;  // first error; the group is unusable once set
};

}  // namespace vllm::kernels::comm

#endif  // VLLM_KERNELS_COMM_GLOO_COMMUNICATOR_H_
