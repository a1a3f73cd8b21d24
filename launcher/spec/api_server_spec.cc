#include "launcher/spec/api_server_spec.h"

#include <msgpack.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/msgpack_fields.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "launcher/spec/spec_codec.h"

namespace vllm::launcher {
namespace {

using wire::FieldReader;
using wire::Packer;

constexpr std::string_view kSpecTag = "ApiServerSpec";
constexpr uint8_t kVersion = 3;
constexpr wire::UnpackLimits kSpecLimits{.max_array = kMaxServedModelNames,
                                         .max_map = 0,
                                         .max_str = kMaxChatTemplateBytes,
                                         .max_bin = config::kMaxEncodedConfigBytes,
                                         .max_depth = 3};
constexpr wire::UnpackLimits kMessageLimits{
    .max_array = 3, .max_map = 0, .max_str = kMaxSpecString, .max_bin = 0, .max_depth = 1};

constexpr std::string_view kBalancing[] = {"internal", "hybrid", "external"};
// frontend::HttpLogLevel's names (uvicorn's), in its order.
constexpr std::string_view kLogLevels[] = {"trace",   "debug", "info",
                                           "warning", "error", "critical"};
constexpr uint32_t kFrontendFields = 27;

absl::Status CheckLength(std::string_view field, const std::string& s, size_t max) {
  if (s.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("ApiServerSpec.", std::string(field), ": ",
                                                 s.size(), " bytes, over the limit of ", max));
}

absl::Status CheckFrontend(const FrontendSettings& f) {
  VLLM_RETURN_IF_ERROR(CheckLength("host", f.host, kMaxSpecString));
  for (const auto* list : {&f.http.api_keys, &f.http.allowed_origins, &f.http.allowed_methods,
                           &f.http.allowed_headers, &f.http.access_log_skip_paths}) {
    if (list->size() > kMaxServedModelNames) {
      return absl::InvalidArgumentError(
          absl::StrCat("ApiServerSpec.frontend: a list of more than ", kMaxServedModelNames));
    }
    for (const std::string& s : *list) VLLM_RETURN_IF_ERROR(CheckLength("http", s, kMaxSpecString));
  }
  VLLM_RETURN_IF_ERROR(CheckLength("root_path", f.http.root_path, kMaxSpecString));
  VLLM_RETURN_IF_ERROR(
      CheckLength("chat_template", f.chat_template.value_or(""), kMaxChatTemplateBytes));
  VLLM_RETURN_IF_ERROR(CheckLength("cluster_key_file", f.cluster_key_file, kMaxSpecString));
  if (f.served_model_names.size() > kMaxServedModelNames) {
    return absl::InvalidArgumentError(
        absl::StrCat("ApiServerSpec.served_model_names: more than ", kMaxServedModelNames));
  }
  for (const std::string& name : f.served_model_names) {
    VLLM_RETURN_IF_ERROR(CheckLength("served_model_names", name, kMaxSpecString));
  }
  return absl::OkStatus();
}

void PackFrontend(Packer& pk, const FrontendSettings& f) {
  pk.pack_array(kFrontendFields);
  pk.pack(f.host);
  pk.pack(f.port);
  pk.pack(f.http.api_keys);
  pk.pack(f.max_connections);
  wire::PackDouble(pk, f.shutdown_timeout_s);
  pk.pack(f.served_model_names);
  wire::PackOptional(pk, f.chat_template);
  pk.pack(f.multi_node);
  pk.pack(std::string(kBalancing[static_cast<int>(f.dp_load_balancing)]));
  pk.pack(f.cluster_key_file);
  const frontend::HttpOptions& h = f.http;
  pk.pack(h.root_path);
  pk.pack(h.allowed_origins);
  pk.pack(h.allowed_methods);
  pk.pack(h.allowed_headers);
  pk.pack(h.allow_credentials);
  pk.pack(std::string(kLogLevels[static_cast<int>(h.log_level)]));
  pk.pack(h.access_log);
  pk.pack(h.log_requests);
  wire::PackOptional(pk, h.max_log_len);
  pk.pack(h.log_stats);
  pk.pack(h.request_id_headers);
  pk.pack(h.disable_fastapi_docs);
  pk.pack(h.access_log_skip_paths);
  pk.pack(h.h11_max_incomplete_event_size);
  pk.pack(h.h11_max_header_count);
  pk.pack(h.server_load_tracking);
  pk.pack(h.sse_keep_alive_interval_s);
}

absl::Status ReadHttp(FieldReader& r, frontend::HttpOptions* h) {
  VLLM_RETURN_IF_ERROR(r.String("root_path", kMaxSpecString, &h->root_path));
  VLLM_RETURN_IF_ERROR(r.StringList("allowed_origins", kMaxSpecString, &h->allowed_origins));
  VLLM_RETURN_IF_ERROR(r.StringList("allowed_methods", kMaxSpecString, &h->allowed_methods));
  VLLM_RETURN_IF_ERROR(r.StringList("allowed_headers", kMaxSpecString, &h->allowed_headers));
  VLLM_RETURN_IF_ERROR(r.Bool("allow_credentials", &h->allow_credentials));
  std::string level;
  VLLM_RETURN_IF_ERROR(r.String("uvicorn_log_level", 16, &level));
  bool known = false;
  for (size_t i = 0; i < std::size(kLogLevels); ++i) {
    if (level == kLogLevels[i]) {
      h->log_level = static_cast<frontend::HttpLogLevel>(i);
      known = true;
    }
  }
  if (!known) return r.Error("uvicorn_log_level", "expected trace .. critical");
  VLLM_RETURN_IF_ERROR(r.Bool("access_log", &h->access_log));
  VLLM_RETURN_IF_ERROR(r.Bool("log_requests", &h->log_requests));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("max_log_len", &h->max_log_len));
  VLLM_RETURN_IF_ERROR(r.Bool("log_stats", &h->log_stats));
  VLLM_RETURN_IF_ERROR(r.Bool("request_id_headers", &h->request_id_headers));
  VLLM_RETURN_IF_ERROR(r.Bool("disable_fastapi_docs", &h->disable_fastapi_docs));
  VLLM_RETURN_IF_ERROR(
      r.StringList("access_log_skip_paths", kMaxSpecString, &h->access_log_skip_paths));
  VLLM_RETURN_IF_ERROR(r.Int("h11_max_incomplete_event_size", &h->h11_max_incomplete_event_size));
  VLLM_RETURN_IF_ERROR(r.Int("h11_max_header_count", &h->h11_max_header_count));
  VLLM_RETURN_IF_ERROR(r.Bool("server_load_tracking", &h->server_load_tracking));
  VLLM_RETURN_IF_ERROR(r.Int("sse_keep_alive_interval_s", &h->sse_keep_alive_interval_s));
  if (h->sse_keep_alive_interval_s < 0) {
    return r.Error("sse_keep_alive_interval_s", "expected 0 or more");
  }
  return absl::OkStatus();
}

void PackCoordinator(Packer& pk, const DpCoordinatorAddresses& c) {
  pk.pack_array(4);
  pk.pack(CutSpecString(c.stats));
  pk.pack(CutSpecString(c.publish));
  pk.pack(CutSpecString(c.waves));
  pk.pack(absl::BytesToHexString(c.report_key.substr(0, kSpecReportKeyBytes)));
}

absl::Status ReadFrontend(const msgpack::object& o, FrontendSettings* f) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r,
                        FieldReader::Open(o, "ApiServerSpec.frontend", kFrontendFields));
  VLLM_RETURN_IF_ERROR(r.String("host", kMaxSpecString, &f->host));
  VLLM_RETURN_IF_ERROR(r.Int("port", &f->port));
  if (f->port < 0 || f->port > 65535) return r.Error("port", "expected 0 .. 65535");
  VLLM_RETURN_IF_ERROR(r.StringList("api_keys", kMaxSpecString, &f->http.api_keys));
  VLLM_RETURN_IF_ERROR(r.Int("max_connections", &f->max_connections));
  if (f->max_connections < 0 || f->max_connections > (int64_t{1} << 24)) {
    return r.Error("max_connections", "expected 0 .. 2^24");
  }
  VLLM_RETURN_IF_ERROR(r.Double("shutdown_timeout_s", &f->shutdown_timeout_s));
  if (!(f->shutdown_timeout_s >= 0 && f->shutdown_timeout_s <= 86400)) {
    return r.Error("shutdown_timeout_s", "expected 0 .. 86400");
  }
  VLLM_RETURN_IF_ERROR(r.StringList("served_model_names", kMaxSpecString, &f->served_model_names));
  if (f->served_model_names.empty()) return r.Error("served_model_names", "empty");
  VLLM_RETURN_IF_ERROR(r.OptionalString("chat_template", kMaxChatTemplateBytes, &f->chat_template));
  VLLM_RETURN_IF_ERROR(r.Bool("multi_node", &f->multi_node));
  std::string balancing;
  VLLM_RETURN_IF_ERROR(r.String("dp_load_balancing", 16, &balancing));
  bool known = false;
  for (size_t i = 0; i < std::size(kBalancing); ++i) {
    if (balancing == kBalancing[i]) {
      f->dp_load_balancing = static_cast<DpLoadBalancing>(i);
      known = true;
    }
  }
  if (!known) return r.Error("dp_load_balancing", "expected internal, hybrid or external");
  VLLM_RETURN_IF_ERROR(r.String("cluster_key_file", kMaxSpecString, &f->cluster_key_file));
  return ReadHttp(r, &f->http);
}

