#!/usr/bin/env python3
"""vllm-launch driven by the official `openai` Python SDK, as a user's client would drive it.

Starts the real server on the bundled model (`--port 0`, `--api-key`) at tensor-parallel size 1,
then 2 (worker processes; also `--served-model-name`), and through `openai.OpenAI` checks:

- /v1/models lists the served name; the process tree is server → engine core (→ TP workers);
- completions and chat completions, plain and streamed: streamed text equals the plain answer,
  `stream_options={"include_usage": True}` ends with a usage-only chunk, usage counts equal the
  in-process engine's prompt and output tokens;
- greedy answers (temperature 0) equal `llm_generate --json` for the same prompts and
  `max_tokens` (also with token-id prompts and several prompts in one request), and
  transformers' greedy samples in models/kjv-llama-tiny/training_log.json;
- `n=2` with a seed: two different samples, the same again on a repeat, streamed by index;
- `logprobs` (completions: top-3 per token, greedy token on top, offsets; chat: `top_logprobs`,
  bytes, streamed); `stop` (with `stop_reason`, streamed, `include_stop_str_in_output`);
- vLLM's fields via `extra_body`: `top_k`, `min_p`, `stop_token_ids`, `min_tokens`,
  `ignore_eos`, `repetition_penalty`;
- tool calling (the server runs with `--enable-auto-tool-choice --tool-call-parser hermes`):
  `tool_choice` "required" (also `parallel_tool_calls=False`, `n=2`) and a named function
  give calls whose arguments validate against the tool's schema (jsonschema), streamed calls
  reassemble to the same calls, finish_reason "tool_calls" / "stop"; "auto" answers the
  bundled model's prose as content; "none" answers as if no tools were sent (the bundled
  template ignores them); `response_format` json_schema through
  `client.beta.chat.completions.parse` with a pydantic model;
- bad requests raise openai.BadRequestError whose message and `param` name the field (also for
  `stream=True`); an unknown model raises openai.NotFoundError; a wrong API key raises
  openai.AuthenticationError;
- SIGINT in the middle of a long stream: the SDK raises openai.APIError from vLLM's
  {"error": {...}} event; the server exits 0 within 10 s, then within 5 s no process it started
  is alive (the test is their subreaper) and no new /dev/shm entry remains. A failing test
  SIGKILLs the server's process group and every process it saw.

    openai_sdk_test.py --launch build/release/bin/vllm-launch \
        --generate build/release/bin/llm_generate [--tp 1,2]

(about 4 s for both TP sizes on 2 cores). Needs only the standard library and `openai`
(scripts/test.sh installs a pinned version into build/release/pydeps; ctest puts it on
PYTHONPATH). Without `openai` the test FAILS; it never skips.
"""

import argparse
import ctypes
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import jsonschema
    import openai
    import pydantic
except ImportError as e:  # a failure, never a skip: the test setup installs the SDK
    print(f"FAIL: cannot import openai ({e}); run scripts/test.sh, which installs it into "
          "build/release/pydeps, or put it on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

SERVER_START_S = 60  # deadline for the ready line
SHUTDOWN_S = 10  # deadline for the server to exit after SIGINT
CLEANUP_S = 5  # deadline for its processes and /dev/shm entries to go
REQUEST_S = 60  # per-request client timeout
API_KEY = "sdk-test-key"
MAX_TOKENS = 40  # greedy answers compared with the in-process engine
COMPLETION_PROMPTS = ["In the beginning", "And the LORD said", "The LORD is my shepherd"]
CHAT_PROMPTS = ["Blessed are the meek", "Who was Moses?"]  # both end with EOS before 40 tokens
PR_SET_CHILD_SUBREAPER = 36
TOOL_SCHEMAS = {
    "get_weather": {"type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 12},
                                   "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city", "unit"], "additionalProperties": False},
    "get_time": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "EST"]}},
                 "required": ["zone"], "additionalProperties": False},
}
TOOLS = [{"type": "function",
          "function": {"name": name, "description": f"{name} somewhere", "parameters": schema}}
         for name, schema in TOOL_SCHEMAS.items()]
TOOL_QUESTION = "What is the weather in Ur of the Chaldees?"

