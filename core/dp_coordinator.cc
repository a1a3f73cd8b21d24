#include "core/dp_coordinator.h"

#include <algorithm>
#include <cmath>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ipc/msgpack_fields.h"
#include "ipc/msgpack_util.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"
#include "spdlog/spdlog.h"

namespace vllm::core {
namespace {

using ipc::wire::FieldReader;

constexpr ipc::UnpackLimits kLimits{.max_array = static_cast<size_t>(kMaxDpEngines),
                                    .max_map = 0,
                                    .max_str = 0,
                                    .max_bin = 0,
                                    .max_depth = 3};

absl::StatusOr<msgpack::object_handle> Unpack(std::string_view bytes, const char* what) {
  auto oh =
      ipc::UnpackBounded({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, kLimits);
  if (!oh.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", oh.status().message()));
  return oh;
}

absl::Status CheckLoad(FieldReader& r, int32_t waiting, int32_t running, double kv) {
  if (waiting < 0 || running < 0) return r.Error("waiting/running", "negative");
  if (!std::isfinite(kv) || kv < 0.0 || kv > 1.0) {
    return r.Error("kv_cache_usage", "expected a number in [0, 1]");
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeLoadReport(const EngineLoadReport& report) {
  msgpack::sbuffer b;
  ipc::wire::Packer pk(b);
  pk.pack_array(4);
  pk.pack(report.engine_index);
  pk.pack(report.waiting);
  pk.pack(report.running);
  ipc::wire::PackDouble(pk, report.kv_cache_usage);
  return std::string(b.data(), b.size());
}

std::string EncodeLoadPublication(const LoadPublication& publication) {
  msgpack::sbuffer b;
  ipc::wire::Packer pk(b);
  pk.pack_array(3);
  pk.pack(publication.sequence);
  pk.pack(publication.publish_time_ns);
  pk.pack_array(static_cast<uint32_t>(publication.engines.size()));
  for (const PublishedEngineLoad& e : publication.engines) {
    pk.pack_array(4);
    pk.pack(e.waiting);
    pk.pack(e.running);
    ipc::wire::PackDouble(pk, e.kv_cache_usage);
    pk.pack(e.reported);
  }
  return std::string(b.data(), b.size());
}

absl::StatusOr<EngineLoadReport> DecodeLoadReport(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "EngineLoadReport"));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(oh.get(), "EngineLoadReport", 4));
  EngineLoadReport report;
  VLLM_RETURN_IF_ERROR(r.Int("engine_index", &report.engine_index));
  VLLM_RETURN_IF_ERROR(r.Int("waiting", &report.waiting));
  VLLM_RETURN_IF_ERROR(r.Int("running", &report.running));
  VLLM_RETURN_IF_ERROR(r.Double("kv_cache_usage", &report.kv_cache_usage));
  if (report.engine_index < 0 || report.engine_index >= kMaxDpEngines) {
    return r.Error("engine_index", "out of range");
  }
  VLLM_RETURN_IF_ERROR(CheckLoad(r, report.waiting, report.running, report.kv_cache_usage));
  return report;
}

absl::StatusOr<LoadPublication> DecodeLoadPublication(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "LoadPublication"));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(oh.get(), "LoadPublication", 3));
  LoadPublication p;
  VLLM_RETURN_IF_ERROR(r.Int("sequence", &p.sequence));
  VLLM_RETURN_IF_ERROR(r.Int("publish_time_ns", &p.publish_time_ns));
  const msgpack::object& list = r.Next();
  VLLM_ASSIGN_OR_RETURN(auto engines, r.List("engines", list));
  p.engines.reserve(engines.size());
  for (const msgpack::object& o : engines) {
    VLLM_ASSIGN_OR_RETURN(FieldReader e, FieldReader::Open(o, "PublishedEngineLoad", 4));
    PublishedEngineLoad& load = p.engines.emplace_back();
    VLLM_RETURN_IF_ERROR(e.Int("waiting", &load.waiting));
    VLLM_RETURN_IF_ERROR(e.Int("running", &load.running));
    VLLM_RETURN_IF_ERROR(e.Double("kv_cache_usage", &load.kv_cache_usage));
    VLLM_RETURN_IF_ERROR(e.Bool("reported", &load.reported));
    VLLM_RETURN_IF_ERROR(CheckLoad(e, load.waiting, load.running, load.kv_cache_usage));
  }
  return p;
}

class DpCoordinator::Impl {
 public:
  explicit Impl(const DpCoordinatorOptions& options)
      : options_(options),
        context_(options.context != nullptr ? *options.context : ipc::ZmqContext()),
        stats_(context_, zmq::socket_type::pull),
        publish_(context_, zmq::socket_type::xpub),
        table_(options.num_engines) {}

