#include "core/dp_coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <zmq.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "ipc/ipc_address.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"
#include "spdlog/spdlog.h"

namespace vllm::core {
namespace {

using wire::FieldReader;

constexpr wire::UnpackLimits kLimits{.max_array = static_cast<size_t>(kMaxDpEngines),
                                     .max_map = 0,
                                     .max_str = 0,
                                     .max_bin = 0,
                                     .max_depth = 3};

absl::StatusOr<msgpack::object_handle> Unpack(std::string_view bytes, const char* what) {
  auto oh =
      wire::UnpackBounded({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, kLimits);
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

absl::Status CheckTimestamp(FieldReader& r, double t) {
  if (!std::isfinite(t) || t < 0.0) return r.Error("timestamp", "expected a finite number >= 0");
  return absl::OkStatus();
}

// libsodium's one-time set-up (picks implementations, opens the random source).
absl::Status SodiumReady() {
  static const bool kInitialised = sodium_init() >= 0;
  if (!kInitialised) return absl::InternalError("libsodium could not be initialised");
  return absl::OkStatus();
}

// The MAC of a report datagram: keyed BLAKE2b over the report and the sequence bytes.
void ReportMac(std::string_view signed_bytes, std::string_view key,
               unsigned char out[kReportMacBytes]) {
  crypto_generichash(
      out, kReportMacBytes, reinterpret_cast<const unsigned char*>(signed_bytes.data()),
      signed_bytes.size(), reinterpret_cast<const unsigned char*>(key.data()), key.size());
}

// "IPv4:port" or "[IPv6]:port" → a socket address. InvalidArgument naming `what`.
absl::Status ParseHostPort(const std::string& text, const char* what, sockaddr_storage* out,
                           socklen_t* len) {
  const size_t colon = text.rfind(':');
  int port = -1;
  std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  const bool v6 = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (v6) host = host.substr(1, host.size() - 2);
  *out = {};
  bool ok = colon != std::string::npos && absl::SimpleAtoi(text.substr(colon + 1), &port) &&
            port >= 0 && port <= 65535;
  if (ok && v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    ok = inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) == 1;
    *len = sizeof(sockaddr_in6);
  } else if (ok) {
    auto* a = reinterpret_cast<sockaddr_in*>(out);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    ok = inet_pton(AF_INET, host.c_str(), &a->sin_addr) == 1;
    *len = sizeof(sockaddr_in);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", text, "': expected IPv4:port or [IPv6]:port"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> NewReportKey() {
  VLLM_RETURN_IF_ERROR(SodiumReady());
  std::string key(kReportKeyBytes, '\0');
  randombytes_buf(key.data(), key.size());
  return key;
}

std::optional<std::string> ReportKeyFromHex(std::string_view hex) {
  if (hex.size() != 2 * kReportKeyBytes) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string key(kReportKeyBytes, '\0');
  for (size_t i = 0; i < kReportKeyBytes; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<char>(hi * 16 + lo);
  }
  return key;
}

std::string SealReportDatagram(std::string_view report, uint64_t sequence, std::string_view key) {
  std::string d(report);
  for (int i = 0; i < 8; ++i) d.push_back(static_cast<char>((sequence >> (8 * i)) & 0xff));
  unsigned char mac[kReportMacBytes];
  ReportMac(d, key, mac);
  d.append(reinterpret_cast<const char*>(mac), kReportMacBytes);
  return d;
}

absl::StatusOr<OpenedReportDatagram> OpenReportDatagram(std::string_view datagram,
                                                        std::string_view key) {
  if (datagram.size() <= 8 + kReportMacBytes || datagram.size() > kMaxReportDatagram) {
    return absl::InvalidArgumentError(absl::StrCat("report datagram: ", datagram.size(),
                                                   " bytes, expected 25..", kMaxReportDatagram));
  }
  const size_t signed_size = datagram.size() - kReportMacBytes;
  unsigned char mac[kReportMacBytes];
  ReportMac(datagram.substr(0, signed_size), key, mac);
  if (crypto_verify_16(
          mac, reinterpret_cast<const unsigned char*>(datagram.data() + signed_size)) != 0) {
    return absl::InvalidArgumentError("report datagram: the MAC does not verify");
  }
  OpenedReportDatagram opened;
  opened.report = datagram.substr(0, signed_size - 8);
  for (int i = 0; i < 8; ++i) {
    opened.sequence |= static_cast<uint64_t>(static_cast<unsigned char>(
                           datagram[signed_size - 8 + static_cast<size_t>(i)]))
                       << (8 * i);
  }
  return opened;
}

absl::StatusOr<std::unique_ptr<ReportDatagramSender>> ReportDatagramSender::Create(
    std::string_view endpoint_view, std::string key) {
  const std::string endpoint(endpoint_view);
  if (!absl::StartsWith(endpoint, "udp://")) {
    return absl::InvalidArgumentError(absl::StrCat("report address '", endpoint, "': not udp://"));
  }
  if (key.size() != kReportKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("report key: ", key.size(), " bytes, expected ", kReportKeyBytes));
  }
  VLLM_RETURN_IF_ERROR(SodiumReady());
  sockaddr_storage addr;
  socklen_t len = 0;
  VLLM_RETURN_IF_ERROR(ParseHostPort(endpoint.substr(6), "report address", &addr, &len));
  const int fd = socket(addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("report address '", endpoint, "': ", why));
  }
  return std::unique_ptr<ReportDatagramSender>(new ReportDatagramSender(fd, std::move(key)));
}

ReportDatagramSender::~ReportDatagramSender() { close(fd_); }

bool ReportDatagramSender::Send(std::string_view report) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const uint64_t ns =
      static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
  last_sequence_ = std::max(ns, last_sequence_ + 1);
  const std::string d = SealReportDatagram(report, last_sequence_, key_);
  // ECONNREFUSED: an earlier datagram found no listener (the coordinator is gone or not yet
  // bound); the next report tries again.
  return send(fd_, d.data(), d.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
         static_cast<ssize_t>(d.size());
}

std::string EncodeLoadReport(const EngineLoadReport& report) {
  msgpack::sbuffer b;
  wire::Packer pk(b);
  pk.pack_array(5);
  pk.pack(report.engine_index);
  pk.pack(report.waiting);
  pk.pack(report.running);
  wire::PackDouble(pk, report.kv_cache_usage);
  wire::PackDouble(pk, report.timestamp);
  return std::string(b.data(), b.size());
}

std::string EncodeLoadPublication(const LoadPublication& publication) {
  msgpack::sbuffer b;
  wire::Packer pk(b);
  pk.pack_array(5);
  pk.pack(publication.sequence);
  pk.pack(publication.publish_time_ns);
  pk.pack(publication.current_wave);
  pk.pack(publication.engines_running);
  pk.pack_array(static_cast<uint32_t>(publication.engines.size()));
  for (const PublishedEngineLoad& e : publication.engines) {
    pk.pack_array(5);
    pk.pack(e.waiting);
    pk.pack(e.running);
    wire::PackDouble(pk, e.kv_cache_usage);
    pk.pack(e.reported);
    wire::PackDouble(pk, e.timestamp);
  }
  return std::string(b.data(), b.size());
}

std::string EncodeDpWave(const DpWave& wave) {
  msgpack::sbuffer b;
  wire::Packer pk(b);
  pk.pack_array(3);
  pk.pack(wave.wave);
  pk.pack(wave.running);
  pk.pack(wave.exclude_engine_index);
  return std::string(b.data(), b.size());
}

absl::StatusOr<DpWave> DecodeDpWave(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "DpWave"));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(oh.get(), "DpWave", 3));
  DpWave w;
  VLLM_RETURN_IF_ERROR(r.Int("wave", &w.wave));
  VLLM_RETURN_IF_ERROR(r.Bool("running", &w.running));
  VLLM_RETURN_IF_ERROR(r.Int("exclude_engine_index", &w.exclude_engine_index));
  if (w.wave < 0) return r.Error("wave", "negative");
  if (w.exclude_engine_index < -1 || w.exclude_engine_index >= kMaxDpEngines) {
    return r.Error("exclude_engine_index", "out of range");
  }
  return w;
}

