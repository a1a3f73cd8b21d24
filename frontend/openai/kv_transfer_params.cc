#include "frontend/openai/kv_transfer_params.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "base/status_param.h"
#include "kv_transfer/codec.h"

namespace vllm::frontend {
namespace {

using base::InvalidParam;
using nlohmann::json;
using Body = nlohmann::ordered_json;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::string Param(absl::string_view key) { return absl::StrCat("kv_transfer_params.", key); }

// A short rendering of a JSON value for error messages.
std::string Show(const Body& value) {
  std::string text = value.dump(-1, ' ', false, Body::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

absl::Status WrongType(absl::string_view key, absl::string_view expected, const Body& value) {
  const std::string param = Param(key);
  return InvalidParam(param, absl::StrCat(param, " must be ", expected, ", got ", value.type_name(),
                                          " ", Show(value)));
}

// A JSON integer in [lo, hi]. Floats are refused: vLLM keeps the field a dict of Any, so
// nothing coerces 1.0 to an integer there either.
absl::StatusOr<int64_t> Int(absl::string_view key, const Body& value, int64_t lo, int64_t hi,
                            absl::string_view expected = "an integer") {
  if (!value.is_number_integer()) return WrongType(key, expected, value);
  // Unsigned: a JSON integer over INT64_MAX is out of every range here.
  const bool in_range = value.is_number_unsigned()
                            ? value.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                  static_cast<int64_t>(value.get<uint64_t>()) >= lo
                            : value.get<int64_t>() >= lo && value.get<int64_t>() <= hi;
  if (!in_range) {
    const std::string param = Param(key);
    return InvalidParam(param,
                        absl::StrCat(param, " must be in [", lo, ", ", hi, "], got ", Show(value)));
  }
  return value.get<int64_t>();
}

absl::Status ReadOptionalInt(absl::string_view key, const Body& value, int64_t lo, int64_t hi,
                             std::optional<int32_t>* out) {
  if (value.is_null()) {
    out->reset();
    return absl::OkStatus();
  }
  VLLM_ASSIGN_OR_RETURN(int64_t v, Int(key, value, lo, hi, "an integer or null"));
  *out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status ReadOptionalString(absl::string_view key, const Body& value, size_t max_bytes,
                                std::optional<std::string>* out) {
  if (value.is_null()) {
    out->reset();
    return absl::OkStatus();
  }
  if (!value.is_string()) return WrongType(key, "a string or null", value);
  const std::string& text = value.get_ref<const std::string&>();
  if (text.size() > max_bytes) {
    const std::string param = Param(key);
    return InvalidParam(
        param, absl::StrCat(param, " must be at most ", max_bytes, " bytes, got ", text.size()));
  }
  *out = text;
  return absl::OkStatus();
}

absl::Status ReadBool(absl::string_view key, const Body& value, bool* out) {
  if (value.is_null()) {
    *out = false;
    return absl::OkStatus();
  }
  if (!value.is_boolean()) return WrongType(key, "a boolean", value);
  *out = value.get<bool>();
  return absl::OkStatus();
}

absl::Status ReadBlockIds(absl::string_view key, const Body& value, std::vector<int32_t>* out) {
  out->clear();
  if (value.is_null()) return absl::OkStatus();
  constexpr absl::string_view kExpected = "an array of non-negative integers or null";
  if (!value.is_array()) return WrongType(key, kExpected, value);
  if (value.size() > kv_transfer::kMaxRemoteBlockIds) {
    const std::string param = Param(key);
    return InvalidParam(param, absl::StrCat(param, " has ", value.size(), " block ids; at most ",
                                            kv_transfer::kMaxRemoteBlockIds, " are allowed"));
  }
  out->reserve(value.size());
  for (const Body& id : value) {
    VLLM_ASSIGN_OR_RETURN(int64_t v, Int(key, id, 0, kInt32Max, kExpected));
    out->push_back(static_cast<int32_t>(v));
  }
  return absl::OkStatus();
}

// vLLM's NixlConnector keys that change nothing here: accepted with their neutral values only.
absl::Status CheckNeutral(absl::string_view key, const Body& value) {
  if (key == "dcp_size" || key == "pp_size") {
    if (value.is_null()) return absl::OkStatus();
    VLLM_ASSIGN_OR_RETURN(int64_t size, Int(key, value, 1, kInt32Max, "an integer or null"));
    if (size == 1) return absl::OkStatus();
    const std::string param = Param(key);
    return InvalidParam(param, absl::StrCat(param, " must be 1 or null (a prefill instance with ",
                                            key == "pp_size" ? "pipeline" : "decode-context",
                                            " parallelism is not supported), got ", size));
  }
  // remote_blocks_expiry_time, remote_registration_generation, transfer_mode: ignored.
  return absl::OkStatus();
}

absl::Status ReadKey(const std::string& key, const Body& value, kv_transfer::KVTransferParams* p) {
  if (key == "do_remote_decode") return ReadBool(key, value, &p->do_remote_decode);
  if (key == "do_remote_prefill") return ReadBool(key, value, &p->do_remote_prefill);
  if (key == "remote_engine_id") {
    return ReadOptionalString(key, value, kv_transfer::kMaxEngineIdBytes, &p->remote_engine_id);
  }
  if (key == "remote_request_id") {
    return ReadOptionalString(key, value, kv_transfer::kMaxRequestIdBytes, &p->remote_request_id);
  }
  if (key == "remote_host") {
    return ReadOptionalString(key, value, kv_transfer::kMaxHostBytes, &p->remote_host);
  }
  if (key == "remote_port") return ReadOptionalInt(key, value, 1, 65535, &p->remote_port);
  if (key == "tp_size") return ReadOptionalInt(key, value, 1, kv_transfer::kMaxTpSize, &p->tp_size);
  if (key == "remote_num_tokens") {
    return ReadOptionalInt(key, value, 0, kInt32Max, &p->remote_num_tokens);
  }
  if (key == "remote_block_ids") return ReadBlockIds(key, value, &p->remote_block_ids);
  if (key == "dcp_size" || key == "pp_size" || key == "remote_blocks_expiry_time" ||
      key == "remote_registration_generation" || key == "transfer_mode") {
    return CheckNeutral(key, value);
  }
  const std::string param = Param(key);
  return InvalidParam(param, absl::StrCat(param, " is not supported"));
}

json OptionalJson(const std::optional<std::string>& value) {
  return value.has_value() ? json(*value) : json(nullptr);
}
json OptionalJson(const std::optional<int32_t>& value) {
  return value.has_value() ? json(*value) : json(nullptr);
}

}  // namespace

absl::StatusOr<std::optional<kv_transfer::KVTransferParams>> ParseKvTransferParams(
    const Body& body) {
  const auto it = body.find("kv_transfer_params");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    return InvalidParam("kv_transfer_params",
                        absl::StrCat("kv_transfer_params must be an object, got ", it->type_name(),
                                     " ", Show(*it)));
  }
  kv_transfer::KVTransferParams params;
  for (const auto& [key, value] : it->items()) {
    VLLM_RETURN_IF_ERROR(ReadKey(key, value, &params));
  }
  return params;
}

json KvTransferParamsJson(const kv_transfer::KVTransferParams& p) {
  return json{{"do_remote_decode", p.do_remote_decode},
              {"do_remote_prefill", p.do_remote_prefill},
              {"remote_engine_id", OptionalJson(p.remote_engine_id)},
              {"remote_request_id", OptionalJson(p.remote_request_id)},
              {"remote_host", OptionalJson(p.remote_host)},
              {"remote_port", OptionalJson(p.remote_port)},
              {"remote_block_ids", p.remote_block_ids},
              {"tp_size", OptionalJson(p.tp_size)},
              {"remote_num_tokens", OptionalJson(p.remote_num_tokens)}};
}

}  // namespace vllm::frontend
