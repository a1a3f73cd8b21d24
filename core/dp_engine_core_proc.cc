#include "core/dp_engine_core_proc.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ipc/wait_strategy.h"
#include "spdlog/spdlog.h"

namespace vllm::core {

absl::StatusOr<std::unique_ptr<DpEngineCoreProc>> DpEngineCoreProc::Connect(
    int32_t engine_index, const EngineAddresses& addresses, const EngineSocketConnector& connect) {
  std::unique_ptr<DpEngineCoreProc> dp(new DpEngineCoreProc(engine_index));
  if (absl::StartsWith(addresses.coordinator_stats, "udp://")) {
    // Several nodes: sealed datagrams (core/dp_coordinator.h).
    absl::StatusOr<std::unique_ptr<ReportDatagramSender>> sender =
        ReportDatagramSender::Create(addresses.coordinator_stats, addresses.coordinator_report_key);
    if (!sender.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the DP coordinator: ", sender.status().message()));
    }
    dp->report_datagrams_ = *std::move(sender);
  } else {
    absl::StatusOr<zmq::socket_t> push =
        connect(zmq::socket_type::push, addresses.coordinator_stats);
    if (!push.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the DP coordinator: ", push.status().message()));
    }
    dp->reports_.emplace(std::move(*push));
  }
  if (!addresses.coordinator_waves.empty()) {
    absl::StatusOr<zmq::socket_t> sub = connect(zmq::socket_type::sub, addresses.coordinator_waves);
    if (!sub.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the DP coordinator's waves: ", sub.status().message()));
    }
    sub->set(zmq::sockopt::subscribe, "");
    dp->waves_.emplace(std::move(*sub));
    spdlog::info("engine {}: lockstep: dummy steps while another engine has work", engine_index);
  }
  return dp;
}

std::optional<DpWave> DpEngineCoreProc::ReceiveWave() {
  if (!waves_.has_value()) return std::nullopt;
  zmq::message_t msg;
  zmq::recv_result_t got;
  try {
    got = waves_->recv(msg, zmq::recv_flags::dontwait);
  } catch (const zmq::error_t& e) {
    return std::nullopt;
  }
  if (!got) return std::nullopt;
  absl::StatusOr<DpWave> wave = DecodeDpWave(msg.to_string_view());
  if (!wave.ok() || msg.more()) {
    spdlog::warn("engine {}: dropped a wave message: {}", engine_index_,
                 wave.ok() ? std::string("multipart") : wave.status().ToString());
    return std::nullopt;
  }
  return *wave;
}

void DpEngineCoreProc::ApplyWave(const DpWave& wave) {
  if (wave.wave < current_wave_) return;
  if (wave.running) {
    current_wave_ = wave.wave;
    if (!wave_running_) {
      wave_running_ = true;
      dummy_steps_in_wave_ = 0;
      spdlog::info("engine {}: wave {} running", engine_index_, current_wave_);
    }
    return;
  }
  if (wave_running_) {
    spdlog::info("engine {}: wave {} complete after {} dummy step(s)", engine_index_, wave.wave,
                 dummy_steps_in_wave_);
  }
  wave_running_ = false;
  dummy_steps_in_wave_ = 0;
  current_wave_ = wave.wave + 1;
}

absl::Status DpEngineCoreProc::DummyStep(Executor& executor) {
  ++dummy_steps_in_wave_;
  return executor.ExecuteDummyBatch();
}

std::optional<std::string> DpEngineCoreProc::MaybeReport(const Scheduler& sched) {
  EngineLoadReport report{engine_index_, static_cast<int32_t>(sched.num_waiting()),
                          static_cast<int32_t>(sched.running().size()),
                          std::clamp(sched.kv_cache_manager().GetUsage(), 0.0, 1.0), 0.0};
  const int64_t now = ipc::MonoNowNs();
  // Lockstep: a report at least every second, so the coordinator can tell a dead engine
  // from a busy one whose figures do not change.
  const bool keepalive = waves_.has_value() && now - last_report_ns_ >= kLockstepKeepaliveNs;
  if (reported_ && !keepalive && report.waiting == last_report_.waiting &&
      report.running == last_report_.running &&
      report.kv_cache_usage == last_report_.kv_cache_usage) {
    return std::nullopt;
  }
  // The clock of EngineCoreOutputs' timestamp: an API server keeps the newer figures.
  report.timestamp = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const bool became_busy =
      last_report_.waiting + last_report_.running == 0 && report.waiting + report.running > 0;
  if (reported_ && !became_busy && now - last_report_ns_ < kReportIntervalNs) return std::nullopt;
  last_report_ = report;
  last_report_ns_ = now;
  reported_ = true;
  return EncodeLoadReport(report);
}

void DpEngineCoreProc::SendReport(const std::string& payload) {
  if (report_datagrams_ != nullptr) {
    if (!report_datagrams_->Send(payload) && !report_dropped_logged_) {
      spdlog::warn("engine {}: a load report datagram was not sent: {}", engine_index_,
                   strerror(errno));
      report_dropped_logged_ = true;
    }
    return;
  }
  try {
    if (!reports_->send(zmq::buffer(payload), zmq::send_flags::dontwait)) {
      if (!report_dropped_logged_) {
        spdlog::warn("engine {}: the DP coordinator does not take reports (queue full)",
                     engine_index_);
        report_dropped_logged_ = true;
      }
    }
  } catch (const zmq::error_t& e) {
    spdlog::warn("engine {}: load report: {}", engine_index_, e.what());
  }
}

}  // namespace vllm::core
