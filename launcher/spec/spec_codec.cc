#include "launcher/spec/spec_codec.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "launcher/spec/coordinator_spec.h"

namespace vllm::launcher {
namespace {

// kSpecReportKeyBytes bytes from 2 × as many hex digits (either case), or nullopt.
std::optional<std::string> KeyFromHex(std::string_view hex) {
  if (hex.size() != 2 * kSpecReportKeyBytes) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string key(kSpecReportKeyBytes, '\0');
  for (size_t i = 0; i < kSpecReportKeyBytes; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<char>(hi * 16 + lo);
  }
  return key;
}

}  // namespace

std::string CutSpecString(std::string_view s) { return std::string(s.substr(0, kMaxSpecString)); }

absl::StatusOr<msgpack::object_handle> UnpackSpec(std::string_view bytes, std::string_view what,
                                                  size_t max_bytes,
                                                  const wire::UnpackLimits& limits) {
  if (bytes.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d bytes, over the limit of %d", what, bytes.size(), max_bytes));
  }
  auto handle =
      wire::UnpackBounded({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, limits);
  if (!handle.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": ", handle.status().message()));
  }
  return handle;
}

absl::StatusOr<wire::FieldReader> OpenSpec(const msgpack::object& o, std::string_view tag,
                                           uint8_t version, uint32_t num_fields) {
  VLLM_ASSIGN_OR_RETURN(wire::FieldReader r, wire::FieldReader::Open(o, tag, num_fields));
  std::string got;
  VLLM_RETURN_IF_ERROR(r.String("tag", 64, &got));
  if (got != tag)
    return r.Error("tag", absl::StrCat("expected '", std::string(tag), "', got '", got, "'"));
  uint8_t got_version = 0;
  VLLM_RETURN_IF_ERROR(r.Int("version", &got_version));
  if (got_version != version) {
    return r.Error("version", absl::StrFormat("%d, this build reads %d", got_version, version));
  }
  return r;
}

absl::Status ReadReportKey(wire::FieldReader& r, const std::string& stats, std::string* key) {
  std::string hex;
  VLLM_RETURN_IF_ERROR(r.String("report_key", 2 * kSpecReportKeyBytes, &hex));
  const bool datagrams = absl::StartsWith(stats, "udp://");
  std::optional<std::string> parsed = KeyFromHex(hex);
  if (datagrams != !hex.empty() || (datagrams && !parsed.has_value())) {
    return r.Error("report_key", absl::StrCat("expected ", 2 * kSpecReportKeyBytes,
                                              " hex digits with a udp:// report address, and "
                                              "none otherwise"));
  }
  key->clear();
  if (parsed.has_value()) *key = *std::move(parsed);
  return absl::OkStatus();
}

}  // namespace vllm::launcher
