// EngineCoreProc: an engine core in its own process (vLLM's vllm/v1/engine/core.py,
// EngineCoreProc): an input thread reading requests from ZMQ, the main loop stepping the
// EngineCore, and an output thread sending EngineCoreOutputs back.
//
// Protocol with the frontend (EngineCoreClient, frontend/engine/engine_core_client.h). The frontend
// binds three sockets and hands the engine its handshake address:
//
//   handshake  frontend ROUTER  ◄── engine DEALER   [ "HELLO",  msgpack [engine_index,
//                                                     data_parallel_size, host name] ]
//                               ──►                 [ "CONFIG", msgpack [input_address,
//                                                     output_address] ]
//                                                   or [ "REJECT", msgpack [message] ] (a
//                                                     wrong --data-parallel-size, a rank out
//                                                     of range or served by another node)
//                               ◄──                 [ "READY",  msgpack [engine_index,
//                                                     num_gpu_blocks, max_model_len] ]
//                                                   or [ "FAILED", msgpack [message] ]
//   input      frontend ROUTER  ──► engine DEALER   [ type: 1 byte EngineCoreRequestType,
//                                                     payload ] (the ROUTER prepends the
//                                                     engine's identity "engine-<index>";
//                                                     over TCP, kHeartbeat every second)
//   output     frontend PULL    ◄── engine PUSH     [ kind: 1 byte, payload ]
//                 kind 'O': core::Encode(EngineCoreOutputs)
//                 kind 'U': msgpack [call_id, code, message, result: bin]  (utility reply)
//                 kind 'F': msgpack [engine_index, code, message]  (EXECUTOR_FAILED: the
//                           engine is going down; every request it held is lost)
//                 kind 'H': msgpack engine_index  (heartbeat: sent after a second without any
//                           other frame, from CONFIG on, also while the model loads; a head
//                           on another node takes silence as the engine's death)
//
// Over TCP (data parallelism across nodes) the frontend's sockets are tcp:// endpoints of the
// head node, optionally CURVE with the cluster key (ipc/curve.h) on every socket.
//
// The DP coordinator (core/dp_coordinator.h), when CONFIG names one: the engine's
// DpEngineCoreProc (core/dp_engine_core_proc.h, vLLM's DPEngineCoreProc) PUSHes a load
// report when its figures change, at most every 100 ms but at once when it goes from idle to
// busy (sent by the output thread, never blocking: a report is a snapshot). When CONFIG also
// names a wave address (--data-parallel-lockstep) it SUBscribes to the coordinator's waves:
// while a wave runs and the engine has no work of its own, the main loop runs
// Executor::ExecuteDummyBatch back to back instead of waiting.
//
// Several frontends (--api-server-count N): the engine runs the handshake with each (the
// addresses it was given, then the peers a CONFIG names), polls every input socket, remembers
// which frontend sent each request, and sends each frontend the outputs of its own requests
// ('O' frames split per frontend, each with the step's scheduler figures; a frontend with no
// outputs in a step gets the figures when they changed). 'U' replies go to the caller; 'H',
// 'F' and READY go to all. A silent frontend over TCP stops the engine as a silent head does.
//
// Payloads: kAdd core::Encode(EngineCoreRequest); kAbort core::EncodeAbortRequests;
// kUtility msgpack [call_id, method, args: bin]; kStartDpWave core::Encode(StartDpWave).
// A request that fails validation is answered with an output finished with
// FinishReason::kError, and so is an ADD frame that does not decode but whose request_id can
// still be read (core::RecoverRequestId); any other undecodable frame is logged and dropped
// (its sender cannot be told). Utility methods: "reset_prefix_cache" (result: msgpack bool),
// "sleep" (args: msgpack [level, mode] or level; core/engine_sleep.h: the pause, then at level
// 1 and 2 the workers' memory freed; answered once the pause is complete), "wake_up" (args:
// msgpack [tag, ...], empty for all; result: fully awake), "is_sleeping" (result: msgpack
// bool), "ping".
//
// Threads: "vllm-ec-input" (decodes frames into the input queue), the caller's thread (main
// loop: owns the EngineCore, which with --kv-events-config publishes each step's KV-cache
// events itself), "vllm-ec-output" (encodes and sends). The main loop blocks on the input
// queue when there is no work, so an idle engine uses no CPU.
#ifndef VLLM_CORE_ENGINE_CORE_PROC_H_
#define VLLM_CORE_ENGINE_CORE_PROC_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "config/kv_events_config.h"
#include "core/engine_core.h"
#include "ipc/curve.h"

namespace vllm::core {

inline constexpr char kOutputKindOutputs = 'O';
inline constexpr char kOutputKindUtility = 'U';
inline constexpr char kOutputKindFailed = 'F';
inline constexpr char kOutputKindHeartbeat = 'H';

struct EngineCoreProcOptions {
  int32_t engine_index = 0;
  int32_t data_parallel_size = 1;  // told to the frontend, which checks it
  std::string handshake_address;
  // --api-server-count N on one node: the other API servers' handshake sockets (API server 0's
  // CONFIG also names them, for engines that know only the head's address). The engine joins
  // every API server, takes requests from each and sends each its own requests' outputs; the
  // scheduler figures, heartbeats and EXECUTOR_FAILED go to all.
  std::vector<std::string> extra_handshake_addresses;
  // TCP: CURVE with the cluster key on every socket (the head must use the same key).
  std::optional<ipc::CurveKeys> curve;
  // Builds the engine (loads the model through its executor, and with --kv-events-config
  // starts its KV-event publisher: config.kv_events); called after HELLO/CONFIG.
  // An error (a publisher that cannot bind, too) fails the start-up (FAILED).
  std::function<absl::StatusOr<std::unique_ptr<EngineCore>>()> make_engine;
  // From HELLO to READY (vLLM's VLLM_ENGINE_READY_TIMEOUT_S, default 600 s).
  absl::Duration handshake_timeout = absl::Minutes(10);
  // Heartbeats ('H') after this long without any other frame.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Over TCP: the frontend sends a heartbeat on the input socket every second; after this
  // long without any input frame the engine takes the frontend (the head node) as gone and
  // stops with an error (its launcher may start it again: it then joins the head anew).
  // Zero: never (ipc://, where the parent-death signal covers it).
  absl::Duration frontend_timeout = absl::ZeroDuration();
};

// Why an engine ended with its head over TCP gone: the head went silent for frontend_timeout
// after the engine had joined (kSilent), or did not answer HELLO within the handshake timeout
// (kUnanswered). Carried as a payload on the error Run() returns (nothing else carries it); a
// headless node's launcher starts such an engine again to re-join the head (--rejoin-head).
enum class HeadLoss { kNone, kSilent, kUnanswered };
inline constexpr char kHeadLossPayload[] = "vllm.core/head-loss";
HeadLoss HeadLossOf(const absl::Status& status);

// Runs the engine process until Stop() (SIGTERM), a `shutdown` from the frontend, or a fatal
// executor error (reported as 'F' first). Returns OK on an orderly stop, the error otherwise.
// Thread-safe: Stop() may be called from any thread (a signal-handling thread).
class EngineCoreProc {
 public:
  explicit EngineCoreProc(EngineCoreProcOptions options);
  ~EngineCoreProc();
  [[nodiscard]] absl::Status Run();
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_ENGINE_CORE_PROC_H_
