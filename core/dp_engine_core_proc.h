// DpEngineCoreProc: what an engine-core process adds under data parallelism (vLLM's
// vllm/v1/engine/core.py, DPEngineCoreProc): the load reports to the DP coordinator
// (core/dp_coordinator.h) and, with --data-parallel-lockstep, the coordinator's request waves,
// during which an engine without work of its own runs dummy steps
// (Executor::ExecuteDummyBatch) so that the model's collectives run as often on every rank.
//
// vLLM derives DPEngineCoreProc from EngineCoreProc and picks the class by the DP size. Here
// only the frontend knows whether there is a coordinator (its CONFIG names it, see
// core/engine_core_proc.h), so EngineCoreProc holds a DpEngineCoreProc from CONFIG on when it
// names one and calls it where vLLM's subclass overrides the base: the input thread polls the
// wave socket (vLLM's process_input_sockets), the main loop applies waves
// (_handle_client_request of START_DP_WAVE), asks for a report after inputs and after each step
// (_maybe_publish_request_counts) and, in a wave, steps while idle (run_busy_loop); the output
// thread sends the reports.
//
//   reports  engine PUSH ──► coordinator PULL   [ EncodeLoadReport ] (or, to a udp:// address,
//                                               sealed datagrams: ReportDatagramSender)
//   waves    engine SUB  ◄── coordinator XPUB   [ EncodeDpWave ] (lockstep only)
//
// Threads: each method says which of EngineCoreProc's threads calls it; the state each uses
// belongs to that thread (no locks).
#ifndef VLLM_CORE_DP_ENGINE_CORE_PROC_H_
#define VLLM_CORE_DP_ENGINE_CORE_PROC_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dp_coordinator.h"
#include "core/engine_core.h"
#include "core/engine_handshake.h"
#include "ipc/zmq_util.h"

namespace vllm::core {

// A socket of the engine's connected to `address` (EngineCoreProc's: CURVE client when the
// cluster key is set); InvalidArgument for an address ZMQ refuses.
using EngineSocketConnector =
    std::function<absl::StatusOr<zmq::socket_t>(zmq::socket_type type, const std::string& address)>;

class DpEngineCoreProc {
 public:
  // Load reports: at most one per interval, except the first of a busy period (it may start a
  // wave). vLLM's engines send on every change; the coordinator publishes at most every
  // 100 ms anyway.
  static constexpr int64_t kReportIntervalNs = 100'000'000;
  // Lockstep: at least one report a second (DpCoordinatorOptions::engine_timeout).
  static constexpr int64_t kLockstepKeepaliveNs = 1'000'000'000;

  // Connects engine `engine_index` to the coordinator `addresses` names
  // (`coordinator_stats` must not be empty): a PUSH through `connect`, or sealed datagrams to
  // a udp:// address with `coordinator_report_key`; with `coordinator_waves`, a SUB through
  // `connect` subscribed to every wave. InvalidArgument naming the coordinator for an address
  // that cannot be used. Called by the handshake, before any other thread runs.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DpEngineCoreProc>> Connect(
      int32_t engine_index, const EngineAddresses& addresses, const EngineSocketConnector& connect);
  DpEngineCoreProc(const DpEngineCoreProc&) = delete;
  DpEngineCoreProc& operator=(const DpEngineCoreProc&) = delete;

  // Input thread. The wave SUB to poll (nullptr without lockstep).
  zmq::socket_t* wave_socket() { return waves_.has_value() ? &*waves_ : nullptr; }
  // Input thread, when the wave socket is readable: the wave message, or nothing (nothing
  // there, or a message that does not decode: logged and dropped).
  std::optional<DpWave> ReceiveWave();

  // Main loop. START_DP_WAVE makes an idle engine step (dummy steps) until the wave
  // completes; messages about older waves are stale (vLLM's current_wave rule). Logs
  // "engine <i>: wave <w> complete after <n> dummy step(s)" when a running wave completes.
  void ApplyWave(const DpWave& wave);
  // Main loop. Lockstep and some engine has work: this engine steps even without work of its
  // own (and so must not wait for input).
  bool InWave() const { return waves_.has_value() && wave_running_; }
  // Main loop. vLLM's execute_dummy_batch: a forward pass of one token that touches no KV
  // cache, so the model's collectives run as often on an idle rank as on a busy one. The
  // executor's error means it is unusable.
  [[nodiscard]] absl::Status DummyStep(Executor& executor);
  // Main loop. The engine's figures (from `scheduler`) when they changed: at once when the
  // engine goes from idle to busy (that may start a wave), otherwise at most every
  // kReportIntervalNs (a change held back goes out from a later call: the main loop calls at
  // least every poll slice); in lockstep at least every kLockstepKeepaliveNs. The first
  // report also proves the connection (the coordinator then removes its socket files).
  // Returns the EncodeLoadReport payload to hand to the output thread, or nothing to send.
  std::optional<std::string> MaybeReport(const Scheduler& scheduler);

  // Output thread. Sends one report. Never blocks: a report is a snapshot, the next one
  // replaces a lost one (the first loss is logged).
  void SendReport(const std::string& payload);

 private:
  explicit DpEngineCoreProc(int32_t engine_index) : engine_index_(engine_index) {}

  const int32_t engine_index_;
  std::optional<zmq::socket_t> reports_;                    // output thread (ZMQ reports)
  std::unique_ptr<ReportDatagramSender> report_datagrams_;  // output thread (udp:// reports)
  bool report_dropped_logged_ = false;                      // output thread
  std::optional<zmq::socket_t> waves_;                      // input thread (none: no lockstep)
  // Main loop: the last report sent, and the wave state (vLLM's current_wave,
  // engines_running).
  EngineLoadReport last_report_;
  int64_t last_report_ns_ = 0;
  bool reported_ = false;
  int32_t current_wave_ = 0;
  bool wave_running_ = false;
  int64_t dummy_steps_in_wave_ = 0;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_DP_ENGINE_CORE_PROC_H_