ARGS = None  # parsed command line
REFERENCE = {}  # ("prompt" | "chat", text) -> llm_generate's JSON answer
TRAINING_SAMPLES = []  # training_log.json "samples": transformers' greedy answers


# ---- processes ---------------------------------------------------------------------------


def children_of(pid):
    """Pids whose parent is `pid` (from /proc; zombies included)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def descendants_of(pid):
    out, todo = [], [pid]
    while todo:
        for child in children_of(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def alive(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def reap_orphans():
    """Reaps exited children (orphans of the server re-parented to us as subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def shm_entries():
    return set(os.listdir("/dev/shm"))


def poll(condition, timeout_s, interval_s=0.02):
    """Polls `condition` until it holds or the deadline passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)  # polling a condition with a deadline


def read_line(proc, timeout_s):
    """One stdout line of `proc` within the deadline; None on EOF or timeout."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    data = b""
    try:
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(proc.stdout.fileno(), 1)  # byte by byte: stop at the newline
            if not chunk:
                return None
            data += chunk
    finally:
        sel.close()
    return data.decode()


def load_references():
    """Greedy answers of the in-process engine (llm_generate) and of transformers."""
    keys = [("prompt", p) for p in COMPLETION_PROMPTS] + [("chat", p) for p in CHAT_PROMPTS]
    cmd = [ARGS.generate, "--model", ARGS.model, "--json", "--max-tokens", str(MAX_TOKENS)]
    for kind, text in keys:
        cmd += [f"--{kind}", text]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr}")
    lines = out.stdout.splitlines()
    if len(lines) != len(keys):
        raise RuntimeError(f"llm_generate printed {len(lines)} lines for {len(keys)} prompts")
    for key, line in zip(keys, lines):
        REFERENCE[key] = json.loads(line)
    with open(os.path.join(ARGS.model, "training_log.json")) as f:
        TRAINING_SAMPLES.extend(json.load(f)["samples"])


# ---- the tests ---------------------------------------------------------------------------