void PackServing(Packer& pk, const frontend::ServingFlags& s) {
  pk.pack_array(11);
  pk.pack(s.generation_config);
  pk.pack(s.override_generation_config);
  pk.pack(s.chat_template_content_format);
  pk.pack(s.default_chat_template_kwargs);
  pk.pack(s.return_tokens_as_token_ids);
  pk.pack(s.enable_force_include_usage);
  pk.pack(s.response_role);
  pk.pack(s.enable_prompt_tokens_details);
  pk.pack(s.enable_per_request_metrics);
  pk.pack(s.enable_log_outputs);
  pk.pack(s.enable_log_deltas);
}

absl::Status ReadServing(const msgpack::object& o, frontend::ServingFlags* s) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ApiServerSpec.serving", 11));
  VLLM_RETURN_IF_ERROR(r.String("generation_config", kMaxSpecString, &s->generation_config));
  VLLM_RETURN_IF_ERROR(
      r.String("override_generation_config", kMaxSpecString, &s->override_generation_config));
  VLLM_RETURN_IF_ERROR(
      r.String("chat_template_content_format", 16, &s->chat_template_content_format));
  const std::string& f = s->chat_template_content_format;
  if (f != "auto" && f != "string" && f != "openai") {
    return r.Error("chat_template_content_format", "expected auto, string or openai");
  }
  VLLM_RETURN_IF_ERROR(
      r.String("default_chat_template_kwargs", kMaxSpecString, &s->default_chat_template_kwargs));
  VLLM_RETURN_IF_ERROR(r.Bool("return_tokens_as_token_ids", &s->return_tokens_as_token_ids));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_force_include_usage", &s->enable_force_include_usage));
  VLLM_RETURN_IF_ERROR(r.String("response_role", kMaxSpecString, &s->response_role));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_prompt_tokens_details", &s->enable_prompt_tokens_details));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_per_request_metrics", &s->enable_per_request_metrics));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_log_outputs", &s->enable_log_outputs));
  return r.Bool("enable_log_deltas", &s->enable_log_deltas);
}

