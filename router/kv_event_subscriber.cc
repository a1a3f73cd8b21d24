#include "router/kv_event_subscriber.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ipc/zmq_util.h"
#include "router/router.h"

namespace vllm::router {

namespace {

constexpr size_t kMaxEndpointsPerWorker = 1024;
constexpr int kPollMillis = 100;  // how soon the thread notices a stop
constexpr int kMaxMessagesPerWake = 256;

}  // namespace

absl::StatusOr<std::vector<KvEventSource>> ParseKvEventSource(absl::string_view spec) {
  const size_t eq = spec.find('=');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-event-source '", spec, "': ", why, " (expected WORKER_URL=ENDPOINT[,ENDPOINT...])"));
  };
  if (eq == absl::string_view::npos) return bad("no '='");
  auto url = ParseWorkerUrl(spec.substr(0, eq));
  if (!url.ok()) return bad(url.status().message());
  std::vector<KvEventSource> out;
  int rank = 0;
  for (absl::string_view ep : absl::StrSplit(spec.substr(eq + 1), ',')) {
    if (!absl::StartsWith(ep, "tcp://") && !absl::StartsWith(ep, "ipc://")) {
      return bad(absl::StrCat("endpoint '", ep, "' is not tcp://HOST:PORT or ipc://PATH"));
    }
    if (ep.size() > kv_events::kMaxEndpointBytes) return bad("endpoint too long");
    if (out.size() >= kMaxEndpointsPerWorker) return bad("too many endpoints");
    out.push_back({url->url, rank++, std::string(ep)});
  }
  return out;
}

struct KvEventSubscriber::Source {
  KvEventSource where;
  zmq::socket_t socket;
  std::optional<uint64_t> last_seq;
};

absl::StatusOr<std::unique_ptr<KvEventSubscriber>> KvEventSubscriber::Start(
    std::vector<KvEventSource> sources, OnBatch on_batch, OnError on_error) {
  std::vector<std::unique_ptr<Source>> made;
  for (KvEventSource& where : sources) {
    auto s = std::make_unique<Source>();
    s->where = std::move(where);
    try {
      s->socket = zmq::socket_t(ipc::ZmqContext(), zmq::socket_type::sub);
      s->socket.set(zmq::sockopt::linger, 0);
      s->socket.set(zmq::sockopt::maxmsgsize,
                    static_cast<int64_t>(kv_events::kMaxKvEventBatchBytes + 4096));
      s->socket.set(zmq::sockopt::rcvhwm, 100000);
      s->socket.set(zmq::sockopt::subscribe, "");
      s->socket.connect(s->where.endpoint);
    } catch (const zmq::error_t& e) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-event-source ", s->where.worker_url,
                                                     ": cannot connect to ", s->where.endpoint,
                                                     ": ", e.what()));
    }
    made.push_back(std::move(s));
  }
  std::unique_ptr<KvEventSubscriber> sub(
      new KvEventSubscriber(std::move(made), std::move(on_batch), std::move(on_error)));
  sub->thread_ = std::thread([p = sub.get()] { p->Loop(); });
  return sub;
}

KvEventSubscriber::KvEventSubscriber(std::vector<std::unique_ptr<Source>> sources, OnBatch on_batch,
                                     OnError on_error)
    : sources_(std::move(sources)),
      on_batch_(std::move(on_batch)),
      on_error_(std::move(on_error)) {}

KvEventSubscriber::~KvEventSubscriber() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void KvEventSubscriber::Loop() {
  std::vector<zmq::pollitem_t> items;
  for (const auto& s : sources_) items.push_back({s->socket.handle(), 0, ZMQ_POLLIN, 0});
  while (!stop_.load()) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(kPollMillis));
    } catch (const zmq::error_t&) {
      continue;  // EINTR
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].revents & ZMQ_POLLIN) Drain(*sources_[i]);
    }
  }
}

void KvEventSubscriber::Drain(Source& s) {
  for (int n = 0; n < kMaxMessagesPerWake && !stop_.load(); ++n) {
    // A multipart message arrives whole: its later parts are there once the first is.
    std::vector<zmq::message_t> parts;
    size_t count = 0;
    try {
      while (true) {
        zmq::message_t m;
        if (!s.socket.recv(m, zmq::recv_flags::dontwait)) break;
        ++count;
        const bool more = m.more();
        if (parts.size() < 3) parts.push_back(std::move(m));
        if (!more) break;
      }
    } catch (const zmq::error_t& e) {
      on_error_(s.where, absl::UnavailableError(e.what()));
      return;
    }
    if (count == 0) return;  // nothing more now
    if (count != 3 || parts[1].size() != 8) {
      on_error_(s.where,
                absl::InvalidArgumentError(absl::StrCat(
                    "expected [topic, 8-byte sequence, payload], got ", count, " part(s)")));
      continue;
    }
    uint64_t seq = 0;
    const auto* b = static_cast<const uint8_t*>(parts[1].data());
    for (int k = 0; k < 8; ++k) seq = (seq << 8) | b[k];
    auto batch = kv_events::DecodeKvEventBatch(
        std::span<const uint8_t>(static_cast<const uint8_t*>(parts[2].data()), parts[2].size()));
    if (!batch.ok()) {
      on_error_(s.where, batch.status());
      continue;
    }
    // A publisher that restarted counts from 0 again: not a gap.
    const uint64_t missed =
        s.last_seq.has_value() && seq > *s.last_seq + 1 ? seq - *s.last_seq - 1 : 0;
    s.last_seq = seq;
    on_batch_(s.where, seq, missed, std::move(*batch));
  }
}

}  // namespace vllm::router
