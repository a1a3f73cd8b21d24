// KvEventSubscriber: receives the KV-cache events of the workers' engines (ZMQ SUB, vLLM's
// [topic, sequence, payload] messages, kv_events/kv_events.h) on its own thread and hands each
// decoded batch to a callback, which the router uses to post it to its I/O thread.
//
// One SUB socket per engine endpoint, connected (the engines bind); ZMQ reconnects by itself
// when an engine restarts. Every receive is bounded (ZMQ_MAXMSGSIZE); a malformed message or
// payload is reported and dropped, never fatal. Replay is not requested: a sequence gap is
// reported (the index then only misses some blocks until they are stored again).
#ifndef VLLM_ROUTER_KV_EVENT_SUBSCRIBER_H_
#define VLLM_ROUTER_KV_EVENT_SUBSCRIBER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kv_events/kv_events.h"

namespace vllm::router {

// One engine's event endpoint: engine `rank` of the worker at `worker_url`.
struct KvEventSource {
  std::string worker_url;
  int rank = 0;
  std::string endpoint;  // tcp://host:port or ipc://path
};

// Parses "--kv-event-source WORKER_URL=ENDPOINT[,ENDPOINT...]" (vllm-router's form; the
// endpoints are the worker's engines in DP-rank order). The URL is normalised as
// ParseWorkerUrl does. InvalidArgument naming the flag otherwise.
absl::StatusOr<std::vector<KvEventSource>> ParseKvEventSource(absl::string_view spec);

class KvEventSubscriber {
 public:
  // Called on the subscriber's thread for every decoded batch, with the message's sequence
  // number and how many batches were missed before it (a gap in the sequence).
  using OnBatch = std::function<void(const KvEventSource& source, uint64_t seq, uint64_t missed,
                                     kv_events::KvEventBatch batch)>;
  // Called on the subscriber's thread for a message that could not be used.
  using OnError = std::function<void(const KvEventSource& source, const absl::Status& error)>;

  // Connects one SUB socket per source and starts the thread. InvalidArgument for an endpoint
  // ZMQ refuses.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<KvEventSubscriber>> Start(
      std::vector<KvEventSource> sources, OnBatch on_batch, OnError on_error);
  ~KvEventSubscriber();  // stops and joins the thread
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

 private:
  struct Source;
  KvEventSubscriber(std::vector<std::unique_ptr<Source>> sources, OnBatch on_batch,
                    OnError on_error);
  void Loop();
  void Drain(Source& s);

  std::vector<std::unique_ptr<Source>> sources_;
  OnBatch on_batch_;
  OnError on_error_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_KV_EVENT_SUBSCRIBER_H_