absl::Status ReadCoordinator(const msgpack::object& o, DpCoordinatorAddresses* c) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ApiServerSpec.coordinator", 4));
  VLLM_RETURN_IF_ERROR(r.String("stats", kMaxSpecString, &c->stats));
  VLLM_RETURN_IF_ERROR(r.String("publish", kMaxSpecString, &c->publish));
  VLLM_RETURN_IF_ERROR(r.String("waves", kMaxSpecString, &c->waves));
  if (c->publish.empty() != c->stats.empty() || (c->publish.empty() && !c->waves.empty())) {
    return r.Error("publish", "a coordinator has both a stats and a publish address");
  }
  return ReadReportKey(r, c->stats, &c->report_key);
}

absl::StatusOr<config::VllmConfig> ReadConfig(const msgpack::object& o) {
  if (o.type != msgpack::type::BIN) {
    return absl::InvalidArgumentError("ApiServerSpec.vllm_config: expected bin");
  }
  absl::StatusOr<config::VllmConfig> c =
      config::DecodeVllmConfig(std::string_view(o.via.bin.ptr, o.via.bin.size));
  if (!c.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ApiServerSpec.vllm_config: ", c.status().message()));
  }
  return c;
}

}  // namespace

absl::StatusOr<std::string> EncodeApiServerSpec(const ApiServerSpec& s) {
  VLLM_RETURN_IF_ERROR(CheckFrontend(s.frontend));
  VLLM_RETURN_IF_ERROR(CheckLength("serving.override_generation_config",
                                   s.serving.override_generation_config, kMaxSpecString));
  VLLM_RETURN_IF_ERROR(
      CheckLength("serving.generation_config", s.serving.generation_config, kMaxSpecString));
  VLLM_RETURN_IF_ERROR(CheckLength("serving.default_chat_template_kwargs",
                                   s.serving.default_chat_template_kwargs, kMaxSpecString));
  VLLM_RETURN_IF_ERROR(
      CheckLength("serving.response_role", s.serving.response_role, kMaxSpecString));
  const std::string config = config::EncodeVllmConfig(s.config);
  if (config.size() > config::kMaxEncodedConfigBytes) {
    return absl::InvalidArgumentError("ApiServerSpec.vllm_config: over the limit");
  }
  msgpack::sbuffer b;
  Packer pk(b);
  pk.pack_array(8);
  pk.pack(std::string(kSpecTag));
  pk.pack(kVersion);
  pk.pack(s.index);
  pk.pack(s.count);
  pk.pack_bin(static_cast<uint32_t>(config.size()));
  pk.pack_bin_body(config.data(), static_cast<uint32_t>(config.size()));
  PackFrontend(pk, s.frontend);
  PackCoordinator(pk, s.coordinator);
  PackServing(pk, s.serving);
  if (b.size() > kMaxApiServerSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ApiServerSpec: ", b.size(), " bytes, over the limit of ", kMaxApiServerSpecBytes));
  }
  return std::string(b.data(), b.size());
}

