#include "core/kv_connector.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_util.h"
#include "base/status_macros.h"
#include "core/kv_connector_offload.h"
#include "kv_transfer/file_store.h"
#include "spdlog/spdlog.h"
#include "xxhash.h"

namespace vllm::core {
namespace {

absl::Status ExtraConfigError(absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-transfer-config: kv_connector_extra_config \"", key, "\": ", problem));
}

// kv_connector_extra_config as a JSON object (empty text: {}), with only `known` keys.
absl::StatusOr<nlohmann::json> ParseExtraConfig(const std::string& text,
                                                std::span<const std::string_view> known,
                                                const std::string& connector) {
  if (text.empty()) return nlohmann::json::object();
  VLLM_ASSIGN_OR_RETURN(nlohmann::json j,
                        base::ParseJson(text, "--kv-transfer-config kv_connector_extra_config", 8));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        "--kv-transfer-config: kv_connector_extra_config must be a JSON object");
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return ExtraConfigError(key, absl::StrCat("unknown key for ", connector));
    }
  }
  return j;
}

// The file key of a prompt prefix: 32 hex digits of XXH3-128 over the fingerprint, the salt and
// the tokens.
std::string PromptKey(std::string_view fingerprint, const Request& request, int32_t num_tokens) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, fingerprint.data(), fingerprint.size());
  const char sep = '\0';
  XXH3_128bits_update(state, &sep, 1);
  XXH3_128bits_update(state, request.cache_salt.data(), request.cache_salt.size());
  XXH3_128bits_update(state, &sep, 1);
  XXH3_128bits_update(state, request.all_token_ids.data(),
                      static_cast<size_t>(num_tokens) * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

// vLLM's ExampleConnector, loading asynchronously (a corrupt or missing file then takes the
// failed-load path instead of failing the step).
class ExampleConnectorScheduler final : public KVConnectorScheduler {
 public:
  ExampleConnectorScheduler(std::string storage_path, std::string fingerprint, int32_t block_size,
                            int32_t tp_size)
      : storage_path_(std::move(storage_path)),
        fingerprint_(std::move(fingerprint)),
        block_size_(block_size),
        tp_size_(tp_size) {}

  std::string_view name() const override { return "ExampleConnector"; }

  Match GetNumNewMatchedTokens(const Request& request, int32_t num_computed_tokens) override {
    if (tried_.contains(request.request_id)) return {};  // a failed load recomputes
    // An entry is one whole prefix: loading it over a local hit would rewrite blocks other
    // requests share (with values another batch computed), so only a request with no local
    // hit loads.
    if (num_computed_tokens > 0) return {};
    const int32_t aligned = AlignedPromptTokens(request);
    if (aligned <= 0) return {};
    const std::string key = PromptKey(fingerprint_, request, aligned);
    for (int32_t rank = 0; rank < tp_size_; ++rank) {
      if (!kv_transfer::file_store::Exists(storage_path_, key, rank)) return {};
    }
    return {aligned - num_computed_tokens, true};
  }

  void UpdateStateAfterAlloc(const Request& request, int32_t num_local_blocks,
                             int32_t num_external_tokens) override {
    if (num_external_tokens <= 0) return;
    tried_.insert(request.request_id);
    const int32_t aligned = AlignedPromptTokens(request);
    kv_transfer::LoadSpec& spec = pending_.loads.emplace_back();
    spec.req_id = request.request_id;
    // The file holds the whole aligned prefix; there was no local hit (num_local_blocks 0).
    spec.local_block_ids.assign(request.block_ids.begin() + num_local_blocks,
                                request.block_ids.begin() + aligned / block_size_);
    spec.num_tokens = aligned;
    spec.key = PromptKey(fingerprint_, request, aligned);
    stored_.insert(request.request_id);  // already in storage
  }

  void OnScheduled(const Request& request) override {
    const int32_t aligned = AlignedPromptTokens(request);
    if (aligned <= 0 || request.num_computed_tokens < aligned) return;
    if (!stored_.insert(request.request_id).second) return;
    const std::string key = PromptKey(fingerprint_, request, aligned);
    if (kv_transfer::file_store::Exists(storage_path_, key, 0)) return;
    kv_transfer::SaveSpec& spec = pending_.saves.emplace_back();
    spec.req_id = request.request_id;
    spec.block_ids.assign(request.block_ids.begin(),
                          request.block_ids.begin() + aligned / block_size_);
    spec.num_tokens = aligned;
    spec.key = key;
  }

  kv_transfer::KVConnectorMetadata BuildConnectorMeta() override {
    return std::exchange(pending_, {});
  }

  Finished RequestFinished(const Request& request) override {
    tried_.erase(request.request_id);
    stored_.erase(request.request_id);
    return {};
  }

 private:
  // vLLM's align_to_block_size(len(prompt) - 1): the prompt's whole blocks, never its last
  // token (which is computed to sample from).
  int32_t AlignedPromptTokens(const Request& request) const {
    return (request.num_prompt_tokens - 1) / block_size_ * block_size_;
  }

  const std::string storage_path_;
  const std::string fingerprint_;
  const int32_t block_size_;
  const int32_t tp_size_;
  kv_transfer::KVConnectorMetadata pending_;
  // Requests whose load was tried (never again) and those stored or in storage.
  absl::flat_hash_set<std::string> tried_;
  absl::flat_hash_set<std::string> stored_;
};

// NixlConnector's protocol, pull mode (vLLM's NixlConnectorScheduler).
class NixlConnectorScheduler final : public KVConnectorScheduler {
 public:
  NixlConnectorScheduler(std::string engine_id, SideChannel side_channel, int32_t block_size,
                         int32_t tp_size, absl::Duration lease)
      : engine_id_(std::move(engine_id)),
        side_channel_(std::move(side_channel)),
        block_size_(block_size),
        tp_size_(tp_size),
        lease_(lease) {}

  std::string_view name() const override { return "NixlConnector"; }

  Match GetNumNewMatchedTokens(const Request& request, int32_t num_computed_tokens) override {
    if (!WantsRemotePrefill(request)) return {};
    const kv_transfer::KVTransferParams& p = *request.kv_transfer_params;
    const int32_t prompt = request.num_prompt_tokens;
    const auto num_blocks = static_cast<size_t>((prompt + block_size_ - 1) / block_size_);
    if (p.remote_block_ids.size() != num_blocks) {
      spdlog::warn(
          "NixlConnector: request {}: kv_transfer_params.remote_block_ids has {} blocks, its "
          "prompt of {} tokens needs {}: computing the prompt locally",
          request.request_id, p.remote_block_ids.size(), prompt, num_blocks);
      processed_.insert(request.request_id);
      return {};
    }
    if (p.tp_size.has_value() && *p.tp_size != tp_size_) {
      spdlog::warn(
          "NixlConnector: request {}: the prefill instance has tensor-parallel size {}, this "
          "one {}; heterogeneous TP is not built: computing the prompt locally (the prefill "
          "side frees its blocks when their lease ends)",
          request.request_id, *p.tp_size, tp_size_);
      processed_.insert(request.request_id);
      return {};
    }
    const int32_t count = prompt - num_computed_tokens;
    return {std::max(count, 0), count > 0};
  }

  void UpdateStateAfterAlloc(const Request& request, int32_t num_local_blocks,
                             int32_t num_external_tokens) override {
    if (!WantsRemotePrefill(request)) return;
    processed_.insert(request.request_id);
    if (num_external_tokens <= 0) {  // a full local hit: only release the remote blocks
      NotifyOnly(request);
      return;
    }
    const kv_transfer::KVTransferParams& p = *request.kv_transfer_params;
    kv_transfer::LoadSpec& spec = MakeLoad(request);
    const auto first = static_cast<size_t>(num_local_blocks);
    spec.local_block_ids.assign(
        request.block_ids.begin() + num_local_blocks,
        request.block_ids.begin() + static_cast<std::ptrdiff_t>(p.remote_block_ids.size()));
    spec.remote_block_ids.assign(p.remote_block_ids.begin() + static_cast<std::ptrdiff_t>(first),
                                 p.remote_block_ids.end());
    spec.num_tokens = num_external_tokens;
  }

  kv_transfer::KVConnectorMetadata BuildConnectorMeta() override {
    return std::exchange(pending_, {});
  }

  Finished RequestFinished(const Request& request) override {
    const bool processed = processed_.erase(request.request_id) > 0;
    if (!request.kv_transfer_params.has_value()) return {};
    const kv_transfer::KVTransferParams& p = *request.kv_transfer_params;
    if (p.do_remote_prefill && !processed) {
      // Finished (aborted) before its load was set up: the prefill side still holds the
      // blocks; tell it to release them.
      NotifyOnly(request);
      return {};
    }
    if (!p.do_remote_decode) return {};
    if (request.status != RequestStatus::kFinishedLengthCapped &&
        request.status != RequestStatus::kFinishedStopped) {
      return {};  // aborted or failed: nothing to read
    }
    const int32_t num_tokens = std::min(request.num_computed_tokens, request.num_prompt_tokens);
    const auto num_blocks = static_cast<size_t>((num_tokens + block_size_ - 1) / block_size_);
    Finished f;
    kv_transfer::KVTransferParams& out = f.params.emplace();
    out.do_remote_prefill = true;
    out.remote_engine_id = engine_id_;
    out.remote_request_id = request.request_id;
    out.remote_host = side_channel_.host;
    out.remote_port = side_channel_.port;
    out.tp_size = tp_size_;
    out.remote_num_tokens = num_tokens;
    out.remote_block_ids.assign(
        request.block_ids.begin(),
        request.block_ids.begin() +
            static_cast<std::ptrdiff_t>(std::min(num_blocks, request.block_ids.size())));
    f.delay_free_blocks = !out.remote_block_ids.empty();
    if (f.delay_free_blocks) {
      pending_.sends.push_back({request.request_id, out.remote_block_ids});
      held_deadline_[request.request_id] = absl::Now() + lease_;
    }
    return f;
  }

  std::vector<std::string> TakeExpired(absl::Time now) override {
    std::vector<std::string> expired;
    for (const auto& [id, deadline] : held_deadline_) {
      if (deadline <= now) expired.push_back(id);
    }
    for (const std::string& id : expired) {
      held_deadline_.erase(id);
      pending_.sends_released.push_back(id);
      spdlog::warn(
          "NixlConnector: request {}: no decode instance read its KV within {}; its blocks are "
          "freed",
          id, absl::FormatDuration(lease_));
    }
    return expired;
  }

  void OnSendingFinished(std::span<const std::string> req_ids) override {
    for (const std::string& id : req_ids) held_deadline_.erase(id);
  }

 private:
  bool WantsRemotePrefill(const Request& request) const {
    return request.kv_transfer_params.has_value() &&
           request.kv_transfer_params->do_remote_prefill &&
           !processed_.contains(request.request_id) &&
           request.kv_transfer_params->remote_host.has_value() &&
           request.kv_transfer_params->remote_port.has_value() &&
           request.kv_transfer_params->remote_engine_id.has_value() &&
           request.kv_transfer_params->remote_request_id.has_value();
  }

  kv_transfer::LoadSpec& MakeLoad(const Request& request) {
    const kv_transfer::KVTransferParams& p = *request.kv_transfer_params;
    kv_transfer::LoadSpec& spec = pending_.loads.emplace_back();
    spec.req_id = request.request_id;
    spec.remote_engine_id = *p.remote_engine_id;
    spec.remote_request_id = *p.remote_request_id;
    spec.remote_host = *p.remote_host;
    spec.remote_port = *p.remote_port;
    spec.remote_tp_size = p.tp_size.value_or(tp_size_);
    return spec;
  }

  // A load of no blocks: the worker only tells the prefill side it may free them.
  void NotifyOnly(const Request& request) {
    const kv_transfer::KVTransferParams& p = *request.kv_transfer_params;
    if (!p.remote_host.has_value() || !p.remote_port.has_value() ||
        !p.remote_engine_id.has_value() || !p.remote_request_id.has_value()) {
      return;
    }
    MakeLoad(request);
  }

  const std::string engine_id_;
  const SideChannel side_channel_;
  const int32_t block_size_;
  const int32_t tp_size_;
  const absl::Duration lease_;
  kv_transfer::KVConnectorMetadata pending_;
  absl::flat_hash_set<std::string> processed_;
  absl::flat_hash_map<std::string, absl::Time> held_deadline_;
};

absl::StatusOr<int64_t> EnvInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int64_t out = 0;
  if (!absl::SimpleAtoi(v, &out) || out < lo || out > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s=%s: expected an integer in [%d, %d]", name, v, lo, hi));
  }
  return out;
}

}  // namespace

