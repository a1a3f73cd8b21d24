// What the tool-call parsers share: ids, the streaming skeleton (held-back text, the switch to
// plain content on malformed output, the per-call name/arguments bookkeeping), Extract on top
// of a stream, and the parsers' constructors. Internal to frontend/parsers/.
#ifndef VLLM_FRONTEND_PARSERS_TOOL_STREAM_BASE_H_
#define VLLM_FRONTEND_PARSERS_TOOL_STREAM_BASE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "frontend/parsers/tool_call_object.h"
#include "frontend/parsers/tool_parser.h"

namespace vllm::frontend::parsers {

// vLLM's make_tool_call_id(): "chatcmpl-tool-" and 32 lowercase hex digits.
std::string MakeToolCallId(const RandomSource& random);
// Mistral's ids: 9 characters of [a-zA-Z0-9].
std::string MakeMistralToolCallId(const RandomSource& random);
// `options.random`, or the default per-thread generator when it is empty.
RandomSource RandomOrDefault(const RandomSource& random);

// Appends `text` to out->content (content stays unset for empty text).
void AddContent(DeltaMessage* out, std::string_view text);

// A stream's skeleton. Subclasses parse `buffer_` (the text fed and not yet consumed) in
// Process, move what they consume into `held_raw_` while it may still turn out to be content,
// and send calls through StartCall/UpdateCall. A Fail() switches the stream to passing text
// through as content: held_raw_ and everything after it.
class ToolStreamBase : public ToolStreamParser {
 public:
  enum class IdStyle { kChatCompletion, kMistral };

  ToolStreamBase(RandomSource random, IdStyle id_style)
      : random_(std::move(random)), id_style_(id_style) {}

  DeltaMessage Feed(std::string_view delta_text) final;
  DeltaMessage Finish() final;
  bool tools_called() const final { return sent_any_; }
  // Whether the output turned out malformed (Extract then returns it all as content).
  bool failed() const { return failed_; }

 protected:
  // Consumes what it can of buffer_ (erasing it from the front), appending to *out.
  virtual void Process(DeltaMessage* out) = 0;
  // The output ended: consumes the rest of buffer_ (Process ran last on it).
  virtual void Finalize(DeltaMessage* out) = 0;

  // Malformed output: from now on text is content. Sends held_raw_ and buffer_ as content.
  void Fail(DeltaMessage* out);
  // Begins the next call (index calls_); false (and Fail) past kMaxToolCalls.
  bool StartCall(DeltaMessage* out);
  // Sends what is new of the current call: its first delta (id and name) once `name` is
  // known, then the part of `arguments` (which only grows) not yet sent.
  void UpdateCall(const std::optional<std::string>& name, std::string_view arguments,
                  DeltaMessage* out);
  // Like UpdateCall, with a call id the model wrote (mistral's [CALL_ID]) when non-empty.
  void UpdateCallWithId(const std::optional<std::string>& name, std::string_view arguments,
                        std::string_view model_id, DeltaMessage* out);
  // Feeds buffer_ to the call object being read and sends what is new of it: true once the
  // object is complete; false while it needs more text, or when it is malformed (after Fail).
  bool FeedCall(ToolCallObjectParser& call, DeltaMessage* out);
  bool current_call_sent() const { return name_sent_; }
  int calls() const { return calls_; }
  // Moves the first `n` bytes of buffer_ into held_raw_ (or drops them when `hold` is false).
  void Consume(size_t n, bool hold = true);

  std::string buffer_;
  std::string held_raw_;

 private:
  RandomSource random_;
  IdStyle id_style_;
  bool failed_ = false;
  bool finished_ = false;
  size_t total_bytes_ = 0;
  int calls_ = 0;
  bool sent_any_ = false;
  bool name_sent_ = false;
  size_t arguments_sent_ = 0;
};

// Extract through a fresh stream: the output fed whole and finished. Malformed output, or
// none but whitespace calls: tools_called false and the whole text as content. Otherwise
// the calls and the stream's content (nullopt when empty).
ExtractedToolCalls ExtractWithStream(ToolStreamBase* stream, std::string_view model_output);

// The parsers MakeToolParser makes.
std::unique_ptr<ToolParser> NewHermesToolParser(ToolParserOptions options);
std::unique_ptr<ToolParser> NewLlama3JsonToolParser(ToolParserOptions options);
std::unique_ptr<ToolParser> NewMistralToolParser(ToolParserOptions options);
std::unique_ptr<ToolParser> NewPythonicToolParser(ToolParserOptions options);

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_TOOL_STREAM_BASE_H_