absl::StatusOr<ApiServerSpec> DecodeApiServerSpec(std::string_view bytes) {
  VLLM_ASSIGN_OR_RETURN(auto handle,
                        UnpackSpec(bytes, kSpecTag, kMaxApiServerSpecBytes, kSpecLimits));
  VLLM_ASSIGN_OR_RETURN(FieldReader r, OpenSpec(handle.get(), kSpecTag, kVersion, 8));
  ApiServerSpec s;
  VLLM_RETURN_IF_ERROR(r.Int("index", &s.index));
  VLLM_RETURN_IF_ERROR(r.Int("count", &s.count));
  if (s.count < 1 || s.count > kMaxApiServers) {
    return r.Error("count", absl::StrCat("expected 1 .. ", kMaxApiServers));
  }
  if (s.index < 0 || s.index >= s.count) return r.Error("index", "expected 0 .. count - 1");
  VLLM_ASSIGN_OR_RETURN(s.config, ReadConfig(r.Next()));
  VLLM_RETURN_IF_ERROR(ReadFrontend(r.Next(), &s.frontend));
  VLLM_RETURN_IF_ERROR(ReadCoordinator(r.Next(), &s.coordinator));
  VLLM_RETURN_IF_ERROR(ReadServing(r.Next(), &s.serving));
  return s;
}

std::string EncodeApiServerMessage(const ApiServerMessage& m) {
  msgpack::sbuffer b;
  Packer pk(b);
  switch (m.kind) {
    case ApiServerMessage::Kind::kHandshake:
      pk.pack_array(2);
      pk.pack(std::string("handshake"));
      pk.pack(CutSpecString(m.text));
      break;
    case ApiServerMessage::Kind::kReady:
      pk.pack_array(2);
      pk.pack(std::string("ready"));
      pk.pack(m.number);
      break;
    case ApiServerMessage::Kind::kEngineDead:
      pk.pack_array(3);
      pk.pack(std::string("engine_dead"));
      pk.pack(m.number);
      pk.pack(CutSpecString(m.text));
      break;
  }
  return std::string(b.data(), b.size());
}

absl::StatusOr<ApiServerMessage> DecodeApiServerMessage(std::string_view bytes) {
  constexpr std::string_view kWhat = "ApiServerMessage";
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackSpec(bytes, kWhat, 2 * kMaxSpecString, kMessageLimits));
  const msgpack::object& o = handle.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size < 2 ||
      o.via.array.ptr[0].type != msgpack::type::STR) {
    return absl::InvalidArgumentError("ApiServerMessage: expected [kind, ...]");
  }
  const msgpack::object& k = o.via.array.ptr[0];
  const std::string_view kind(k.via.str.ptr, k.via.str.size);
  ApiServerMessage m;
  if (kind == "handshake") {
    m.kind = ApiServerMessage::Kind::kHandshake;
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ApiServerMessage.handshake", 2));
    r.Next();
    VLLM_RETURN_IF_ERROR(r.String("address", kMaxSpecString, &m.text));
    if (m.text.empty()) return r.Error("address", "empty");
  } else if (kind == "ready") {
    m.kind = ApiServerMessage::Kind::kReady;
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ApiServerMessage.ready", 2));
    r.Next();
    VLLM_RETURN_IF_ERROR(r.Int("port", &m.number));
    if (m.number < 1 || m.number > 65535) return r.Error("port", "expected 1 .. 65535");
  } else if (kind == "engine_dead") {
    m.kind = ApiServerMessage::Kind::kEngineDead;
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ApiServerMessage.engine_dead", 3));
    r.Next();
    VLLM_RETURN_IF_ERROR(r.Int("rank", &m.number));
    if (m.number < 0) return r.Error("rank", "expected >= 0");
    VLLM_RETURN_IF_ERROR(r.String("why", kMaxSpecString, &m.text));
  } else {
    return absl::InvalidArgumentError("ApiServerMessage: unknown kind");
  }
  return m;
}

}  // namespace vllm::launcher
