// Fuzzes vLLM's KV-event batch decoder (kv_events/kv_events.h): what a router decodes from every
// engine that publishes KV-cache events (ours or vLLM), and the --kv-events-config parser on
// the same bytes as text. Invariants:
//   - no crash, throw or leak, whatever the bytes; a batch that does not decode fails with
//     InvalidArgument, DataLoss or ResourceExhausted; a config that does not parse fails with
//     InvalidArgument naming --kv-events-config;
//   - a batch that decodes round-trips: its encoding decodes, and re-encoding that gives the
//     same bytes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "config/kv_events_config.h"
#include "kv_events/kv_events.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  absl::StatusOr<kv_events::KvEventBatch> batch = kv_events::DecodeKvEventBatch({data, size});
  if (!batch.ok()) {
    const absl::StatusCode code = batch.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss ||
                   code == absl::StatusCode::kResourceExhausted,
               "KVEventBatch failed with " + batch.status().ToString());
  } else {
    const std::string encoded = kv_events::EncodeKvEventBatch(*batch);
    absl::StatusOr<kv_events::KvEventBatch> again = kv_events::DecodeKvEventBatch(Bytes(encoded));
    FUZZ_CHECK(again.ok(),
               "KVEventBatch: re-encoding does not decode: " + again.status().ToString());
    FUZZ_CHECK(again->events.size() == batch->events.size(), "KVEventBatch: events lost");
    FUZZ_CHECK(kv_events::EncodeKvEventBatch(*again) == encoded,
               "KVEventBatch: re-encoding is not stable");
  }
  absl::StatusOr<config::KvEventsConfig> config =
      config::ParseKvEventsConfig(fuzz::AsText(data, size));
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument &&
                   absl::StrContains(config.status().message(), "--kv-events-config"),
               "--kv-events-config failed with " + config.status().ToString());
  } else {
    FUZZ_CHECK(config->publisher == "null" || config->publisher == "zmq", "bad publisher");
  }
  return 0;
}