  absl::Status Bind() {
    try {
      stats_.set(zmq::sockopt::linger, 0);
      publish_.set(zmq::sockopt::linger, 0);
      // Every subscription reaches us (not only a topic's first), so each new API server
      // gets the current figures at once.
      publish_.set(zmq::sockopt::xpub_verbose, 1);
      stats_.bind(options_.stats_address);
      publish_.bind(options_.publish_address);
      stats_endpoint_ = stats_.get(zmq::sockopt::last_endpoint);
      publish_endpoint_ = publish_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("DP coordinator: cannot bind ",
                                                 options_.stats_address, " / ",
                                                 options_.publish_address, ": ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::Status Run() {
    const int64_t interval_ns = absl::ToInt64Nanoseconds(options_.publish_interval);
    int64_t last_publish_ns = 0;
    bool dirty = false, force = false;
    while (!stop_.load(std::memory_order_relaxed)) {
      const int64_t now = ipc::MonoNowNs();
      int64_t wait_ns = 100'000'000;  // also bounds how late Stop() is noticed
      if (dirty) wait_ns = std::clamp<int64_t>(last_publish_ns + interval_ns - now, 0, wait_ns);
      // A publication is pending but not due: leave the reports queued (ZMQ holds them) and
      // read them all just before publishing, instead of waking for each one. Measured at
      // 1024 engines × 10 reports/s: the loop's own CPU 2.2 % → 1.2-1.6 % of a core.
      const bool hold = dirty && wait_ns > 0;
      zmq::pollitem_t items[2] = {{publish_.handle(), 0, ZMQ_POLLIN, 0},
                                  {stats_.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, hold ? 1 : 2, std::chrono::milliseconds((wait_ns + 999'999) / 1'000'000));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) return absl::InternalError(absl::StrCat("poll: ", e.what()));
      }
      if (items[0].revents & ZMQ_POLLIN) force |= DrainSubscriptions();
      if (!hold && (items[1].revents & ZMQ_POLLIN)) dirty |= DrainReports();
      const int64_t after = ipc::MonoNowNs();
      if (force || (dirty && after - last_publish_ns >= interval_ns)) {
        dirty |= DrainReports();
        Publish(ipc::MonoNowNs());  // the time after the drain: what subscribers wait for
        last_publish_ns = after;
        dirty = force = false;
      }
    }
    return absl::OkStatus();
  }

  void Stop() { stop_.store(true); }

  const DpCoordinatorOptions options_;
  zmq::context_t& context_;
  zmq::socket_t stats_, publish_;
  std::string stats_endpoint_, publish_endpoint_;
  std::vector<PublishedEngineLoad> table_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> received_{0}, dropped_{0}, published_{0};

 private:
  // Applies every report waiting (up to a bound far above one interval's worth at
  // kMaxDpEngines); true when a figure changed.
  bool DrainReports() {
    bool changed = false;
    for (int i = 0; i < 16 * kMaxDpEngines; ++i) {
      zmq::message_t msg;
      zmq::recv_result_t got;
      try {
        got = stats_.recv(msg, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t&) {
        break;
      }
      if (!got) break;
      if (msg.more()) {  // one frame per report: drop the whole multipart message
        zmq::message_t rest;
        while (msg.more() && stats_.recv(rest, zmq::recv_flags::dontwait)) msg.swap(rest);
        dropped_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      received_.fetch_add(1, std::memory_order_relaxed);
      absl::StatusOr<EngineLoadReport> report = DecodeLoadReport(msg.to_string_view());
      if (!report.ok() || report->engine_index >= options_.num_engines) {
        if (dropped_.fetch_add(1, std::memory_order_relaxed) == 0) {
          spdlog::warn(
              "DP coordinator: dropped a load report: {}",
              report.ok() ? std::string("engine index out of range") : report.status().ToString());
        }
        continue;
      }
      PublishedEngineLoad load{report->waiting, report->running, report->kv_cache_usage, true};
      PublishedEngineLoad& slot = table_[report->engine_index];
      if (!(slot == load)) {
        slot = load;
        changed = true;
      }
    }
    return changed;
  }

  // Reads subscription messages; true when someone subscribed (publish to them at once).
  bool DrainSubscriptions() {
    bool subscribed = false;
    for (int i = 0; i < 1024; ++i) {
      zmq::message_t msg;
      zmq::recv_result_t got;
      try {
        got = publish_.recv(msg, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t&) {
        break;
      }
      if (!got) break;
      if (msg.size() >= 1 && *msg.data<uint8_t>() == 1) subscribed = true;
    }
    return subscribed;
  }

  void Publish(int64_t now_ns) {
    LoadPublication p;
    p.sequence = published_.load(std::memory_order_relaxed) + 1;
    p.publish_time_ns = now_ns;
    p.engines = table_;
    const std::string bytes = EncodeLoadPublication(p);
    try {
      // XPUB never blocks: a subscriber past its high-water mark misses this one.
      (void)publish_.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("DP coordinator: publication not sent: {}", e.what());
      return;
    }
    published_.fetch_add(1, std::memory_order_relaxed);
  }
};

absl::StatusOr<std::unique_ptr<DpCoordinator>> DpCoordinator::Create(
    const DpCoordinatorOptions& options) {
  if (options.num_engines < 1 || options.num_engines > kMaxDpEngines) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DP coordinator: num_engines ", options.num_engines, " outside [1, ", kMaxDpEngines, "]"));
  }
  if (options.publish_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("DP coordinator: negative publish interval");
  }
  auto impl = std::make_unique<Impl>(options);
  VLLM_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<DpCoordinator>(new DpCoordinator(std::move(impl)));
}

DpCoordinator::DpCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DpCoordinator::~DpCoordinator() = default;
const std::string& DpCoordinator::stats_endpoint() const { return impl_->stats_endpoint_; }
const std::string& DpCoordinator::publish_endpoint() const { return impl_->publish_endpoint_; }
absl::Status DpCoordinator::Run() { return impl_->Run(); }
void DpCoordinator::Stop() { impl_->Stop(); }
uint64_t DpCoordinator::reports_received() const { return impl_->received_.load(); }
uint64_t DpCoordinator::reports_dropped() const { return impl_->dropped_.load(); }
uint64_t DpCoordinator::publications_sent() const { return impl_->published_.load(); }

}  // namespace vllm::core