absl::StatusOr<SideChannel> ResolveSideChannel(const config::VllmConfig& config) {
  SideChannel sc;
  const char* host = std::getenv("VLLM_NIXL_SIDE_CHANNEL_HOST");
  sc.host = host != nullptr && *host != '\0' ? host : "localhost";
  if (sc.host.size() > kv_transfer::kMaxHostBytes) {
    return absl::InvalidArgumentError("VLLM_NIXL_SIDE_CHANNEL_HOST is too long");
  }
  VLLM_ASSIGN_OR_RETURN(const int64_t base, EnvInt("VLLM_NIXL_SIDE_CHANNEL_PORT", 5600, 1, 65535));
  const int64_t tp = config.parallel.tensor_parallel_size;
  const int64_t port = base + int64_t{config.parallel.data_parallel_rank} * tp;
  if (port + tp - 1 > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "VLLM_NIXL_SIDE_CHANNEL_PORT=%d: data-parallel rank %d with TP %d needs ports up to %d",
        base, config.parallel.data_parallel_rank, tp, port + tp - 1));
  }
  sc.port = static_cast<int32_t>(port);
  return sc;
}

absl::StatusOr<std::string> ExampleStoragePath(const config::VllmConfig& config) {
  const config::KvTransferConfig& kv = config.kv_transfer;
  static constexpr std::string_view kKnown[] = {"shared_storage_path"};
  VLLM_ASSIGN_OR_RETURN(nlohmann::json extra,
                        ParseExtraConfig(kv.kv_connector_extra_config, kKnown, kv.kv_connector));
  if (!extra.contains("shared_storage_path")) return std::string("/tmp");  // vLLM's default
  if (!extra["shared_storage_path"].is_string()) {
    return ExtraConfigError("shared_storage_path", "expected a string");
  }
  return extra["shared_storage_path"].get<std::string>();
}