class ServerTest(unittest.TestCase):
    """One vllm-launch run; subclasses set TP (and MODEL_NAME to test --served-model-name)."""

    TP = 1
    MODEL_NAME = None  # None: the default name, "kjv-llama-tiny"

    @classmethod
    def setUpClass(cls):
        cls.model = cls.MODEL_NAME or "kjv-llama-tiny"
        cls.shm_before = shm_entries()
        cls.log = tempfile.TemporaryFile()
        # No model argument: the server's default, the bundled model.
        cmd = [ARGS.launch, "--host", "127.0.0.1", "--port", "0", "-tp", str(cls.TP),
               "--kv-cache-memory", "64MiB", "--api-key", API_KEY,
               "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
               # Compact JSON: the bundled model, left free, pads JSON with whitespace.
               "--structured-outputs-config", '{"disable_any_whitespace": true}']
        if cls.MODEL_NAME:
            cmd += ["--served-model-name", cls.MODEL_NAME]
        cls.server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=cls.log, start_new_session=True)
        cls.tree = []  # the server's descendants while it ran
        cls.addClassCleanup(cls.kill_everything)
        line = read_line(cls.server, SERVER_START_S)
        m = re.fullmatch(r"vllm-launch: ready at http://127\.0\.0\.1:(\d+)/v1\n", line or "")
        if m is None:
            code = cls.server.poll()
            why = (f"it exited with {code}" if code is not None else
                   f"no ready line within {SERVER_START_S} s")
            raise AssertionError(f"vllm-launch did not start: {why}, stdout {line!r}; "
                                 f"log:\n{cls.server_log()}")
        cls.base_url = f"http://127.0.0.1:{m.group(1)}/v1"
        cls.client = openai.OpenAI(base_url=cls.base_url, api_key=API_KEY, max_retries=0,
                                   timeout=REQUEST_S)
        cls.tree = descendants_of(cls.server.pid)

    @classmethod
    def tearDownClass(cls):
        """Ctrl-C mid-stream: the SDK raises the error event; the server exits 0 in time; no
        process and no /dev/shm entry remain."""
        cls.tree = sorted(set(cls.tree) | set(descendants_of(cls.server.pid)))
        cls.interrupt_mid_stream()
        cls.client.close()
        try:
            code = cls.server.wait(timeout=SHUTDOWN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server still runs {SHUTDOWN_S} s after SIGINT; log:\n"
                                 f"{cls.server_log()}") from None
        if code != 0:
            raise AssertionError(f"the server exited with {code} after SIGINT; log:\n"
                                 f"{cls.server_log()}")

        def clean():
            reap_orphans()
            return (not children_of(os.getpid()) and not any(alive(p) for p in cls.tree)
                    and not shm_entries() - cls.shm_before)

        if not poll(clean, CLEANUP_S):
            left = [p for p in cls.tree if alive(p)] + children_of(os.getpid())
            raise AssertionError(f"left behind after shutdown: processes {sorted(set(left))}, "
                                 f"/dev/shm {sorted(shm_entries() - cls.shm_before)}")

    @classmethod
    def interrupt_mid_stream(cls):
        """Sends SIGINT once a long stream has begun; the stream must raise openai.APIError
        (the server's {"error": {...}} event) instead of ending as if it had finished."""
        # 8 x 900 tokens: seconds of decoding, so the signal lands while they generate.
        stream = cls.client.completions.create(
            model=cls.model, prompt="In the beginning", max_tokens=900, n=8, stream=True,
            extra_body={"ignore_eos": True})
        chunks = iter(stream)
        first = next(chunks)
        if not first.choices or first.choices[0].finish_reason is not None:
            raise AssertionError(f"the long stream did not start as expected: {first}")
        cls.server.send_signal(signal.SIGINT)
        try:
            rest = list(chunks)
        except openai.APIError as e:
            if "shutting down" not in str(e):
                raise AssertionError(f"unexpected mid-stream error: {e!r}") from None
            return
        finally:
            stream.close()
        raise AssertionError(f"the stream ended without an error after SIGINT ({len(rest)} more "
                             f"chunks, the last {rest[-1] if rest else None}); log:\n"
                             f"{cls.server_log()}")

    @classmethod
    def kill_everything(cls):
        """Runs even when set-up or a check failed: nothing started here outlives the test."""
        pids = set(cls.tree) | set(descendants_of(cls.server.pid))
        if cls.server.poll() is None:  # not reaped: its process group id is still ours
            os.killpg(cls.server.pid, signal.SIGKILL)  # the server, engine core, workers
            cls.server.wait(timeout=SHUTDOWN_S)
        reap_orphans()
        for pid in pids | set(children_of(os.getpid())):  # orphans re-parented to us
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        poll(lambda: (reap_orphans(), not any(alive(p) for p in pids))[1], CLEANUP_S)
        cls.log.close()

    @classmethod
    def server_log(cls):
        cls.log.seek(0)
        return cls.log.read().decode(errors="replace")[-4000:]

    # -- helpers --

    def complete(self, prompt, **kw):
        kw.setdefault("max_tokens", MAX_TOKENS)
        return self.client.completions.create(model=self.model, prompt=prompt, **kw)

    def chat(self, content, **kw):
        kw.setdefault("max_tokens", MAX_TOKENS)
        return self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": content}], **kw)

    def assert_usage(self, usage, prompt_tokens, completion_tokens):
        self.assertIsNotNone(usage)
        self.assertEqual(usage.prompt_tokens, prompt_tokens)
        self.assertEqual(usage.completion_tokens, completion_tokens)
        self.assertEqual(usage.total_tokens, prompt_tokens + completion_tokens)

    def tool_chat(self, tool_choice, **kw):
        kw.setdefault("max_tokens", 200)
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": TOOL_QUESTION}],
            tools=TOOLS, tool_choice=tool_choice, **kw)

    def assert_calls(self, calls):
        """Each call names a tool, has a vLLM id, and arguments valid for the tool's schema."""
        self.assertTrue(calls)
        for call in calls:
            self.assertEqual(call.type, "function")
            self.assertRegex(call.id, r"^chatcmpl-tool-[0-9a-f]{32}$")
            self.assertIn(call.function.name, TOOL_SCHEMAS)
            jsonschema.validate(json.loads(call.function.arguments),
                                TOOL_SCHEMAS[call.function.name])

    def streamed_tool_chat(self, tool_choice, **kw):
        """The stream's calls reassembled by index, as (id, name, arguments), its content and
        its finish_reason."""
        calls, content, finish = {}, "", None
        for chunk in self.tool_chat(tool_choice, stream=True, **kw):
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
                for d in choice.delta.tool_calls or []:
                    entry = calls.setdefault(d.index, ["", "", ""])
                    if d.id:
                        self.assertEqual(entry[0], "", "a second id for one call")
                        entry[0] = d.id
                        self.assertEqual(d.type, "function")
                    if d.function and d.function.name:
                        entry[1] = d.function.name
                    if d.function and d.function.arguments:
                        entry[2] += d.function.arguments
        self.assertEqual(sorted(calls), list(range(len(calls))))
        return [tuple(calls[i]) for i in sorted(calls)], content, finish

    def assert_bad_request(self, call, param, words):
        """`call` raises openai.BadRequestError whose message names `param` and `words`."""
        with self.assertRaises(openai.BadRequestError) as ctx:
            call()
        e = ctx.exception
        self.assertEqual(e.status_code, 400)
        self.assertIsInstance(e.body, dict, e)
        self.assertEqual(e.body.get("param"), param, e.body)
        self.assertIn(words, e.body.get("message", ""), e.body)
        self.assertIn(words, str(e))  # what a user sees printed

    # -- checks --

    def test_models_lists_the_served_model(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [self.model])
        self.assertEqual(models.data[0].object, "model")
        self.assertEqual(models.data[0].model_extra.get("max_model_len"), 1024)

    def test_process_tree(self):
        # server -> engine core (-> one worker process per rank with worker processes)
        expected = 1 if self.TP == 1 else 1 + self.TP
        self.assertEqual(len(self.tree), expected, f"descendants {self.tree}")

    def test_completion_greedy_equals_in_process_engine(self):
        for prompt in COMPLETION_PROMPTS:
            ref = REFERENCE[("prompt", prompt)]
            r = self.complete(prompt, temperature=0)
            self.assertEqual(r.object, "text_completion")
            self.assertEqual(r.model, self.model)
            self.assertEqual(len(r.choices), 1)
            self.assertEqual(r.choices[0].text, ref["text"], prompt)
            self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])
            self.assert_usage(r.usage, len(ref["prompt_token_ids"]), len(ref["token_ids"]))
        # Token ids as the prompt, and several prompts in one request (batched on the server).
        ref = REFERENCE[("prompt", COMPLETION_PROMPTS[0])]
        r = self.complete(ref["prompt_token_ids"], temperature=0)
        self.assertEqual(r.choices[0].text, ref["text"])
        r = self.complete(COMPLETION_PROMPTS, temperature=0)
        self.assertEqual([c.index for c in r.choices], list(range(len(COMPLETION_PROMPTS))))
        self.assertEqual([c.text for c in r.choices],
                         [REFERENCE[("prompt", p)]["text"] for p in COMPLETION_PROMPTS])

    def test_completion_greedy_equals_transformers(self):
        for sample in TRAINING_SAMPLES[:2]:
            r = self.complete(sample["prompt"], temperature=0,
                              max_tokens=len(sample["greedy_ids"]))
            self.assertEqual(r.choices[0].text, sample["text"], sample["prompt"])
            self.assert_usage(r.usage, len(sample["prompt_ids"]), len(sample["greedy_ids"]))

    def test_completion_stream_equals_non_stream(self):
        prompt = COMPLETION_PROMPTS[1]
        ref = REFERENCE[("prompt", prompt)]
        whole = self.complete(prompt, temperature=0)
        chunks = list(self.complete(prompt, temperature=0, stream=True,
                                    stream_options={"include_usage": True}))
        self.assertGreater(len(chunks), 2)
        *token_chunks, usage_chunk = chunks
        self.assertEqual(usage_chunk.choices, [])  # the final chunk carries only the usage
        self.assert_usage(usage_chunk.usage, len(ref["prompt_token_ids"]), len(ref["token_ids"]))
        for c in token_chunks:
            self.assertIsNone(c.usage)
            self.assertEqual(c.object, "text_completion")
            self.assertEqual(c.id, token_chunks[0].id)
            self.assertEqual(len(c.choices), 1)
        self.assertEqual("".join(c.choices[0].text for c in token_chunks), whole.choices[0].text)
        self.assertEqual([c.choices[0].finish_reason for c in token_chunks][-1],
                         whole.choices[0].finish_reason)
        self.assertTrue(all(c.choices[0].finish_reason is None for c in token_chunks[:-1]))
        # Without stream_options no chunk carries usage.
        plain = list(self.complete(prompt, temperature=0, stream=True))
        self.assertTrue(all(c.usage is None and len(c.choices) == 1 for c in plain))
        self.assertEqual("".join(c.choices[0].text for c in plain), ref["text"])

    def test_chat_greedy_equals_in_process_engine(self):
        for content in CHAT_PROMPTS:
            ref = REFERENCE[("chat", content)]
            self.assertEqual(ref["finish_reason"], "stop")  # the reference ends with EOS
            r = self.chat(content, temperature=0)
            self.assertEqual(r.object, "chat.completion")
            self.assertEqual(r.model, self.model)
            self.assertEqual(r.choices[0].message.role, "assistant")
            self.assertEqual(r.choices[0].message.content, ref["text"], content)
            self.assertEqual(r.choices[0].finish_reason, "stop")
            # <|eot_id|> (2) is an EOS of generation_config.json but not config.json's
            # eos_token_id (1): as in vLLM it acts as a stop token id and is the stop_reason.
            self.assertEqual(r.choices[0].model_extra.get("stop_reason"), ref["token_ids"][-1])
            self.assert_usage(r.usage, len(ref["prompt_token_ids"]), len(ref["token_ids"]))

    def test_chat_stream_equals_non_stream(self):
        content = CHAT_PROMPTS[0]
        ref = REFERENCE[("chat", content)]
        whole = self.chat(content, temperature=0)
        chunks = list(self.chat(content, temperature=0, stream=True,
                                stream_options={"include_usage": True}))
        *token_chunks, usage_chunk = chunks
        self.assertEqual(usage_chunk.choices, [])
        self.assert_usage(usage_chunk.usage, len(ref["prompt_token_ids"]), len(ref["token_ids"]))
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        self.assertEqual(token_chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in token_chunks)
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(token_chunks[-1].choices[0].finish_reason, "stop")
        self.assertTrue(all(c.choices[0].finish_reason is None for c in token_chunks[:-1]))

    def test_n2_with_seed(self):
        kw = dict(temperature=1.0, seed=1234, n=2, max_tokens=16,
                  extra_body={"ignore_eos": True})
        a = self.complete(COMPLETION_PROMPTS[0], **kw)
        self.assertEqual(sorted(c.index for c in a.choices), [0, 1])
        self.assertTrue(all(c.finish_reason == "length" for c in a.choices))
        self.assertNotEqual(a.choices[0].text, a.choices[1].text)  # two samples, not one twice
        self.assert_usage(a.usage, 4, 32)
        b = self.complete(COMPLETION_PROMPTS[0], **kw)  # the seed makes it repeatable
        self.assertEqual([c.text for c in sorted(b.choices, key=lambda c: c.index)],
                         [c.text for c in sorted(a.choices, key=lambda c: c.index)])
        chat = self.chat(CHAT_PROMPTS[1], **kw)
        self.assertEqual(sorted(c.index for c in chat.choices), [0, 1])
        self.assertNotEqual(chat.choices[0].message.content, chat.choices[1].message.content)
        self.assertEqual(chat.usage.completion_tokens, 32)
        # Streamed, the choices interleave by index and add up to the same texts.
        texts = ["", ""]
        for chunk in self.complete(COMPLETION_PROMPTS[0], stream=True, **kw):
            for c in chunk.choices:
                texts[c.index] += c.text
        self.assertEqual(texts, [c.text for c in sorted(a.choices, key=lambda c: c.index)])

    def test_logprobs(self):
        prompt = COMPLETION_PROMPTS[0]
        ref = REFERENCE[("prompt", prompt)]
        r = self.complete(prompt, temperature=0, logprobs=3, max_tokens=12)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 12)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        self.assertTrue(ref["text"].startswith(r.choices[0].text))
        self.assertEqual(lp.text_offset, [sum(map(len, lp.tokens[:i])) for i in range(12)])
        for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(logprob, 0.0)
            self.assertEqual(len(top), 3)
            self.assertEqual(max(top, key=top.get), token)  # greedy: the most likely token
            self.assertAlmostEqual(top[token], logprob, places=5)
        c = self.chat(CHAT_PROMPTS[0], temperature=0, logprobs=True, top_logprobs=2,
                      max_tokens=8)
        content = c.choices[0].logprobs.content
        self.assertEqual(len(content), 8)
        self.assertEqual("".join(t.token for t in content), c.choices[0].message.content)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 2)
            self.assertEqual(t.top_logprobs[0].token, t.token)
            self.assertGreaterEqual(t.top_logprobs[0].logprob, t.top_logprobs[1].logprob)
            self.assertEqual(bytes(t.bytes).decode(), t.token)
        # Streamed logprobs arrive with their tokens.
        streamed = [t for chunk in self.chat(CHAT_PROMPTS[0], temperature=0, logprobs=True,
                                             top_logprobs=2, max_tokens=8, stream=True)
                    for ch in chunk.choices if ch.logprobs for t in ch.logprobs.content]
        self.assertEqual([t.token for t in streamed], [t.token for t in content])

    def test_stop(self):
        prompt = COMPLETION_PROMPTS[1]
        ref_text = REFERENCE[("prompt", prompt)]["text"]
        stop = "Behold"
        self.assertIn(stop, ref_text)
        r = self.complete(prompt, temperature=0, stop=[stop, "never appears"])
        self.assertEqual(r.choices[0].text, ref_text[:ref_text.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].model_extra.get("stop_reason"), stop)
        streamed = "".join(c.choices[0].text for c in self.complete(
            prompt, temperature=0, stop=stop, stream=True))
        self.assertEqual(streamed, r.choices[0].text)
        r = self.complete(prompt, temperature=0, stop=stop,
                          extra_body={"include_stop_str_in_output": True})
        self.assertEqual(r.choices[0].text, ref_text[:ref_text.index(stop) + len(stop)])
        c = self.chat(CHAT_PROMPTS[0], temperature=0, stop="LORD")
        ref_chat = REFERENCE[("chat", CHAT_PROMPTS[0])]["text"]
        self.assertEqual(c.choices[0].message.content, ref_chat[:ref_chat.index("LORD")])
        self.assertEqual(c.choices[0].finish_reason, "stop")

    def test_vllm_extra_fields(self):
        prompt = COMPLETION_PROMPTS[0]
        ref = REFERENCE[("prompt", prompt)]
        # top_k=1 and min_p=1 leave only the most likely token: greedy at any temperature.
        for extra in ({"top_k": 1}, {"min_p": 1.0}):
            r = self.complete(prompt, temperature=1.0, seed=5, extra_body=extra)
            self.assertEqual(r.choices[0].text, ref["text"], extra)
        # stop_token_ids: the fourth greedy token ends the answer (counted, not shown).
        ids = ref["token_ids"]
        stop_id = ids[3]
        first = ids.index(stop_id)
        r = self.complete(prompt, temperature=0, extra_body={"stop_token_ids": [stop_id]})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].model_extra.get("stop_reason"), stop_id)
        self.assertEqual(r.usage.completion_tokens, first + 1)
        self.assertTrue(ref["text"].startswith(r.choices[0].text))
        # min_tokens holds the stop tokens (and EOS) back until that many were generated.
        r = self.complete(prompt, temperature=0,
                          extra_body={"stop_token_ids": [stop_id], "min_tokens": 10})
        self.assertGreaterEqual(r.usage.completion_tokens, 10)
        # ignore_eos: the chat answer that ends with EOS runs on to max_tokens.
        chat_ref = REFERENCE[("chat", CHAT_PROMPTS[0])]
        c = self.chat(CHAT_PROMPTS[0], temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(c.choices[0].finish_reason, "length")
        self.assertEqual(c.usage.completion_tokens, MAX_TOKENS)
        self.assertTrue(c.choices[0].message.content.startswith(chat_ref["text"]))
        c = self.chat(CHAT_PROMPTS[0], temperature=0, extra_body={"min_tokens": MAX_TOKENS - 2})
        self.assertGreaterEqual(c.usage.completion_tokens, MAX_TOKENS - 2)
        # repetition_penalty changes the (very repetitive) greedy answer, repeatably; 1.0 not.
        r1 = self.complete(prompt, temperature=0, extra_body={"repetition_penalty": 1.5})
        r2 = self.complete(prompt, temperature=0, extra_body={"repetition_penalty": 1.5})
        self.assertNotEqual(r1.choices[0].text, ref["text"])
        self.assertEqual(r1.choices[0].text, r2.choices[0].text)
        r = self.complete(prompt, temperature=0, extra_body={"repetition_penalty": 1.0})
        self.assertEqual(r.choices[0].text, ref["text"])

    def test_bad_requests(self):
        prompt = COMPLETION_PROMPTS[0]
        self.assert_bad_request(lambda: self.complete(prompt, temperature=-1),
                                "temperature", "temperature")
        self.assert_bad_request(  # also when streaming: the error comes before any chunk
            lambda: self.complete(prompt, temperature=-1, stream=True), "temperature",
            "temperature")
        self.assert_bad_request(lambda: self.complete(prompt, max_tokens=5000), None,
                                "maximum context length is 1024 tokens")
        self.assert_bad_request(lambda: self.complete(prompt, extra_body={"top_k": "many"}),
                                "top_k", "top_k must be an integer")
        self.assert_bad_request(lambda: self.complete(prompt, extra_body={"min_p": 2.0}),
                                "min_p", "min_p")
        self.assert_bad_request(
            lambda: self.chat(CHAT_PROMPTS[0], stream_options={"include_usage": True}),
            "stream_options", "stream=True")
        with self.assertRaises(openai.NotFoundError) as ctx:
            self.client.completions.create(model="no-such-model", prompt=prompt, max_tokens=1)
        self.assertIn("no-such-model", str(ctx.exception))
        self.complete(prompt, max_tokens=1)  # the server still serves

    def test_tool_choice_required(self):
        # One call (parallel_tool_calls=False: the grammar's array holds one element).
        r = self.tool_chat("required", parallel_tool_calls=False)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls", choice)
        self.assertEqual(choice.message.content, "")  # vLLM: forced choices answer ""
        self.assertEqual(len(choice.message.tool_calls), 1)
        self.assert_calls(choice.message.tool_calls)
        calls, content, finish = self.streamed_tool_chat("required", parallel_tool_calls=False)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "")
        self.assertEqual([(c[1], c[2]) for c in calls],
                         [(c.function.name, c.function.arguments)
                          for c in choice.message.tool_calls])
        self.assertTrue(all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", c[0]) for c in calls))
        two = self.tool_chat("required", parallel_tool_calls=False, n=2, temperature=1, seed=5)
        self.assertEqual(len(two.choices), 2)
        for c in two.choices:
            self.assertEqual(c.finish_reason, "tool_calls", c)
            self.assert_calls(c.message.tool_calls)
        # Any number of calls: the bundled model keeps adding them, so the array is cut by
        # max_tokens: finish_reason "length", no calls (vLLM's answer for a cut array); the
        # stream sends the complete calls it saw, each valid.
        many = self.tool_chat("required", max_tokens=60)
        self.assertEqual(many.choices[0].finish_reason, "length")
        self.assertIsNone(many.choices[0].message.tool_calls)
        self.assertEqual(many.choices[0].message.content, "")
        calls, _, finish = self.streamed_tool_chat("required", max_tokens=60)
        self.assertEqual(finish, "length")
        self.assertGreaterEqual(len(calls), 1)
        for _, name, arguments in calls[:-1]:  # the last may be cut
            jsonschema.validate(json.loads(arguments), TOOL_SCHEMAS[name])

    def test_tool_choice_named(self):
        named = {"type": "function", "function": {"name": "get_time"}}
        r = self.tool_chat(named)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "stop", choice)  # OpenAI's rule for a named one
        calls = choice.message.tool_calls
        self.assertEqual([c.function.name for c in calls], ["get_time"])
        self.assert_calls(calls)
        streamed, content, finish = self.streamed_tool_chat(named)
        self.assertEqual(finish, "stop")
        self.assertEqual([(c[1], c[2]) for c in streamed],
                         [("get_time", calls[0].function.arguments)])

    def test_tool_choice_auto_and_none(self):
        plain = self.chat(TOOL_QUESTION, temperature=0, max_tokens=60)
        # The bundled model writes prose, never <tool_call>: auto answers it as content.
        auto = self.tool_chat("auto", max_tokens=60)
        self.assertIsNone(auto.choices[0].message.tool_calls)
        self.assertNotEqual(auto.choices[0].finish_reason, "tool_calls")
        self.assertEqual(auto.choices[0].message.content, plain.choices[0].message.content)
        none = self.tool_chat("none", max_tokens=60)
        self.assertEqual(none.choices[0].message.content, plain.choices[0].message.content)
        self.assertIsNone(none.choices[0].message.tool_calls)
        _, content, _ = self.streamed_tool_chat("auto", max_tokens=60)
        self.assertEqual(content, plain.choices[0].message.content)

    def test_tool_errors(self):
        self.assert_bad_request(
            lambda: self.tool_chat({"type": "function", "function": {"name": "nope"}}),
            "tool_choice", "does not match any of the specified `tools`")
        self.assert_bad_request(
            lambda: self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "a"}], tools=[]),
            "tools", "must not be an empty array")
        self.assert_bad_request(
            lambda: self.complete("a", extra_body={"tools": TOOLS}), "tools",
            "chat completions field")

    def test_response_format_parse(self):
        class Verse(pydantic.BaseModel):
            book: str = pydantic.Field(max_length=10)
            testament: str = pydantic.Field(pattern="^(old|new)$")
            canonical: bool

        r = self.client.beta.chat.completions.parse(
            model=self.model, messages=[{"role": "user", "content": "Name a book."}],
            response_format=Verse, max_tokens=200, temperature=0)
        parsed = r.choices[0].message.parsed
        self.assertIsInstance(parsed, Verse)
        self.assertIn(parsed.testament, ("old", "new"))

    def test_api_key(self):
        for key in ("wrong-key", API_KEY + "x"):
            with openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0,
                               timeout=REQUEST_S) as wrong:
                with self.assertRaises(openai.AuthenticationError) as ctx:
                    wrong.models.list()
                self.assertIn("API key", str(ctx.exception))
                with self.assertRaises(openai.AuthenticationError):
                    wrong.completions.create(model=self.model, prompt="a", max_tokens=1)
                with self.assertRaises(openai.AuthenticationError):
                    wrong.chat.completions.create(
                        model=self.model, messages=[{"role": "user", "content": "a"}],
                        max_tokens=1, stream=True)
        self.assertEqual(len(self.client.models.list().data), 1)  # the right key works