absl::StatusOr<EngineLoadReport> DecodeLoadReport(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "EngineLoadReport"));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(oh.get(), "EngineLoadReport", 5));
  EngineLoadReport report;
  VLLM_RETURN_IF_ERROR(r.Int("engine_index", &report.engine_index));
  VLLM_RETURN_IF_ERROR(r.Int("waiting", &report.waiting));
  VLLM_RETURN_IF_ERROR(r.Int("running", &report.running));
  VLLM_RETURN_IF_ERROR(r.Double("kv_cache_usage", &report.kv_cache_usage));
  VLLM_RETURN_IF_ERROR(r.Double("timestamp", &report.timestamp));
  VLLM_RETURN_IF_ERROR(CheckTimestamp(r, report.timestamp));
  if (report.engine_index < 0 || report.engine_index >= kMaxDpEngines) {
    return r.Error("engine_index", "out of range");
  }
  VLLM_RETURN_IF_ERROR(CheckLoad(r, report.waiting, report.running, report.kv_cache_usage));
  return report;
}

absl::StatusOr<LoadPublication> DecodeLoadPublication(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(bytes, "LoadPublication"));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(oh.get(), "LoadPublication", 5));
  LoadPublication p;
  VLLM_RETURN_IF_ERROR(r.Int("sequence", &p.sequence));
  VLLM_RETURN_IF_ERROR(r.Int("publish_time_ns", &p.publish_time_ns));
  VLLM_RETURN_IF_ERROR(r.Int("current_wave", &p.current_wave));
  VLLM_RETURN_IF_ERROR(r.Bool("engines_running", &p.engines_running));
  if (p.current_wave < 0) return r.Error("current_wave", "negative");
  const msgpack::object& list = r.Next();
  VLLM_ASSIGN_OR_RETURN(auto engines, r.List("engines", list));
  p.engines.reserve(engines.size());
  for (const msgpack::object& o : engines) {
    VLLM_ASSIGN_OR_RETURN(FieldReader e, FieldReader::Open(o, "PublishedEngineLoad", 5));
    PublishedEngineLoad& load = p.engines.emplace_back();
    VLLM_RETURN_IF_ERROR(e.Int("waiting", &load.waiting));
    VLLM_RETURN_IF_ERROR(e.Int("running", &load.running));
    VLLM_RETURN_IF_ERROR(e.Double("kv_cache_usage", &load.kv_cache_usage));
    VLLM_RETURN_IF_ERROR(e.Bool("reported", &load.reported));
    VLLM_RETURN_IF_ERROR(e.Double("timestamp", &load.timestamp));
    VLLM_RETURN_IF_ERROR(CheckTimestamp(e, load.timestamp));
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
        table_(options.num_engines),
        unfinished_(options.num_engines, false) {
    if (!options.wave_address.empty()) wave_.emplace(context_, zmq::socket_type::xpub);
  }
  ~Impl() {
    if (udp_fd_ >= 0) close(udp_fd_);
  }

  // The report datagram socket (DpCoordinatorOptions::udp_stats_address).
  absl::Status BindUdp() {
    const std::string& a = options_.udp_stats_address;
    if (options_.report_key.size() != kReportKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("DP coordinator: report key of ",
                                                     options_.report_key.size(),
                                                     " bytes, expected ", kReportKeyBytes));
    }
    VLLM_RETURN_IF_ERROR(SodiumReady());
    sockaddr_storage addr;
    socklen_t len = 0;
    VLLM_RETURN_IF_ERROR(ParseHostPort(a, "DP coordinator: udp_stats_address", &addr, &len));
    udp_fd_ = socket(addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    // Room for a publish interval's reports of kMaxDpEngines engines (each datagram costs its
    // kernel buffer, ~1 KiB): reports wait in the socket until the publication is due.
    const int bytes = 8 << 20;
    if (udp_fd_ < 0 ||
        (setsockopt(udp_fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0 &&
         setsockopt(udp_fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0) ||
        bind(udp_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      return absl::UnavailableError(
          absl::StrCat("DP coordinator: cannot bind udp ", a, ": ", strerror(errno)));
    }
    // Without CAP_NET_ADMIN the buffer is capped by net.core.rmem_max (often 208 KiB): then
    // reports are held only as long as the buffer surely has room for (each datagram costs at
    // most 2 KiB of it; engines send ≤ 10 reports/s, counted twice for bursts).
    int got = 0;
    socklen_t got_len = sizeof got;
    getsockopt(udp_fd_, SOL_SOCKET, SO_RCVBUF, &got, &got_len);
    const int64_t capacity = got / 2048, per_second = int64_t{20} * options_.num_engines;
    udp_hold_ns_ = std::clamp<int64_t>(capacity * 1'000'000'000 / per_second, 1'000'000,
                                       absl::ToInt64Nanoseconds(options_.publish_interval));
    len = sizeof addr;
    getsockname(udp_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    char host[INET6_ADDRSTRLEN] = {};
    uint16_t port = 0;
    if (addr.ss_family == AF_INET6) {
      const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&addr);
      inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
      port = ntohs(a6->sin6_port);
      udp_endpoint_ = absl::StrCat("udp://[", host, "]:", port);
    } else {
      const auto* a4 = reinterpret_cast<const sockaddr_in*>(&addr);
      inet_ntop(AF_INET, &a4->sin_addr, host, sizeof host);
      port = ntohs(a4->sin_port);
      udp_endpoint_ = absl::StrCat("udp://", host, ":", port);
    }
    return absl::OkStatus();
  }

  absl::Status Bind() {
    try {
      std::vector<zmq::socket_t*> sockets = {&stats_, &publish_};
      if (wave_.has_value()) sockets.push_back(&*wave_);
      for (zmq::socket_t* s : sockets) {
        s->set(zmq::sockopt::linger, 0);
        if (options_.curve.has_value()) {
          VLLM_RETURN_IF_ERROR(ipc::MakeCurveServer(*s, *options_.curve));
        }
      }
      // Every subscription reaches us (not only a topic's first), so each new API server
      // (engine) gets the current figures (wave) at once.
      publish_.set(zmq::sockopt::xpub_verbose, 1);
      // ipc::BindEndpoint: a TCP ":*" port follows VLLM_PORT when it is set.
      if (!options_.stats_address.empty()) {
        VLLM_ASSIGN_OR_RETURN(stats_endpoint_, ipc::BindEndpoint(stats_, options_.stats_address));
      }
      VLLM_ASSIGN_OR_RETURN(publish_endpoint_,
                            ipc::BindEndpoint(publish_, options_.publish_address));
      if (wave_.has_value()) {
        wave_->set(zmq::sockopt::xpub_verbose, 1);
        VLLM_ASSIGN_OR_RETURN(wave_endpoint_, ipc::BindEndpoint(*wave_, options_.wave_address));
      }
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
      // 1024 engines × 10 reports/s: the loop's own CPU 2.2 % → 1.2-1.6 % of a core. Not
      // with waves: a wave must start as soon as an engine reports work.
      const bool hold = dirty && wait_ns > 0 && !wave_.has_value();
      // Holding, the datagrams are read when the socket buffer may be getting full.
      if (hold && udp_fd_ >= 0) {
        wait_ns = std::clamp<int64_t>(last_udp_drain_ns_ + udp_hold_ns_ - now, 0, wait_ns);
      }
      // [publish, wave or none, stats, udp or none]: holding polls the first two only.
      zmq::pollitem_t items[4] = {
          {publish_.handle(), 0, ZMQ_POLLIN, 0},
          {wave_.has_value() ? wave_->handle() : nullptr, -1, ZMQ_POLLIN, 0},
          {stats_.handle(), 0, ZMQ_POLLIN, 0},
          {nullptr, udp_fd_, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, hold ? 2 : (udp_fd_ >= 0 ? 4 : 3),
                  std::chrono::milliseconds((wait_ns + 999'999) / 1'000'000));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) return absl::InternalError(absl::StrCat("poll: ", e.what()));
      }
      if (items[0].revents & ZMQ_POLLIN) force |= DrainSubscriptions(publish_, &subscribers_);
      if (wave_.has_value() && (items[1].revents & ZMQ_POLLIN) &&
          DrainSubscriptions(*wave_, &wave_subscribers_)) {
        // The state for the new engine: the running wave, or the last completed one.
        if (engines_running_) {
          SendWave({current_wave_, true, -1});
        } else if (current_wave_ > 0) {
          SendWave({current_wave_ - 1, false, -1});
        }
      }
      if (!hold && (items[2].revents & ZMQ_POLLIN)) dirty |= DrainReports();
      const int64_t after = ipc::MonoNowNs();
      if (udp_fd_ >= 0 && ((!hold && (items[3].revents & ZMQ_POLLIN)) ||
                           (hold && after - last_udp_drain_ns_ >= udp_hold_ns_))) {
        dirty |= DrainDatagrams();
      }
      if (force || (dirty && after - last_publish_ns >= interval_ns)) {
        dirty |= DrainReports();
        if (udp_fd_ >= 0) dirty |= DrainDatagrams();
        Publish(ipc::MonoNowNs());  // the time after the drain: what subscribers wait for
        last_publish_ns = after;
        dirty = force = false;
      }
      MaybeReleaseAddresses();
      if (wave_.has_value() && UpdateSilentEngines(after)) {
        Publish(ipc::MonoNowNs());
        last_publish_ns = after;
      }
    }
    return absl::OkStatus();
  }

  void Stop() { stop_.store(true); }

 private:
  friend class DpCoordinator;  // its accessors read the endpoints and the counters

  const DpCoordinatorOptions options_;
  zmq::context_t& context_;
  zmq::socket_t stats_, publish_;
  std::optional<zmq::socket_t> wave_;
  std::string stats_endpoint_, publish_endpoint_, wave_endpoint_, udp_endpoint_;
  int udp_fd_ = -1;
  // How long datagrams may wait in the socket while a publication is pending (its buffer's
  // room), and when they were last read.
  int64_t udp_hold_ns_ = 0;
  int64_t last_udp_drain_ns_ = 0;
  std::vector<PublishedEngineLoad> table_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> received_{0}, dropped_{0}, published_{0}, waves_started_{0},
      waves_completed_{0};

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
      changed |= ApplyReport(msg.to_string_view());
    }
    return changed;
  }

  // The datagram socket's reports (recvmmsg, up to 256 per call); true when a figure changed.
  // A datagram longer than any report (MSG_TRUNC) is dropped.
  bool DrainDatagrams() {
    last_udp_drain_ns_ = ipc::MonoNowNs();
    constexpr int kBatch = 256;
    constexpr size_t kMaxDatagram = kMaxReportDatagram;
    static thread_local char buffers[kBatch][kMaxDatagram];
    mmsghdr messages[kBatch];
    iovec iov[kBatch];
    bool changed = false;
    for (int round = 0; round < 16 * kMaxDpEngines / kBatch; ++round) {
      for (int i = 0; i < kBatch; ++i) {
        iov[i] = {buffers[i], kMaxDatagram};
        messages[i] = {};
        messages[i].msg_hdr.msg_iov = &iov[i];
        messages[i].msg_hdr.msg_iovlen = 1;
      }
      const int n = recvmmsg(udp_fd_, messages, kBatch, MSG_DONTWAIT, nullptr);
      if (n <= 0) break;
      for (int i = 0; i < n; ++i) {
        if (messages[i].msg_hdr.msg_flags & MSG_TRUNC) {
          received_.fetch_add(1, std::memory_order_relaxed);
          dropped_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        changed |= ApplyDatagram(std::string_view(buffers[i], messages[i].msg_len));
      }
      if (n < kBatch) break;
    }
    return changed;
  }

  // Counts a dropped report; the first is logged.
  void Drop(const absl::Status& why) {
    if (dropped_.fetch_add(1, std::memory_order_relaxed) == 0) {
      spdlog::warn("DP coordinator: dropped a load report: {}", why.ToString());
    }
  }

  // One sealed datagram: opened with the report key, its sequence checked against the
  // engine's last, then applied as ApplyReport.
  bool ApplyDatagram(std::string_view bytes) {
    absl::StatusOr<OpenedReportDatagram> opened = OpenReportDatagram(bytes, options_.report_key);
    absl::StatusOr<EngineLoadReport> report =
        opened.ok() ? DecodeLoadReport(opened->report) : opened.status();
    if (report.ok() && report->engine_index < options_.num_engines &&
        opened->sequence <= last_sequence_[report->engine_index]) {
      report = absl::InvalidArgumentError(
          absl::StrCat("report datagram of engine ", report->engine_index, ": sequence ",
                       opened->sequence, " not above the last taken (a replay)"));
    }
    if (report.ok() && report->engine_index < options_.num_engines) {
      last_sequence_[report->engine_index] = opened->sequence;
    }
    return ApplyReport(report);
  }

  // One report's bytes: decoded (or dropped and counted) and applied to the table; true when
  // a figure (or the wave) changed.
  bool ApplyReport(std::string_view bytes) { return ApplyReport(DecodeLoadReport(bytes)); }

  bool ApplyReport(const absl::StatusOr<EngineLoadReport>& report) {
    received_.fetch_add(1, std::memory_order_relaxed);
    if (!report.ok()) {
      Drop(report.status());
      return false;
    }
    if (report->engine_index >= options_.num_engines) {
      Drop(absl::InvalidArgumentError(
          absl::StrCat("engine index ", report->engine_index, " out of range")));
      return false;
    }
    last_report_ns_[report->engine_index] = ipc::MonoNowNs();
    const PublishedEngineLoad load{report->waiting, report->running, report->kv_cache_usage, true,
                                   report->timestamp};
    PublishedEngineLoad& slot = table_[report->engine_index];
    if (!slot.reported) ++num_reported_;
    // A new time alone is no change worth a publication.
    const bool same = slot.reported && slot.waiting == load.waiting &&
                      slot.running == load.running && slot.kv_cache_usage == load.kv_cache_usage;
    slot = load;
    bool changed = !same;
    if (wave_.has_value()) changed |= UpdateWave(report->engine_index);
    return changed;
  }

  // Waves: the report of `engine` may start a wave (it has work and none runs) or end one
  // (no engine has work). True when the wave state changed.
  bool UpdateWave(int32_t engine) {
    const PublishedEngineLoad& load = table_[engine];
    const bool busy = load.waiting + load.running > 0;
    if (unfinished_[engine] != busy) {
      unfinished_[engine] = busy;
      num_unfinished_ += busy ? 1 : -1;
    }
    if (!engines_running_ && busy) {
      engines_running_ = true;
      waves_started_.fetch_add(1, std::memory_order_relaxed);
      SendWave({current_wave_, true, engine});  // START_DP_WAVE; `engine` already runs
      return true;
    }
    if (engines_running_ && num_unfinished_ == 0) {
      engines_running_ = false;
      waves_completed_.fetch_add(1, std::memory_order_relaxed);
      SendWave({current_wave_, false, -1});  // wave complete
      ++current_wave_;
      return true;
    }
    return false;
  }

  // Waves: engines with work but no report for engine_timeout are gone (their last figures
  // stay published); true when that completed the wave.
  bool UpdateSilentEngines(int64_t now) {
    const int64_t timeout_ns = absl::ToInt64Nanoseconds(options_.engine_timeout);
    if (!engines_running_ || timeout_ns <= 0) return false;
    for (int32_t e = 0; e < options_.num_engines; ++e) {
      if (!unfinished_[e] || now - last_report_ns_[e] <= timeout_ns) continue;
      spdlog::warn(
          "DP coordinator: engine {} reported work but nothing for {}: taken as gone "
          "for wave {}",
          e, absl::FormatDuration(options_.engine_timeout), current_wave_);
      unfinished_[e] = false;
      --num_unfinished_;
    }
    if (num_unfinished_ > 0) return false;
    engines_running_ = false;
    waves_completed_.fetch_add(1, std::memory_order_relaxed);
    SendWave({current_wave_, false, -1});
    ++current_wave_;
    return true;
  }

  void SendWave(const DpWave& wave) {
    const std::string bytes = EncodeDpWave(wave);
    try {
      (void)wave_->send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("DP coordinator: wave message not sent: {}", e.what());
    }
  }

  // Reads subscription messages; true when someone subscribed (publish to them at once).
  bool DrainSubscriptions(zmq::socket_t& socket, int32_t* subscriptions) {
    bool subscribed = false;
    for (int i = 0; i < 1024; ++i) {
      zmq::message_t msg;
      zmq::recv_result_t got;
      try {
        got = socket.recv(msg, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t&) {
        break;
      }
      if (!got) break;
      if (msg.size() >= 1 && *msg.data<uint8_t>() == 1) {
        subscribed = true;
        ++*subscriptions;
      }
    }
    return subscribed;
  }

  // One node (ipc://): once every peer proved its connection by a message, nothing else may
  // connect — the socket files go (docs/DECISIONS.md, internal sockets).
  void MaybeReleaseAddresses() {
    if (released_ || options_.expected_subscribers <= 0) return;
    if (num_reported_ < options_.num_engines || subscribers_ < options_.expected_subscribers ||
        (wave_.has_value() && wave_subscribers_ < options_.num_engines)) {
      return;
    }
    for (const std::string* a : {&stats_endpoint_, &publish_endpoint_, &wave_endpoint_}) {
      if (absl::StartsWith(*a, "ipc://")) ipc::ReleaseIpcAddress(*a);
    }
    released_ = true;
  }

  void Publish(int64_t now_ns) {
    LoadPublication p;
    p.sequence = published_.load(std::memory_order_relaxed) + 1;
    p.publish_time_ns = now_ns;
    p.current_wave = current_wave_;
    p.engines_running = engines_running_;
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

  std::vector<bool> unfinished_;  // waves: the engine's latest report shows work
  std::vector<int64_t> last_report_ns_ = std::vector<int64_t>(options_.num_engines, 0);
  std::vector<uint64_t> last_sequence_ = std::vector<uint64_t>(options_.num_engines, 0);
  int32_t num_unfinished_ = 0;
  int32_t num_reported_ = 0;
  int32_t subscribers_ = 0, wave_subscribers_ = 0;
  int32_t current_wave_ = 0;
  bool engines_running_ = false;
  bool released_ = false;
};

absl::StatusOr<std::unique_ptr<DpCoordinator>> DpCoordinator::Create(
    const DpCoordinatorOptions& options) {
  if (options.num_engines < 1 || options.num_engines > kMaxDpEngines) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DP coordinator: num_engines ", options.num_engines, " outside [1, ", kMaxDpEngines, "]"));
  }
  if (options.stats_address.empty() && options.udp_stats_address.empty()) {
    return absl::InvalidArgumentError("DP coordinator: no report address (ZMQ or UDP)");
  }
  if (options.publish_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("DP coordinator: negative publish interval");
  }
  auto impl = std::make_unique<Impl>(options);
  VLLM_RETURN_IF_ERROR(impl->Bind());
  if (!options.udp_stats_address.empty()) VLLM_RETURN_IF_ERROR(impl->BindUdp());
  return std::unique_ptr<DpCoordinator>(new DpCoordinator(std::move(impl)));
}

DpCoordinator::DpCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DpCoordinator::~DpCoordinator() = default;
const std::string& DpCoordinator::stats_endpoint() const { return impl_->stats_endpoint_; }
const std::string& DpCoordinator::publish_endpoint() const { return impl_->publish_endpoint_; }
const std::string& DpCoordinator::wave_endpoint() const { return impl_->wave_endpoint_; }
const std::string& DpCoordinator::udp_stats_endpoint() const { return impl_->udp_endpoint_; }
absl::Status DpCoordinator::Run() { return impl_->Run(); }
void DpCoordinator::Stop() { impl_->Stop(); }
uint64_t DpCoordinator::reports_received() const { return impl_->received_.load(); }
uint64_t DpCoordinator::reports_dropped() const { return impl_->dropped_.load(); }
uint64_t DpCoordinator::publications_sent() const { return impl_->published_.load(); }
uint64_t DpCoordinator::waves_started() const { return impl_->waves_started_.load(); }
uint64_t DpCoordinator::waves_completed() const { return impl_->waves_completed_.load(); }

}  // namespace vllm::core
