// The structured-output fields of an OpenAI request (vLLM's protocol.py: structured_outputs,
// response_format, and the pre-0.12 guided_* fields, honoured as aliases), parsed into
// core::SamplingParams::structured_outputs and checked with XGrammar before the request
// reaches the engine.
#ifndef VLLM_FRONTEND_OPENAI_STRUCTURED_OUTPUT_REQUEST_H_
#define VLLM_FRONTEND_OPENAI_STRUCTURED_OUTPUT_REQUEST_H_

#include "absl/status/status.h"
#include "core/sampling_params.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// Reads `structured_outputs`, `response_format` and `guided_*` from `body` into
// params->structured_outputs (left unset when none constrains the output: response_format
// text). InvalidParam naming the field for a malformed field, for constraints of two kinds
// (vLLM: "You can only use one kind of structured outputs constraint"), for what XGrammar
// cannot honour (whitespace_pattern, schema keywords it would ignore), and for a schema, regex,
// grammar or structural tag XGrammar cannot parse (with its message).
[[nodiscard]] absl::Status ParseStructuredOutputs(const nlohmann::ordered_json& body,
                                                  core::SamplingParams* params);

// Fields this server does not honour on this endpoint: InvalidParam naming the field when a
// request sets one to anything but its no-op value (on /v1/completions the chat fields tools,
// tool_choice other than "none", functions and function_call; vLLM's own fields:
// request_fields.h).
[[nodiscard]] absl::Status RejectUnhonouredFields(const nlohmann::ordered_json& body, bool chat);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_STRUCTURED_OUTPUT_REQUEST_H_
