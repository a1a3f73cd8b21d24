// For tool_parser_sdk_test.py: streams sample outputs through each tool-call parser, split
// into deltas several ways, and prints one JSON line per (parser, sample, split) with the
// OpenAI chat.completion.chunk objects a server would send for the deltas and what Extract
// returned, for the official openai SDK to reassemble and compare.
#include <iostream>
#include <string>
#include <vector>

#include "frontend/parsers/tool_parser.h"
#include "nlohmann/json.hpp"

namespace {

using json = nlohmann::ordered_json;
using vllm::frontend::parsers::DeltaMessage;
using vllm::frontend::parsers::MakeToolParser;
using vllm::frontend::parsers::ToolParser;

json Chunk(json delta, json finish_reason) {
  return json{{"id", "chatcmpl-test"},
              {"object", "chat.completion.chunk"},
              {"created", 0},
              {"model", "m"},
              {"choices", json::array({json{{"index", 0},
                                            {"delta", std::move(delta)},
                                            {"logprobs", nullptr},
                                            {"finish_reason", std::move(finish_reason)}}})}};
}

// The chunk for one step, as vLLM's serving_chat writes it: the role in the first.
json DeltaChunk(const DeltaMessage& d, bool first) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (d.content.has_value()) delta["content"] = *d.content;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : d.tool_calls) {
      json call{{"index", c.index}};
      json function = json::object();
      if (c.id.has_value()) {
        call["id"] = *c.id;
        call["type"] = "function";
      }
      if (c.name.has_value()) function["name"] = *c.name;
      function["arguments"] = c.arguments;
      call["function"] = std::move(function);
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  return Chunk(std::move(delta), nullptr);
}

json Case(const ToolParser& parser, const std::string& text, size_t piece) {
  auto stream = parser.NewStream();
  json chunks = json::array();
  bool first = true;
  auto send = [&](const DeltaMessage& d) {
    if (d.empty()) return;
    chunks.push_back(DeltaChunk(d, first));
    first = false;
  };
  for (size_t at = 0; at < text.size(); at += piece) send(stream->Feed(text.substr(at, piece)));
  send(stream->Finish());
  chunks.push_back(Chunk(json::object(), stream->tools_called() ? "tool_calls" : "stop"));
  const auto whole = parser.Extract(text);
  json calls = json::array();
  for (const auto& c : whole.tool_calls) {
    calls.push_back(json{{"name", c.name}, {"arguments", c.arguments}});
  }
  return json{{"parser", std::string(parser.name())},
              {"text", text},
              {"piece", piece},
              {"chunks", std::move(chunks)},
              {"extract",
               json{{"tools_called", whole.tools_called},
                    {"content", whole.content.has_value() ? json(*whole.content) : json(nullptr)},
                    {"tool_calls", std::move(calls)}}}};
}

}  // namespace

int main() {
  const std::vector<std::pair<std::string, std::string>> samples = {
      {"hermes",
       "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
       "\"arguments\": {\"city\": \"Z\\u00fcrich\", \"note\": \"a \\\"quoted\\\" {brace}\"}}\n"
       "</tool_call>"},
      {"hermes", "No tools needed: 2 + 2 = 4."},
      {"llama3_json",
       "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"vLLM\", \"k\": 5}}; "
       "{\"name\": \"now\", \"parameters\": {}}"},
      {"mistral",
       "Sure.[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 3.5, \"b\": [1, 2]}}, "
       "{\"name\": \"noop\", \"arguments\": {}}]"},
      {"mistral", "[TOOL_CALLS]add{\"a\": 3.5, \"b\": 4}[TOOL_CALLS]sub[ARGS]{\"a\": 1}"},
      {"pythonic",
       "[get_weather(city='Paris', days=2, opts={'unit': \"C\", 'alerts': True}), now()]"},
  };
  for (const auto& [name, text] : samples) {
    auto parser = MakeToolParser(name);
    if (!parser.ok()) return 1;
    for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, text.size()}) {
      std::cout << Case(**parser, text, piece).dump() << "\n";
    }
  }
  return 0;
}