class TensorParallel1(ServerTest):
    TP = 1


class TensorParallel2(ServerTest):
    TP = 2  # worker processes, the shared-memory all-reduce
    MODEL_NAME = "kjv-tiny-tp2"  # and --served-model-name


def main():
    global ARGS
    here = os.path.dirname(os.path.abspath(__file__))
    default_model = os.path.normpath(os.path.join(here, "../../../models/kjv-llama-tiny"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launch", required=True, help="the vllm-launch binary")
    parser.add_argument("--generate", required=True, help="the llm_generate binary")
    parser.add_argument("--tp", default="1,2", help="tensor-parallel sizes to run (1,2)")
    ARGS = parser.parse_args()
    ARGS.model = default_model  # what vllm-launch serves without a model argument
    # Orphans of the server (engine core, workers) come to us, so none can hide.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"FAIL: prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}", file=sys.stderr)
        return 1
    load_references()
    classes = {"1": TensorParallel1, "2": TensorParallel2}
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for tp in ARGS.tp.split(","):
        suite.addTests(loader.loadTestsFromTestCase(classes[tp]))
    start = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    print(f"openai {openai.__version__}: {result.testsRun} checks, "
          f"{len(result.failures) + len(result.errors)} failed, "
          f"{time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0 if result.wasSuccessful() and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
