// EngineCoreClient: the frontend's side of the engine-core protocol (vLLM's
// vllm/v1/engine/core_client.py, AsyncMPClient). It binds the handshake, input (ROUTER) and
// output (PULL) sockets, completes the HELLO → CONFIG → READY handshake with each engine
// process, sends requests, aborts and utility calls, and receives EngineCoreOutputs on an
// internal thread. The wire format is documented in core/engine_core_proc.h.
//
// Data parallelism (vLLM's DPLBAsyncMPClient): with several engines, PickEngine() chooses the
// engine for each new request (DpLoadBalancer). Its figures come from two places, the newer
// (by the engine's own clock) winning per engine: the DP coordinator's publications (vLLM's
// source; core/dp_coordinator.h, a SUB socket polled by the receive thread) and the
// scheduler figures every engine sends with its outputs (and alone when they change) — see
// docs/DECISIONS.md. Aborts and utility calls name the engine. The coordinator's report and
// wave addresses go to every engine in CONFIG.
//
// Failure is per engine: when an engine reports EXECUTOR_FAILED ('F'), or its supervisor
// calls MarkEngineDead() (the process died), calls to that engine fail with an error naming
// it, GetOutputs() returns one event saying so (its requests must be failed), and it is never
// picked again; the others go on. Once every engine is dead, failure() and GetOutputs() return
// the error — no caller waits forever.
//
// Sources: engine_core_handshake.cc (sockets, handshake, engine registry, liveness) and
// engine_core_client.cc (requests, aborts, utility calls, outputs, load balancing).
//
// Thread-safety: all methods are thread-safe. GetOutputs() is meant for one consumer thread
// (the output processor); several would split the outputs between them.
#ifndef VLLM_FRONTEND_ENGINE_ENGINE_CORE_CLIENT_H_
#define VLLM_FRONTEND_ENGINE_ENGINE_CORE_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/engine_core_types.h"
#include "frontend/engine/dp_load_balancer.h"
#include "ipc/curve.h"
#include "ipc/zmq_util.h"

namespace vllm::frontend {

// Where the engines reach the client.
struct EngineCoreClientOptions {
  int32_t num_engines = 1;
  // Empty: one node; private ipc:// sockets, released once every engine is connected.
  // Otherwise the head node's address (an IP or a name that resolves; vLLM's
  // --data-parallel-address): the handshake socket is bound at tcp://<address>:handshake_port
  // (--data-parallel-rpc-port), input and output at free ports of that address, reported to
  // each engine in CONFIG. The handshake socket stays open: an engine whose node restarted
  // joins again.
  std::string tcp_address;
  int32_t handshake_port = 0;
  // TCP only: CURVE with the cluster key (ipc/curve.h) on every socket; engines must hold it.
  std::optional<ipc::CurveKeys> curve;
  // --api-server-count N: this client is API server `client_index` of `client_count` (the
  // balancer counts the others' load as `client_count` × its own until it has figures).
  int32_t client_count = 1;
  int32_t client_index = 0;
  // Hybrid / external load balancing: engine i is data-parallel rank first_rank + i (its
  // messages name that rank; the engines themselves use index i on the wire).
  int32_t first_rank = 0;
  // TCP, API server 0 of several: the other API servers' handshake ports (at the same
  // address), named in CONFIG so that an engine that knows only the head's address joins
  // every API server.
  std::vector<int32_t> peer_handshake_ports;
  // TCP only: an engine from which nothing (outputs, heartbeats: one a second) arrived for
  // this long is dead — its node or process is gone.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // The DP coordinator (empty: none): the balancer subscribes to `coordinator_publish` and
  // takes an engine's figures from it when they are newer than the engine's own outputs';
  // CONFIG tells each engine `coordinator_stats`
  // (its reports) and `coordinator_waves` (lockstep; empty: off). CURVE as above over TCP.
  // A udp:// `coordinator_stats` comes with the key that seals each report (32 bytes).
  std::string coordinator_publish;
  std::string coordinator_stats;
  std::string coordinator_waves;
  std::string coordinator_report_key;
  // Called once each time every engine has become dead (failure() turns non-OK), with that
  // error; from whichever thread reported the last death, with the client's locks held (it
  // must not call the client). The serve path uses it for VLLM_KEEP_ALIVE_ON_ENGINE_DEATH.
  std::function<void(const absl::Status&)> on_every_engine_dead;
};

class EngineCoreClient {
 public:
  struct EngineInfo {
    int32_t num_gpu_blocks = 0;
    int32_t max_model_len = 0;
    std::string host;  // the node it reported (HELLO)
  };

