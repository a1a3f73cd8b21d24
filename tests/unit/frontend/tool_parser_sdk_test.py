#!/usr/bin/env python3
"""The tool-call parsers' streamed deltas, reassembled by the official openai SDK.

    tool_parser_sdk_test.py --chunks build/release/bin/tool_stream_chunks

tool_stream_chunks streams sample outputs through every parser (split into deltas of 1, 3, 7
bytes and whole) and prints the chat.completion.chunk objects a server would send. Each
stream is fed to the SDK's ChatCompletionStreamState (what `client.chat.completions.stream()`
uses); the final message's content and tool calls must equal the parser's Extract, every
call's arguments must be JSON, and finish_reason must be "tool_calls" exactly when calls were
sent. Exit 77 (ctest: skipped) when the `openai` package is not importable.
"""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", required=True, help="the tool_stream_chunks binary")
    args = ap.parse_args()
    try:
        from openai.lib.streaming.chat import ChatCompletionStreamState
        from openai.types.chat import ChatCompletionChunk
    except ImportError:
        print("openai is not installed: skipped")
        return 77
    lines = subprocess.run([args.chunks], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    failures = []
    for line in lines:
        case = json.loads(line)
        where = f"{case['parser']} / piece {case['piece']}: {case['text'][:40]!r}"
        state = ChatCompletionStreamState()
        for chunk in case["chunks"]:
            state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
        choice = state.get_final_completion().choices[0]
        message = choice.message
        want = case["extract"]
        got_calls = [{"name": c.function.name, "arguments": c.function.arguments}
                     for c in (message.tool_calls or [])]
        if got_calls != want["tool_calls"]:
            failures.append(f"{where}: calls {got_calls} != {want['tool_calls']}")
        if (message.content or None) != (want["content"] or None):
            failures.append(f"{where}: content {message.content!r} != {want['content']!r}")
        for c in message.tool_calls or []:
            if not c.id:
                failures.append(f"{where}: a call without an id")
            if case["parser"] != "mistral" or c.function.arguments.startswith("{"):
                json.loads(c.function.arguments)
        want_reason = "tool_calls" if want["tools_called"] else "stop"
        if choice.finish_reason != want_reason:
            failures.append(f"{where}: finish_reason {choice.finish_reason}")
    for f in failures:
        print(f)
    print(f"tool_parser_sdk_test: {len(lines)} streams, {len(failures)} failures")
    return 1 if failures or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
