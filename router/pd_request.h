// P/D disaggregation's request rewriting, as vLLM's NixlConnector proxy does it (vLLM's
// toy_proxy_server.py; docs/PD.md): pure functions of JSON values, without the network.
// The router builds a prefill instance's body from the client's, reads the kv_transfer_params
// of the prefill's answer and puts them into the decode instance's body.
//
// Bounds: a client's body is at most --max-payload-size bytes (the router reads no more) and
// is parsed with base::ParseJson (nesting over base::kMaxJsonDepth refused before parsing), so
// the JSON documents here are bounded like the router's other body handling. Unlike routing
// (ExtractRoutingKeys, no document), P/D builds one document per request: it rewrites bodies.
// Thread-compatible: no state.
#ifndef VLLM_ROUTER_PD_REQUEST_H_
#define VLLM_ROUTER_PD_REQUEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace vllm::router {

// The body of a client's /v1/completions or /v1/chat/completions request as a JSON object.
// InvalidArgument (a message for the client) when it is not JSON, nests deeper than
// base::kMaxJsonDepth or is not an object.
absl::StatusOr<nlohmann::json> ParsePdRequestBody(absl::string_view body);

// The prefill instance's request: `client` with "max_tokens": 1 ("max_completion_tokens": 1
// too when the client sent that field), "stream": false, no "stream_options" (vLLM refuses it
// without streaming), no "min_tokens" (it would exceed max_tokens), and "kv_transfer_params":
// {"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
// "remote_block_ids": null, "remote_host": null, "remote_port": null}. Every other field is
// kept, so the prefill instance computes the prompt exactly as the decode instance will.
nlohmann::json PrefillRequest(const nlohmann::json& client);

// The object under "kv_transfer_params" at the top level of a prefill instance's JSON answer
// (a completion or chat completion, not streamed). InvalidArgument when the text is not JSON,
// nests too deep, or has no such object (null included): the prefill instance then failed (it
// runs without a KV connector, say) and another one may be tried.
absl::StatusOr<nlohmann::json> KvTransferParamsOf(absl::string_view prefill_response);

// The decode instance's request: `client` as the client sent it (streamed or not) with
// "kv_transfer_params" set to `kv_transfer_params` (the prefill's answer, passed on as is).
nlohmann::json DecodeRequest(nlohmann::json client, const nlohmann::json& kv_transfer_params);

// `value` as compact JSON text; invalid UTF-8 in a string is replaced (U+FFFD), never thrown.
std::string DumpJson(const nlohmann::json& value);

}  // namespace vllm::router

#endif  // VLLM_ROUTER_PD_REQUEST_H_
