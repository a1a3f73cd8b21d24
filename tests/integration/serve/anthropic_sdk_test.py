#!/usr/bin/env python3
"""vllm-launch's /v1/messages driven by the official `anthropic` Python SDK (pinned in
scripts/test.sh, installed into build/release/pydeps): a plain message and a streamed one
(the SDK's own event parser) on the bundled model; the streamed text is the text of the
stream's deltas and the final message's stop_reason / usage come through.

    anthropic_sdk_test.py --launch build/release/bin/vllm-launch

Skipped (exit 77) when the SDK is not installed.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time

try:
    import anthropic
except ImportError as e:
    print(f"SKIP: cannot import anthropic ({e}); scripts/test.sh installs it")
    sys.exit(77)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    args = ap.parse_args()
    server = subprocess.Popen(
        [args.launch, "--port", "0", "--kv-cache-memory", "64MiB"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = server.stdout.readline()
            if not line:
                break
            m = re.search(r"ready at http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
        assert port is not None, "the server did not become ready"
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="unused")
        message = client.messages.create(
            model="kjv-llama-tiny", max_tokens=6, system="Answer briefly.",
            messages=[{"role": "user", "content": "Who made the heaven and the earth?"}])
        assert message.type == "message" and message.role == "assistant", message
        assert message.content[0].type == "text" and message.content[0].text, message
        assert message.stop_reason == "max_tokens", message.stop_reason
        assert message.usage.output_tokens == 6, message.usage
        assert message.usage.input_tokens > 0, message.usage

        text = ""
        with client.messages.stream(
                model="kjv-llama-tiny", max_tokens=6,
                messages=[{"role": "user", "content": "In the beginning"}]) as stream:
            for delta in stream.text_stream:
                text += delta
            final = stream.get_final_message()
        assert text and final.content[0].text == text, (text, final)
        assert final.stop_reason == "max_tokens", final.stop_reason
        assert final.usage.output_tokens == 6, final.usage

        try:
            client.messages.create(model="kjv-llama-tiny", max_tokens=4,
                                   messages=[{"role": "user", "content": "hi"}],
                                   tools=[{"name": "f", "input_schema": {"type": "object"}}])
            raise AssertionError("tools were accepted")
        except anthropic.BadRequestError as e:
            assert "tools" in str(e), e
        print("PASS: anthropic SDK", anthropic.__version__)
        return 0
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


if __name__ == "__main__":
    sys.exit(main())
