// Tool-call parsers: vLLM's `--tool-call-parser` (vllm/entrypoints/openai/tool_parsers/):
// they find the function calls in a model's output, whole (Extract) or while it streams
// (ToolStreamParser), and return them as the OpenAI API sends them.
//
//   auto parser = MakeToolParser("hermes");                 // or llama3_json, mistral, pythonic
//   ExtractedToolCalls r = (*parser)->Extract(text);        // a non-streaming response
//   auto stream = (*parser)->NewStream();                   // one per streamed choice
//   DeltaMessage d = stream->Feed(delta_text);  ...  stream->Finish();
//
// Whatever the model writes, nothing here crashes or runs long: malformed calls come back as
// content (as vLLM does), and every parse is bounded (kMaxToolParseBytes, kMaxJsonNesting).
#ifndef VLLM_FRONTEND_PARSERS_TOOL_PARSER_H_
#define VLLM_FRONTEND_PARSERS_TOOL_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::frontend::parsers {

// Model output longer than this is not searched for tool calls (it is all content); a stream
// past it stops parsing and passes the rest through as content.
inline constexpr size_t kMaxToolParseBytes = size_t{4} << 20;
// Deepest nesting of arrays/objects (lists/dicts) inside one call's arguments.
inline constexpr int kMaxJsonNesting = 128;
// More calls than this in one output make the output content.
inline constexpr int kMaxToolCalls = 1024;

// One complete function call (OpenAI's `tool_calls[i]`; its type is always "function").
struct ToolCall {
  std::string id;         // "chatcmpl-tool-<32 hex>", or 9 alphanumerics for mistral
  std::string name;       // the function's name
  std::string arguments;  // JSON text of the arguments, as vLLM writes it (see README.md)

  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

// What Extract found in a whole output (vLLM's ExtractedToolCallInformation).
struct ExtractedToolCalls {
  bool tools_called = false;
  std::vector<ToolCall> tool_calls;
  // The text that is not part of a call (the message's "content"); nullopt where vLLM sends
  // null. When tools_called is false this is the whole output.
  std::optional<std::string> content;
};

// One entry of a streamed chunk's `delta.tool_calls` (OpenAI's ChoiceDeltaToolCall). A call's
// first delta carries `id` and `name` (send it with "type": "function"); every delta of the
// call carries its `index`; concatenating a call's `arguments` fragments gives its complete
// arguments, the same text Extract returns for it.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id;
  std::optional<std::string> name;
  std::string arguments;  // may be empty (omit "arguments" then, or send "")

  friend bool operator==(const ToolCallDelta&, const ToolCallDelta&) = default;
};

// What to send for one step of a stream: content text, call fragments, both or neither.
struct DeltaMessage {
  std::optional<std::string> content;  // set only when non-empty
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return !content.has_value() && tool_calls.empty(); }
  // Appends `other` (content concatenated, deltas in order).
  void Append(DeltaMessage other);
};

// The state of one streamed output. Not thread-safe: one per choice of one request.
class ToolStreamParser {
 public:
  virtual ~ToolStreamParser() = default;
  // Takes the next piece of output text (a detokenizer delta; any split is fine, a tag or a
  // JSON token may span pieces) and returns what can be sent now. Text that could still be
  // the start of a tool call is held back until it is known not to be.
  virtual DeltaMessage Feed(std::string_view delta_text) = 0;
  // The output ended: returns what was held back (as content when it turned out not to be a
  // call). Feed must not be called after Finish.
  virtual DeltaMessage Finish() = 0;
  // Whether any call delta has been returned (finish_reason "tool_calls", as vLLM sets it).
  virtual bool tools_called() const = 0;
};

// The source of the random tool-call ids: returns 64 random bits per call; must be
// thread-safe when the parser is shared. Tests inject a deterministic one.
using RandomSource = std::function<uint64_t()>;

struct ToolParserOptions {
  RandomSource random;  // empty: a per-thread generator seeded from std::random_device
};

// A tool-call parser for one model family. Immutable after creation: Extract and NewStream
// are const and thread-safe (given a thread-safe RandomSource).
class ToolParser {
 public:
  virtual ~ToolParser() = default;
  // The name MakeToolParser knows it by ("hermes", ...).
  virtual std::string_view name() const = 0;
  // Parses a whole output. Never fails: output that does not hold well-formed calls comes
  // back with tools_called false and the whole text as content.
  virtual ExtractedToolCalls Extract(std::string_view model_output) const = 0;
  // A parser for one streamed output. On outputs with well-formed calls, the stream's
  // content and calls (reassembled) equal Extract's (README.md lists the exceptions).
  virtual std::unique_ptr<ToolStreamParser> NewStream() const = 0;
  // Whether its call markers may be special tokens, so a request with tools must be
  // detokenized with skip_special_tokens false (vLLM's adjust_request: hermes, mistral).
  virtual bool reads_special_tokens() const { return false; }
};

// The names MakeToolParser accepts, in a stable order.
std::vector<std::string> ToolParserNames();

// The parser vLLM calls `name`: "hermes" (Qwen2.5/Qwen3, Hermes: <tool_call>{json}</tool_call>),
// "llama3_json" (Llama 3.1/3.2 JSON calls, optionally after <|python_tag|>, separated by ';'),
// "mistral" ([TOOL_CALLS] then a JSON array, or name{args} / name[ARGS]{args} per call),
// "pythonic" ([f(a=1), g()] as Llama 3.2/4 write it). InvalidArgument naming `name` and the
// valid names for any other.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ToolParser>> MakeToolParser(
    std::string_view name, ToolParserOptions options = {});

// The parsers of the forced tool choices, whose output a grammar built from the tools shapes
// (frontend/parsers/forced_tool_parser.cc). "required": the output is a JSON array of
// {"name": ..., "parameters": {...}} objects, each a call (arguments: json.dumps of
// "parameters"); anything else has no calls. Named (`tool_choice` naming `function`): the
// whole output is that function's arguments, as generated; blank output has no call.
std::unique_ptr<ToolParser> MakeRequiredToolParser(ToolParserOptions options = {});
std::unique_ptr<ToolParser> MakeNamedToolParser(std::string function,
                                                ToolParserOptions options = {});

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_TOOL_PARSER_H_
