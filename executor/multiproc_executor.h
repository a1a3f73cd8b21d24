// MultiprocExecutor: core's Executor over one worker process per tensor-parallel rank
// (vLLM's vllm/v1/executor/multiproc_executor.py).
//
// Create() spawns `vllm-launch worker-proc ...` once per rank (posix_spawn of our own
// binary, through a ProcessLauncher), handing each the broadcast queue's handle, a ZMQ address to
// report readiness on and the tensor-parallel group's spec. Each worker loads its shard and answers
// with its response queue's handle (worker/worker_protocol.h); start-up fails with an error naming
// the rank — its start-up error, its exit status, or the deadline — and leaves no process behind.
//
// ExecuteModel enqueues the step once on the broadcast queue and waits only for the output
// rank's reply; ExecuteModelAsync returns at once with a future that reads the reply.
//
// Pipeline parallelism (pipeline_parallel_size P > 1, the CPU backend): P × TP workers, rank =
// stage × TP + tp_rank (vLLM's order), one collective group per stage. Each rank of a stage
// before the last opens a queue to the same TP rank of the next stage and reports its handle
// when ready; the executor then sends every rank the handles (init_pipeline) and each stage
// attaches to its predecessor's. Every stage reads every step from the broadcast; only the
// last stage samples, and its first rank (world − TP, vLLM's output_rank) answers.
// max_concurrent_batches() is P, so the engine core keeps P steps in the pipeline.
// With `config.device` cuda (or auto on a node with a GPU) and TP > 1, Create also makes an
// ncclUniqueId (this process hosts NCCL's bootstrap root) and sends it on the broadcast queue as
// the first call (init_device) before the workers load their shards; each rank drives GPU `rank`
// (of the devices CUDA_VISIBLE_DEVICES leaves visible) and all-reduces over NCCL. CollectiveRpc
// runs any method on every worker. A monitor thread watches every worker's pidfd: when one dies,
// every pending and later call fails at once with Unavailable naming the rank and how it ended. A
// worker that hangs is reported after `execute_timeout`. Shutdown (and the destructor) closes the
// queue so workers exit, waits for them, and kills any that do not exit within `shutdown_timeout`.
// Workers also die with this process (PR_SET_PDEATHSIG). No shared-memory name outlives start-up
// (ipc/ unlinks them).
//
// Across nodes (the config's nnodes > 1, vLLM's --nnodes): this process is on node 0 and spawns
// ranks 0 .. local_world_size() - 1; the other nodes' `vllm-launch --headless` processes join
// its NodeServer (node_server.h) on --master-addr:--master-port and spawn theirs. Their ranks
// read the broadcast over TCP (the queue's remote readers), report ready over TCP and answer on
// queues this process reads over TCP; a TP group that spans nodes all-reduces through gloo over
// TCP (rendezvous on a store this process hosts). A rank that exits on another node, or a node
// that goes silent for `node_heartbeat_timeout`, fails the executor like a local death. Every
// socket between nodes is CURVE with the cluster key when `cluster_key_file` is given.
//
// Thread-safety: calls come from one thread (the engine's); the monitor is internal.
#ifndef VLLM_EXECUTOR_MULTIPROC_EXECUTOR_H_
#define VLLM_EXECUTOR_MULTIPROC_EXECUTOR_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"
#include "core/engine_core.h"
#include "executor/node_server.h"
#include "executor/process_launcher.h"
#include "ipc/message_queue.h"
#include "kernels/comm/group_spec.h"
#include "worker/worker.h"

