// Fuzzes the DP coordinator's codec (core/dp_coordinator.h): the load reports it decodes from
// every engine, the publications every API server decodes and the wave messages every lockstep
// engine decodes. Invariants:
//   - no crash, throw or leak, whatever the bytes; every failure is InvalidArgument;
//   - whatever decodes round-trips: it re-encodes to bytes that decode to an equal value, and
//     re-encoding that gives the same bytes;
//   - a report datagram (OpenReportDatagram, with a fixed key; the seeds are sealed with it)
//     that opens re-seals to the same bytes, and its report decodes as above.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dp_coordinator.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view bytes = fuzz::AsText(data, size);
  fuzz::CheckValueRoundTrip<core::EngineLoadReport>(bytes, core::DecodeLoadReport,
                                                    core::EncodeLoadReport, "EngineLoadReport");
  fuzz::CheckValueRoundTrip<core::LoadPublication>(bytes, core::DecodeLoadPublication,
                                                   core::EncodeLoadPublication, "LoadPublication");
  fuzz::CheckValueRoundTrip<core::DpWave>(bytes, core::DecodeDpWave, core::EncodeDpWave, "DpWave");
  static const std::string key(core::kReportKeyBytes, 'k');  // make_seeds seals with this key
  absl::StatusOr<core::OpenedReportDatagram> opened = core::OpenReportDatagram(bytes, key);
  if (!opened.ok()) {
    FUZZ_CHECK(opened.status().code() == absl::StatusCode::kInvalidArgument,
               "OpenReportDatagram failed with " + opened.status().ToString());
    return 0;
  }
  FUZZ_CHECK(core::SealReportDatagram(opened->report, opened->sequence, key) == bytes,
             "a report datagram does not re-seal to the same bytes");
  fuzz::CheckValueRoundTrip<core::EngineLoadReport>(opened->report, core::DecodeLoadReport,
                                                    core::EncodeLoadReport, "sealed report");
  return 0;
}
