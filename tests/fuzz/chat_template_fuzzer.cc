// Fuzzes the chat-template engine (frontend::ChatTemplate, frontend/jinja/): the input is a
// template source, optionally followed by a NUL byte and text used as the user message's
// content. A template that parses is rendered with a small fixed conversation (system, user,
// assistant, user), with and without add_generation_prompt. Invariants: no crash, throw,
// leak or stack overflow, and no runaway time or memory (the engine bounds nesting, and the
// render limits: this harness lowers them — output 64 KiB, 250 loop iterations, 1 MiB of
// work, 500 evaluations, above what the real templates of the seed corpus need for this
// conversation (at most 200 evaluations; the synthetic subset.jinja 400) — so that every input
// stays fast (the corpus ran at ~350 exec/s at 20000 evaluations, ~650 at 2000) and the same
// limit paths are hit far more often; -timeout and -rss_limit_mb catch the rest); Parse and
// Render fail only with InvalidArgument (what the server answers with 400).
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
  frontend::ChatTemplate::Limits limits;
  limits.max_output_bytes = size_t{64} << 10;
  limits.max_iterations = 250;
  limits.max_work = size_t{1} << 20;
  limits.max_evaluations = 500;
  for (bool add_generation_prompt : {true, false}) {
    auto rendered = parsed->Render(messages, add_generation_prompt, "<s>", "</s>", limits);
    if (!rendered.ok()) {
      FUZZ_CHECK(rendered.status().code() == absl::StatusCode::kInvalidArgument,
                 "Render failed with " + rendered.status().ToString());
      continue;
    }
    FUZZ_CHECK(rendered->size() <= limits.max_output_bytes, "output over the limit");
  }
  return 0;
}
