// Fuzzes the chat-template engine (frontend::ChatTemplate, frontend/jinja/): the input is a
// template source, optionally followed by a NUL byte and text used as the user message's
// content. A template that parses is rendered with a small fixed conversation (system, user,
// assistant, user), with and without add_generation_prompt. Invariants: no crash, throw,
// leak or stack overflow, and no runaway time or memory (the engine bounds nesting, output at
// 64 MiB, loops at 100000 iterations and evaluations at 1000000; -timeout and -rss_limit_mb
// catch the rest); Parse and Render fail only with InvalidArgument (what the server answers
// with 400).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/jinja/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const auto [source, content] = fuzz::SplitAtNul(fuzz::AsText(data, size));
  auto parsed = frontend::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument,
               "Parse failed with " + parsed.status().ToString());
    return 0;
  }
  const std::vector<frontend::ChatMessage> messages = {
      {"system", "You are a helpful assistant."},
      {"user", content.empty() ? std::string("Hello!") : std::string(content)},
      {"assistant", "Hi! How can I help?"},
      {"user", "  Tell me a story.\n"}};
  for (bool add_generation_prompt : {true, false}) {
    auto rendered = parsed->Render(messages, add_generation_prompt, "<s>", "</s>");
    if (!rendered.ok()) {
      FUZZ_CHECK(rendered.status().code() == absl::StatusCode::kInvalidArgument,
                 "Render failed with " + rendered.status().ToString());
      continue;
    }
    FUZZ_CHECK(rendered->size() <= (size_t{64} << 20), "output over 64 MiB");
  }
  return 0;
}