  // Binds the sockets (private ipc:// socket files, ipc/ipc_address.h). `num_engines` engines
  // (data-parallel ranks 0 .. num_engines - 1) must then connect; WaitForEngines() removes
  // the files once they have.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EngineCoreClient>> Create(
      int32_t num_engines);
  // Either mode (EngineCoreClientOptions). Errors: the address does not resolve, the port
  // cannot be bound (named in the message).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EngineCoreClient>> Create(
      const EngineCoreClientOptions& options);
  int32_t num_engines() const { return num_engines_; }
  bool tcp() const { return !options_.tcp_address.empty(); }
  ~EngineCoreClient();

  // Give this to each engine process (--handshake-address).
  const std::string& handshake_address() const { return handshake_address_; }

  // Completes the handshake with every engine. `check` is polled while waiting (e.g. to see
  // whether an engine process died) and its error is returned. DeadlineExceeded names the
  // engines that did not report; an engine's FAILED message is returned as its error (TCP:
  // naming its rank and node; also when a joining engine goes silent).
  // Also waits for each engine's "REGISTER" frame on the input socket, so that the first
  // request cannot race the engine's connection (EHOSTUNREACH on a router_mandatory ROUTER),
  // and for each engine's output connection; then removes the sockets' files.
  [[nodiscard]] absl::Status WaitForEngines(absl::Time deadline,
                                            const std::function<absl::Status()>& check);
  // What each engine reported when it joined (index = data-parallel rank).
  std::vector<EngineInfo> engines() const;

  // The engine for a new request (counted as in flight there until its next figures come);
  // Unavailable when every engine is dead.
  [[nodiscard]] absl::StatusOr<int32_t> PickEngine();
  // Sends a request to engine `data_parallel_rank` (or engine 0). Errors: the engine is dead.
  [[nodiscard]] absl::Status AddRequest(const core::EngineCoreRequest& request);
  [[nodiscard]] absl::Status AbortRequests(std::span<const std::string> request_ids,
                                           int32_t engine_index = 0);
  // Runs a utility method on an engine; returns its msgpack result. `args`: the method's
  // msgpack arguments (sent as the call's bin), may be empty.
  [[nodiscard]] absl::StatusOr<std::string> CallUtility(const std::string& method,
                                                        absl::Duration timeout,
                                                        int32_t engine_index = 0,
                                                        std::string_view args = {});

  // One outputs frame received from an engine.
  struct ReceivedOutputs {
    core::EngineCoreOutputs outputs;
    // Not OK when the frame could not be decoded (the client has logged why; `outputs` is
    // then empty). The requests in `failed_request_ids` (recovered from the damaged frame)
    // lost an output and must be failed with this status; when the list is empty, any
    // request in flight may have lost one. The engine itself stays usable.
    absl::Status decode_error;
    std::vector<std::string> failed_request_ids;
    // Set when an engine died (then nothing else is): every request sent to `dead_engine`
    // that has not finished must end with `engine_failure` (it names the engine).
    std::optional<int32_t> dead_engine;
    absl::Status engine_failure;
  };

  // Waits for the next outputs frame. DeadlineExceeded when none came in time; the engine's
  // failure once it is dead and everything it sent has been consumed. Frames are never
  // dropped silently: an undecodable one is returned with decode_error set.
  [[nodiscard]] absl::StatusOr<ReceivedOutputs> GetOutputs(absl::Time deadline);

  // Records that an engine is gone (its process exited); see "Failure" above.
  void MarkEngineDead(int32_t engine_index, const absl::Status& why);
  // OK while at least one engine lives; the error once every engine is dead.
  absl::Status failure() const;
  // OK while engine `engine_index` lives; why it died otherwise.
  absl::Status EngineFailure(int32_t engine_index) const;

 private:
  EngineCoreClient() = default;
  [[nodiscard]] absl::Status WaitForRegistrations(absl::Time deadline,
                                                  const std::function<absl::Status()>& check);
  [[nodiscard]] absl::Status WaitForEnginesTcp(absl::Time deadline,
                                               const std::function<absl::Status()>& check);
  void ReceiveLoop();
  // TCP: one output frame (any kind) from the output socket.
  void HandleOutputFrame(std::vector<zmq::message_t>& parts);
  // TCP: the handshake of joining engines (HELLO → CONFIG or REJECT, READY, FAILED).
  void HandleHandshakeFrame(std::vector<zmq::message_t>& parts);
  // TCP: reads the REGISTER frames engines send on the input socket (under send_mu_).
  void DrainRegistrations();
  // TCP: marks engines that went silent dead; a joining engine that registered and is READY
  // becomes live.
  void UpdateEngineStates();
  // TCP: one heartbeat to every live engine (they take a silent head as gone).
  void SendHeartbeats();
  // The coordinator's publications waiting on its SUB socket: the newest feeds the balancer.
  void ReceivePublications();
  // CONFIG for a joining engine.
  std::string ConfigFrame() const;
  void SendHandshake(const zmq::message_t& peer, std::string_view kind, std::string payload);
  void ReceiveUtilityReply(const zmq::message_t& payload);
  // Marks the engine dead with exactly `status` (first report wins).
  void EngineDied(int32_t engine_index, absl::Status status);
  absl::Status Send(int32_t engine_index, core::EngineCoreRequestType type, std::string payload);

  // TCP mode: where each engine stands.
  enum class JoinState { kAbsent, kJoining, kLive, kDead };
  struct EngineSlot {
    JoinState state = JoinState::kAbsent;
    std::string peer;  // its handshake routing id while joining
    bool ready = false, registered = false;
    int64_t last_seen_ns = 0;
  };

  EngineCoreClientOptions options_;
  int32_t num_engines_ = 0;
  std::string handshake_address_, input_address_, output_address_;
  std::vector<std::string> peer_handshake_addresses_;  // sent in CONFIG
  std::optional<zmq::socket_t> handshake_;
  std::optional<zmq::socket_t> input_;        // guarded by send_mu_ after the handshake
  std::optional<zmq::socket_t> output_;       // receive thread only
  std::optional<zmq::socket_t> coordinator_;  // SUB to the DP coordinator; receive thread only
  // Counts the engines' output connections until all are in (WaitForEngines).
  std::unique_ptr<ipc::AcceptCounter> output_accepts_;
  std::thread receiver_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> next_call_id_{1};

  absl::Mutex send_mu_;

  absl::Mutex lb_mu_;
  std::optional<DpLoadBalancer> lb_ ABSL_GUARDED_BY(lb_mu_);
  // Every request sent and not finished or aborted yet → its engine (the balancer's counts).
  absl::flat_hash_map<std::string, int32_t> outstanding_ ABSL_GUARDED_BY(lb_mu_);
  // The engine's time (EngineCoreOutputs::timestamp) of the figures the balancer holds for
  // each engine, from its outputs or the coordinator's publication, whichever is newer.
  std::vector<double> figures_time_ ABSL_GUARDED_BY(lb_mu_);

  mutable absl::Mutex mu_;
  std::deque<ReceivedOutputs> outputs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::StatusOr<std::string>> utility_results_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);           // every engine is dead
  std::vector<EngineSlot> slots_ ABSL_GUARDED_BY(mu_);  // TCP mode
  std::vector<EngineInfo> engines_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;        // TCP: WaitForEngines succeeded
  absl::Status startup_error_ ABSL_GUARDED_BY(mu_);  // TCP: an engine failed to start
  std::vector<absl::Status> engine_failures_ ABSL_GUARDED_BY(mu_);
  int32_t num_dead_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_ENGINE_CORE_CLIENT_H_