absl::StatusOr<std::unique_ptr<KVConnectorScheduler>> MakeKVConnectorScheduler(
    const config::VllmConfig& config, const KVConnectorContext& context) {
  const config::KvTransferConfig& kv = config.kv_transfer;
  if (kv.kv_connector.empty()) return std::unique_ptr<KVConnectorScheduler>();
  const int32_t block_size = config.cache.block_size;
  const int32_t tp = config.parallel.tensor_parallel_size;
  if (kv.kv_buffer_device != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-transfer-config: kv_buffer_device \"", kv.kv_buffer_device,
                     "\": the connectors here move KV through host memory; use \"cpu\""));
  }
  if (config.parallel.pipeline_parallel_size > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-transfer-config: ", kv.kv_connector,
        " with --pipeline-parallel-size > 1 is not built (each stage would transfer its layers)"));
  }
  if (kv.kv_connector == "ExampleConnector") {
    VLLM_ASSIGN_OR_RETURN(std::string path, ExampleStoragePath(config));
    return std::unique_ptr<KVConnectorScheduler>(
        new ExampleConnectorScheduler(path, context.fingerprint, block_size, tp));
  }
  if (kv.kv_connector == "NixlConnector") {
    static constexpr std::string_view kKnown[] = {"kv_lease_duration", "backends"};
    VLLM_ASSIGN_OR_RETURN(nlohmann::json extra,
                          ParseExtraConfig(kv.kv_connector_extra_config, kKnown, kv.kv_connector));
    int64_t lease_s = 480;  // VLLM_NIXL_ABORT_REQUEST_TIMEOUT's default (no heartbeats here)
    if (extra.contains("kv_lease_duration")) {
      const nlohmann::json& v = extra["kv_lease_duration"];
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 86400) {
        return ExtraConfigError("kv_lease_duration", "expected seconds in [1, 86400]");
      }
      lease_s = v.get<int64_t>();
    }
    if (extra.contains("backends")) {
      const nlohmann::json& b = extra["backends"];
      bool strings = b.is_array() && !b.empty();
      for (const nlohmann::json& e : b) strings = strings && e.is_string();
      if (!strings) return ExtraConfigError("backends", "expected a non-empty list of strings");
      // vLLM picks NIXL's backends (UCX, ...); here one transport serves them all.
      spdlog::info(
          "NixlConnector: backends {} asked for; the KV moves over this runtime's "
          "ZMQ/TCP transport (docs/DECISIONS.md)",
          b.dump());
    }
    VLLM_ASSIGN_OR_RETURN(SideChannel side_channel, ResolveSideChannel(config));
    return std::unique_ptr<KVConnectorScheduler>(new NixlConnectorScheduler(
        context.engine_id, std::move(side_channel), block_size, tp, absl::Seconds(lease_s)));
  }
  if (kv.kv_connector == "OffloadingConnector") {
    return MakeOffloadingConnectorScheduler(config, context);
  }
  return absl::InvalidArgumentError(absl::StrCat("--kv-transfer-config: kv_connector \"",
                                                 kv.kv_connector,
                                                 "\" has no scheduler side in this engine"));
}

}  // namespace vllm::core
