#include "launcher/spec/coordinator_spec.h"

#include <msgpack.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "launcher/spec/spec_codec.h"

namespace vllm::launcher {
namespace {

using wire::FieldReader;

constexpr std::string_view kSpecTag = "DpCoordinatorSpec";
constexpr std::string_view kAddressesTag = "DpCoordinatorAddresses";
constexpr uint8_t kVersion = 1;
constexpr wire::UnpackLimits kLimits{
    .max_array = 8, .max_map = 0, .max_str = kMaxSpecString, .max_bin = 0, .max_depth = 1};

}  // namespace

std::string EncodeDpCoordinatorSpec(const DpCoordinatorSpec& s) {
  msgpack::sbuffer b;
  wire::Packer pk(b);
  pk.pack_array(7);
  pk.pack(std::string(kSpecTag));
  pk.pack(kVersion);
  pk.pack(s.num_engines);
  pk.pack(s.api_servers);
  pk.pack(CutSpecString(s.tcp_host));
  pk.pack(s.waves);
  pk.pack(CutSpecString(s.cluster_key_file));
  return std::string(b.data(), b.size());
}

absl::StatusOr<DpCoordinatorSpec> DecodeDpCoordinatorSpec(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto handle,
                        UnpackSpec(bytes, kSpecTag, kMaxCoordinatorSpecBytes, kLimits));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, OpenSpec(handle.get(), kSpecTag, kVersion, 7));
  DpCoordinatorSpec s;
  VLLM_RETURN_IF_ERROR(r.Int("num_engines", &s.num_engines));
  if (s.num_engines < 1 || s.num_engines > kSpecMaxDpEngines) {
    return r.Error("num_engines", absl::StrCat("expected 1 .. ", kSpecMaxDpEngines));
  }
  VLLM_RETURN_IF_ERROR(r.Int("api_servers", &s.api_servers));
  if (s.api_servers < 1 || s.api_servers > 1024)
    return r.Error("api_servers", "expected 1 .. 1024");
  VLLM_RETURN_IF_ERROR(r.String("tcp_host", kMaxSpecString, &s.tcp_host));
  VLLM_RETURN_IF_ERROR(r.Bool("waves", &s.waves));
  VLLM_RETURN_IF_ERROR(r.String("cluster_key_file", kMaxSpecString, &s.cluster_key_file));
  return s;
}

std::string EncodeDpCoordinatorAddresses(const DpCoordinatorAddresses& a) {
  msgpack::sbuffer b;
  wire::Packer pk(b);
  pk.pack_array(6);
  pk.pack(std::string(kAddressesTag));
  pk.pack(kVersion);
  pk.pack(CutSpecString(a.stats));
  pk.pack(CutSpecString(a.publish));
  pk.pack(CutSpecString(a.waves));
  pk.pack(absl::BytesToHexString(a.report_key.substr(0, kSpecReportKeyBytes)));
  return std::string(b.data(), b.size());
}

absl::StatusOr<DpCoordinatorAddresses> DecodeDpCoordinatorAddresses(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto handle,
                        UnpackSpec(bytes, kAddressesTag, kMaxCoordinatorSpecBytes, kLimits));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, OpenSpec(handle.get(), kAddressesTag, kVersion, 6));
  DpCoordinatorAddresses a;
  VLLM_RETURN_IF_ERROR(r.String("stats", kMaxSpecString, &a.stats));
  VLLM_RETURN_IF_ERROR(r.String("publish", kMaxSpecString, &a.publish));
  VLLM_RETURN_IF_ERROR(r.String("waves", kMaxSpecString, &a.waves));
  if (a.stats.empty() || a.publish.empty()) return r.Error("stats", "empty address");
  VLLM_RETURN_IF_ERROR(ReadReportKey(r, a.stats, &a.report_key));
  return a;
}

}  // namespace vllm::launcher