namespace vllm::executor {

struct MultiprocExecutorOptions {
  // The engine's resolved config (executor/engine_factory.h): one worker per rank of
  // parallel.world_size(), collectives over parallel.comm_backend; every worker receives it
  // whole on an inherited pipe (config/config_codec.h).
  config::VllmConfig config;
  // The vllm-launch binary; empty: the one next to the running executable.
  std::string worker_binary;
  absl::Duration startup_timeout = absl::Minutes(10);
  // A step or call not answered by then fails (a hung worker), and the executor with it.
  absl::Duration execute_timeout = absl::Minutes(5);
  absl::Duration shutdown_timeout = absl::Seconds(5);
  // Broadcast ring geometry; larger steps travel over ZMQ.
  uint64_t broadcast_chunks = 8;
  uint64_t broadcast_chunk_bytes = 4 << 20;
  // The cluster key file (ipc/curve.h) for the sockets between nodes; empty: plain TCP.
  std::string cluster_key_file;
  // Across nodes: a node that sends nothing for this long is taken as dead.
  absl::Duration node_heartbeat_timeout = absl::Seconds(10);
  // How worker processes are started, watched, signalled and reaped; null: the real system
  // calls (RealProcessLauncher). Unit tests pass a fake to exercise the failure paths. Must
  // outlive the executor.
  ProcessLauncher* launcher = nullptr;
};

class MultiprocExecutor final : public core::Executor {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MultiprocExecutor>> Create(
      const MultiprocExecutorOptions& options);
  ~MultiprocExecutor() override;

  absl::StatusOr<core::KVCacheSpec> GetKVCacheSpec() override;
  absl::StatusOr<int64_t> DetermineAvailableMemory() override;
  absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) override;
  absl::StatusOr<core::ModelRunnerOutput> ExecuteModel(
      const core::SchedulerOutput& scheduler_output) override;
  core::ModelOutputFuture ExecuteModelAsync(const core::SchedulerOutput& scheduler_output) override;
  // Every rank runs it (their collectives must match); rank 0 replies.
  absl::Status ExecuteDummyBatch() override;
  // Every rank frees / re-creates its memory (worker_protocol.h sleep, wake_up); wake_up,
  // which may read the weights again, has the start-up timeout.
  absl::Status Sleep(int32_t level) override;
  absl::Status WakeUp(bool weights, bool kv_cache) override;
  absl::Status CheckHealth() const override { return failure(); }
  // The pipeline's depth: the engine core keeps this many steps in flight.
  int32_t max_concurrent_batches() const override {
    return options_.config.parallel.pipeline_parallel_size;
  }
  // The rank that answers steps: the first rank of the last pipeline stage.
  int32_t output_rank() const {
    return options_.config.parallel.world_size() - options_.config.parallel.tensor_parallel_size;
  }
  void Shutdown() override;

  // Runs `method` with `payload` on every worker (worker_protocol.h) and returns the replies
  // by rank — or only `unique_reply_rank`'s, as the single element. The first error (a worker
  // error, a dead worker, the timeout) is returned instead.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> CollectiveRpc(
      const std::string& method, const std::string& payload, absl::Duration timeout,
      std::optional<int32_t> unique_reply_rank = std::nullopt);

  // Puts `bytes` on the broadcast queue as they are, not framed as a call (tests of the
  // workers' handling of malformed frames).
  [[nodiscard]] absl::Status BroadcastRawForTesting(std::vector<uint8_t> bytes) {
    return broadcast_->Enqueue(bytes);
  }

  // Pids of this node's workers, by rank (tests kill them).
  std::vector<pid_t> worker_pids() const;
  // The first fatal error (a worker died, hung, or broke the protocol), or OK.
  absl::Status failure() const;

 private:
  explicit MultiprocExecutor(const MultiprocExecutorOptions& options);
  absl::Status Start();
  // `comm_specs`: per pipeline stage, its TP group's spec (empty strings for TP 1).
  absl::Status SpawnWorkers(const std::string& ready_address,
                            const std::vector<std::string>& comm_specs);
  // Pipeline parallelism: sends every rank the stage queues' handles (init_pipeline).
  absl::Status LinkStages(absl::Time deadline);
  // Device cuda with TP > 1: waits for every worker to attach to the broadcast queue and
  // sends them `nccl_id` as the first call (worker_protocol.h, init_device).
  absl::Status SendDeviceInit(zmq::socket_t& pull, const std::string& nccl_id, absl::Time deadline);
  // The start-up error a worker reported on `pull` within a short grace period, else `status`
  // (a worker that fails exits at once: the monitor's "exited" may win the race).
  absl::Status StartupErrorOr(zmq::socket_t& pull, absl::Status status);
  absl::Status AwaitReady(zmq::socket_t& pull, absl::Time deadline);
  // Enqueues a call; returns its id.
  absl::StatusOr<uint64_t> Broadcast(const std::string& method, absl::Span<const uint8_t> payload,
                                     int32_t reply_rank);
  // Reads rank's reply to call_id (dropping replies to older calls) and hands its payload, in
  // the ring, to `take`, whose status it returns.
  absl::Status AwaitReply(int32_t rank, uint64_t call_id, const std::string& method,
                          absl::Time deadline, absl::FunctionRef<absl::Status(ipc::ByteSpan)> take);
  // The same, with the payload copied out.
  absl::StatusOr<std::string> AwaitReply(int32_t rank, uint64_t call_id, const std::string& method,
                                         absl::Time deadline);
  // execute_model: encodes the step into step_bytes_ and broadcasts it (the output rank answers).
  absl::StatusOr<uint64_t> BroadcastStep(const core::SchedulerOutput& so);
  // Reads the output rank's answer to step call_id, decoded straight from its ring.
  absl::StatusOr<core::ModelRunnerOutput> AwaitStepOutput(uint64_t call_id);
  // Records the first fatal error and cancels every queue wait.
  void Fail(const absl::Status& status);
  // Maps a queue error to the recorded failure when there is one.
  absl::Status Explain(const absl::Status& status) const;
  void MonitorLoop();
  bool attached(int32_t rank) const;
  // "worker rank 1 (pid 42)", with its node when the engine spans nodes.
  std::string DescribeRank(int32_t rank) const;
  // "<method> timed out after N (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS): " and the rank that holds
  // it up: a rank of this node that is stopped or in uninterruptible sleep (/proc), else
  // `waited_rank` ("may be hung"), else (-1: the broadcast was not taken) `detail`.
  std::string DescribeTimeout(const std::string& method, int32_t waited_rank,
                              absl::string_view detail) const;
  // Per pipeline stage, its TP group's spec: made here when the group is on this node or
  // spans nodes (gloo through a store here), empty when another node makes it.
  absl::StatusOr<std::vector<std::string>> MakeCommGroups();
  // Binds the ready socket: a private ipc:// file on one node, a TCP port across nodes.
  absl::StatusOr<std::string> BindReady(zmq::socket_t& pull, ipc::ScopedIpcAddress& file);
  void KillAndReap();

  const MultiprocExecutorOptions options_;
  ProcessLauncher& launcher_;
  // Set during start-up, cleared by KillAndReap; elements are assigned under mu_ (the monitor
  // cancels them from its thread). The engine thread uses them without the lock.
  std::unique_ptr<ipc::MessageQueueWriter> broadcast_;
  std::vector<std::unique_ptr<ipc::MessageQueueReader>> responses_;
  // tensor_parallel_size > 1: one group per pipeline stage.
  std::vector<std::unique_ptr<kernels::comm::CommGroup>> groups_;
  std::vector<std::string> stage_handles_;  // by rank, from the ready messages
  std::vector<pid_t> pids_;                 // this node's ranks (0 .. local_world_size() - 1)
  std::vector<pid_t> rank_pids_;            // every rank's, from its ready message
  std::unique_ptr<NodeServer> nodes_;       // across nodes only
  std::optional<ipc::CurveKeys> curve_;
  std::string bind_host_;  // across nodes: --master-addr's numeric address (this node's)
  std::vector<int> pidfds_;
  int stop_fd_ = -1;  // eventfd that ends the monitor
  std::thread monitor_;
  uint64_t next_call_id_ = 1;
  // Reused per call (the engine thread only): the call's framed header and the encoded step;
  // a step buffer grown past kMaxKeptStepBytes is released after use.
  static constexpr size_t kMaxKeptStepBytes = size_t{4} << 20;
  std::string call_prefix_;
  std::string step_bytes_;
  bool shut_down_ = false;

  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // exits are expected from now on
  std::vector<bool> exited_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_MULTIPROC_EXECUTOR_H_
