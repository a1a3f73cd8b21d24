#!/usr/bin/env python3
"""vllm-launch's structured outputs over a corpus of real-world JSON schemas.

Starts the real server on the bundled model (`--port 0`, `--max-num-seqs 16`), then for every
schema in tests/fixtures/schemas sends a chat completion with
`response_format: {"type": "json_schema", "json_schema": {"name": "s", "schema": S, "strict":
true}}`, at temperature 0 and at temperature 1 with a fixed seed, `max_tokens` 512,
`frequency_penalty` 1.0 (without it the tiny model pads with whitespace, which vLLM's
any_whitespace grammar allows, until max_tokens: FREQUENCY_PENALTY), 16 in flight, and
classifies each answer (classify()):

- HTTP 400: refused (the message is recorded and grouped in the table);
- finish_reason "stop": the content must parse as JSON (RFC 8259: no raw control characters
  in strings, no NaN) and validate against S (`jsonschema`, the draft of S's `$schema`, 2020-12
  without one, formats not checked): otherwise a FAILURE;
- finish_reason "length": truncated, counted, not a failure; but the content must still be a
  prefix of some JSON text (json_prefix_error()), so a server that ignores response_format
  fails even when the free text runs to max_tokens;
- anything else (another status, a dropped connection, no choice): a FAILURE.

Then a few hostile schemas (10000 nested levels, a 1 MB pattern, `$ref` cycles, a 100000-entry
enum, catastrophic-backtracking patterns), all at once: each must be refused with a 4xx or
answered within HOSTILE_S; afterwards the server must still answer /health and a plain chat
request. Finally SIGINT: the server exits 0 within SHUTDOWN_S and leaves no process (the test
is their subreaper) and no /dev/shm entry behind. Whatever fails, the server's process group
and every process it started are SIGKILLed.

Exit status 1 when: an answer that stopped is invalid or not JSON, a truncated answer is not a
JSON prefix, a request failed otherwise, a schema is refused at one temperature but not the
other, fewer than --min-accepted schemas (default 200; 0 with --limit) were accepted, a
hostile request was not handled, the server died or did not shut down cleanly, or the overall
--deadline (default 540 s, inside ctest's 600) passed.

    structured_output_corpus_test.py --launch build/release/bin/vllm-launch \\
        [--schemas-dir DIR] [--limit N] [--concurrency 16] [--report FILE.md]
    structured_output_corpus_test.py --self-test   # the classifier on canned answers

Needs the standard library and `jsonschema` (scripts/test.sh installs it, pinned, into
build/release/pydeps; ctest puts that on PYTHONPATH). Without `jsonschema` the test FAILS; it
never skips.
"""

import argparse
import collections
import concurrent.futures
import ctypes
import http.client
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
except ImportError as e:  # a failure, never a skip: the test setup installs it
    print(f"FAIL: cannot import jsonschema ({e}); run scripts/test.sh, which installs it into "
          "build/release/pydeps, or put it on PYTHONPATH", file=sys.stderr)
    sys.exit(1)

SERVER_START_S = 60  # deadline for the ready line
SHUTDOWN_S = 10  # deadline for the server to exit after SIGINT
CLEANUP_S = 5  # deadline for its processes and /dev/shm entries to go
REQUEST_S = 120  # per-request client timeout (also bounded by the overall deadline)
HOSTILE_S = 90  # each hostile request is answered (or refused) within this
HOSTILE_RESERVE_S = HOSTILE_S + 30  # kept from the corpus's share of the deadline
# 512 output tokens: half the bundled model's 1024-token context, more than the JSON of most
# corpus schemas needs when the model closes its strings, and a bound on a runaway answer
# (whitespace or an endless string: both are legal under any_whitespace) at 512 decode steps.
MAX_TOKENS = 512
SEED = 1234  # for the temperature-1 requests
# The bundled model, allowed any whitespace (vLLM's default, any_whitespace=True), writes
# whitespace after "{" until max_tokens: without a penalty 51 of 52 accepted schemas ended
# "length" in a trial. frequency_penalty (plain OpenAI API; it leaves the grammar alone)
# lowers a token's logit by 1.0 per earlier use, so whitespace runs end and most answers close.
FREQUENCY_PENALTY = 1.0
TEMPERATURES = (0.0, 1.0)
PROMPT = "Answer with a JSON document."
PR_SET_CHILD_SUBREAPER = 36
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCHEMAS = os.path.normpath(os.path.join(HERE, "../../fixtures/schemas"))
SCHEMA_FILE = re.compile(r"\d{3}-.+\.json")


# ---- classifying an answer ---------------------------------------------------------------

Outcome = collections.namedtuple("Outcome", "kind detail")  # kind: one of KINDS
KINDS = ("refused", "valid", "invalid", "truncated", "bad_prefix", "error")
FAILING = ("invalid", "bad_prefix", "error")


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def parse_json(text):
    """json.loads as RFC 8259 reads it: no NaN/Infinity (Python accepts them), no raw control
    characters in strings (strict=True, the default)."""
    return json.loads(text, parse_constant=_reject_constant)


def json_prefix_error(text):
    """None when `text` can be continued into a JSON text (surrounding whitespace allowed),
    else why not: what a grammar-constrained answer cut off at max_tokens must satisfy."""
    stack = []  # "{" / "[" of the open containers
    # state: what may come next. value | value_or_close | key_or_close | key | colon |
    # comma_or_close | string | key_string | escape | unicode | number | literal | done
    state, i, pending, literal_left, unicode_left, key_flag = "value", 0, "", "", 0, False
    # Prefixes of a JSON number: "-", "1", "1.", "1.5", "1e", "1.5e+", "12E-3", ...
    number_re = re.compile(r"-|-?(0|[1-9]\d*)(\.|(\.\d+)?([eE][+-]?\d*)?)")

    def after_value():
        return "comma_or_close" if stack else "done"

    while i < len(text):
        c = text[i]
        if state in ("string", "key_string"):
            if c == '"':
                state = "colon" if state == "key_string" else after_value()
            elif c == "\\":
                key_flag, state = state == "key_string", "escape"
            elif ord(c) < 0x20:
                return f"raw control character U+{ord(c):04X} in a string at {i}"
        elif state == "escape":
            if c == "u":
                state, unicode_left = "unicode", 4
            elif c in '"\\/bfnrt':
                state = "key_string" if key_flag else "string"
            else:
                return f"bad escape \\{c} at {i}"
        elif state == "unicode":
            if c not in "0123456789abcdefABCDEF":
                return f"bad \\u escape at {i}"
            unicode_left -= 1
            if unicode_left == 0:
                state = "key_string" if key_flag else "string"
        elif state == "number":
            if c in "0123456789+-.eE" and number_re.fullmatch(pending + c):
                pending += c
            else:
                if not re.fullmatch(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?", pending):
                    return f"bad number {pending!r} at {i}"
                state = after_value()
                continue  # c is read again in the new state
        elif state == "literal":
            if c != literal_left[0]:
                return f"bad literal at {i}"
            literal_left = literal_left[1:]
            if not literal_left:
                state = after_value()
        elif c in " \t\n\r":
            pass
        elif state in ("value", "value_or_close"):
            if c == "]" and state == "value_or_close":
                stack.pop()
                state = after_value()
            elif c == "{":
                stack.append("{")
                state = "key_or_close"
            elif c == "[":
                stack.append("[")
                state = "value_or_close"
            elif c == '"':
                state = "string"
            elif c in "-0123456789":
                state, pending = "number", c
            elif c in "tfn":
                state = "literal"
                literal_left = {"t": "rue", "f": "alse", "n": "ull"}[c]
            else:
                return f"unexpected {c!r} at {i} (a value)"
        elif state in ("key_or_close", "key"):
            if c == "}" and state == "key_or_close":
                stack.pop()
                state = after_value()
            elif c == '"':
                state = "key_string"
            else:
                return f"unexpected {c!r} at {i} (a key)"
        elif state == "colon":
            if c != ":":
                return f"unexpected {c!r} at {i} (':')"
            state = "value"
        elif state == "comma_or_close":
            if c == ",":
                state = "key" if stack[-1] == "{" else "value"
            elif c == ("}" if stack[-1] == "{" else "]"):
                stack.pop()
                state = after_value()
            else:
                return f"unexpected {c!r} at {i} (',' or a close)"
        elif state == "done":
            return f"text after the JSON value at {i}"
        i += 1
    if state == "number" and not number_re.fullmatch(pending):
        return f"bad number {pending!r}"
    return None


def error_message(body):
    """The message of an OpenAI/vLLM error body ({"error": {"message": ...}} or the flat
    {"object": "error", "message": ...}), else the body itself."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body[:300]
    if isinstance(doc, dict):
        inner = doc.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(doc.get("message"), str):
            return doc["message"]
    return body[:300]


def validator_for(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)  # no format_checker: formats are not asserted


def classify(status, body, validator):
    """Outcome of one chat completion: `status` and `body` (str) of the HTTP answer, or
    status None and the exception's text as `body`; `validator` for the schema."""
    if status is None:
        return Outcome("error", f"no answer: {body}")
    if status == 400:
        return Outcome("refused", error_message(body))
    if status != 200:
        return Outcome("error", f"HTTP {status}: {error_message(body)}")
    try:
        doc = json.loads(body)
        choice = doc["choices"][0]
        finish = choice["finish_reason"]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return Outcome("error", f"not a chat completion ({e!r}): {body[:200]}")
    if not isinstance(content, str):
        return Outcome("invalid" if finish == "stop" else "error",
                       f"finish_reason {finish!r} with content {content!r}")
    if finish == "length":
        why = json_prefix_error(content)
        if why:
            return Outcome("bad_prefix", f"{why}: {content[:160]!r}")
        return Outcome("truncated", "")
    if finish != "stop":
        return Outcome("error", f"finish_reason {finish!r}")
    try:
        value = parse_json(content)
    except ValueError as e:
        return Outcome("invalid", f"not JSON ({e}): {content[:160]!r}")
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        path = "/" + "/".join(str(p) for p in error.absolute_path)
        return Outcome("invalid", f"at {path}: {error.message[:200]}; content "
                                  f"{content[:160]!r}")
    return Outcome("valid", "")


# ---- processes (as in openai_sdk_test.py) --------------------------------------------------


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
        fields = stat[stat.rfind(")") + 2:].split()  # comm may hold spaces and parentheses
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
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


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


class Server:
    """One vllm-launch run; stop() checks a clean shutdown, kill() always cleans up."""

    def __init__(self, launch, concurrency):
        self.shm_before = set(os.listdir("/dev/shm"))
        self.log = tempfile.TemporaryFile()
        # No model argument: the server's default, the bundled model. 128 MiB of KV cache:
        # 16 sequences of up to ~540 tokens at 6 KiB a token (float32, 6 layers, 4 KV heads).
        cmd = [launch, "--host", "127.0.0.1", "--port", "0", "--kv-cache-memory", "128MiB",
               "--max-num-seqs", str(concurrency)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True)
        self.tree = []
        line = read_line(self.proc, SERVER_START_S)
        m = re.fullmatch(r"vllm-launch: ready at http://127\.0\.0\.1:(\d+)/v1\n", line or "")
        if m is None:
            code = self.proc.poll()
            why = (f"it exited with {code}" if code is not None else
                   f"no ready line within {SERVER_START_S} s")
            log = self.server_log()
            self.kill()
            raise RuntimeError(f"vllm-launch did not start: {why}, stdout {line!r}; log:\n"
                               f"{log}")
        self.port = int(m.group(1))
        self.tree = descendants_of(self.proc.pid)

    def server_log(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def request(self, method, path, body=None, timeout_s=REQUEST_S):
        """(status, body text); status None and the error's text when no answer came."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=max(timeout_s, 1))
        try:
            data = None if body is None else (body if isinstance(body, bytes)
                                              else json.dumps(body).encode())
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        except (OSError, http.client.HTTPException) as e:
            return None, repr(e)
        finally:
            conn.close()

    def stop(self):
        """SIGINT; returns the list of problems (exit code, leftovers)."""
        self.tree = sorted(set(self.tree) | set(descendants_of(self.proc.pid)))
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=SHUTDOWN_S)
        except subprocess.TimeoutExpired:
            return [f"the server still runs {SHUTDOWN_S} s after SIGINT"]
        problems = [] if code == 0 else [f"the server exited with {code} after SIGINT"]

        def clean():
            reap_orphans()
            return (not children_of(os.getpid()) and not any(alive(p) for p in self.tree)
                    and not set(os.listdir("/dev/shm")) - self.shm_before)

        if not poll(clean, CLEANUP_S):
            left = [p for p in self.tree if alive(p)] + children_of(os.getpid())
            problems.append(f"left behind after shutdown: processes {sorted(set(left))}, "
                            f"/dev/shm {sorted(set(os.listdir('/dev/shm')) - self.shm_before)}")
        return problems

    def kill(self):
        """Runs whatever happened: nothing started here outlives the test."""
        pids = set(self.tree) | set(descendants_of(self.proc.pid))
        if self.proc.poll() is None:  # not reaped: its process group id is still ours
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=SHUTDOWN_S)
        reap_orphans()
        for pid in pids | set(children_of(os.getpid())):  # orphans re-parented to us
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        poll(lambda: (reap_orphans(), not any(alive(p) for p in pids))[1], CLEANUP_S)
        self.log.close()


# ---- the corpus --------------------------------------------------------------------------


def load_schemas(directory, limit):
    names = sorted(n for n in os.listdir(directory) if SCHEMA_FILE.fullmatch(n))
    if limit:
        names = names[:limit]
    out = []
    for name in names:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            text = f.read()
        schema = json.loads(text)
        out.append((name, schema, validator_for(schema)))
    return out


def chat_body(model, schema, temperature, max_tokens=MAX_TOKENS,
              frequency_penalty=FREQUENCY_PENALTY):
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens, "temperature": temperature,
            "frequency_penalty": frequency_penalty,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "s", "schema": schema, "strict": True}}}
    if temperature > 0:
        body["seed"] = SEED
    return body


def run_corpus(server, model, schemas, args, deadline):
    """{(file, temperature): Outcome}; requests not answered before `deadline` are missing."""
    results = {}

    def one(name, schema, validator, temperature):
        left = deadline - time.monotonic()
        if left <= 0:
            return name, temperature, Outcome("error", "not sent: the deadline passed")
        body = chat_body(model, schema, temperature,
                         frequency_penalty=args.frequency_penalty)
        status, body = server.request("POST", "/v1/chat/completions", body,
                                      timeout_s=min(REQUEST_S, left))
        return name, temperature, classify(status, body, validator)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency)
    try:
        futures = [pool.submit(one, name, schema, validator, t)
                   for name, schema, validator in schemas for t in TEMPERATURES]
        done = 0
        try:
            for future in concurrent.futures.as_completed(
                    futures, timeout=max(deadline - time.monotonic(), 0)):
                name, temperature, outcome = future.result()
                results[(name, temperature)] = outcome
                done += 1
                if outcome.kind in FAILING:
                    print(f"FAIL {name} t={temperature}: {outcome.kind}: {outcome.detail}",
                          file=sys.stderr)
                if done % 50 == 0:
                    print(f"... {done}/{len(futures)} answers", file=sys.stderr)
        except concurrent.futures.TimeoutError:
            print(f"FAIL: the deadline passed with {len(futures) - done} requests unanswered",
                  file=sys.stderr)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def prescreen_refusals(directory):
    """The files the corpus README's "Refused (expected 400)" table lists (vLLM's rules and
    XGrammar 0.2.8, tools/fixtures/collect_schemas.py), or None without that README."""
    try:
        with open(os.path.join(directory, "README.md"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    section = text.split("### Refused", 1)[-1].split("\n### ", 1)[0]
    return set(re.findall(r"^\| `(\d{3}-[^`]+\.json)` \|", section, re.MULTILINE))


def prescreen_differences(schemas, results, expected):
    """Lines naming the schemas the server judged otherwise than the pre-screen (not a
    failure: the server may refuse more, or accept what vLLM refuses, on purpose)."""
    if expected is None:
        return []
    t = TEMPERATURES[0]
    refused = {name for name, _, _ in schemas
               if results.get((name, t), Outcome("", "")).kind == "refused"}
    answered = {name for name, _, _ in schemas if (name, t) in results} - refused
    mine = {name for name, _, _ in schemas}
    out = []
    for label, names in (("refused, though vLLM and XGrammar accept them",
                          refused - expected),
                         ("accepted, though vLLM and XGrammar refuse them",
                          answered & expected & mine)):
        if names:
            out.append(f"{len(names)} {label}: {', '.join(sorted(names))}")
    return out


def summarize(schemas, results):
    """(per-temperature counters, refusal reasons -> files, problems)."""
    counts = {t: collections.Counter() for t in TEMPERATURES}
    reasons = collections.defaultdict(set)
    problems = []
    for name, _, _ in schemas:
        kinds = {}
        for t in TEMPERATURES:
            outcome = results.get((name, t))
            if outcome is None:
                counts[t]["unanswered"] += 1
                continue
            kinds[t] = outcome.kind
            counts[t][outcome.kind] += 1
            if outcome.kind == "refused":
                reasons[re.sub(r"\d+", "N", outcome.detail)[:160]].add(name)
        if len(kinds) == len(TEMPERATURES) and len(
                {k == "refused" for k in kinds.values()}) > 1:
            problems.append(f"{name}: refused at one temperature only ({kinds})")
    return counts, reasons, problems


def table(schemas, counts, reasons, wall_s, differences=(),
          frequency_penalty=FREQUENCY_PENALTY):
    """The result as a markdown table, the refusal reasons below it."""
    rows = [("schemas", lambda c: len(schemas)),
            ("compiled (not refused)", lambda c: len(schemas) - c["refused"]),
            ("refused (HTTP 400)", lambda c: c["refused"]),
            ("stop + valid", lambda c: c["valid"]),
            ("stop + invalid (must be 0)", lambda c: c["invalid"]),
            ("length-truncated", lambda c: c["truncated"]),
            ("truncated, not a JSON prefix (must be 0)", lambda c: c["bad_prefix"]),
            ("other errors (must be 0)", lambda c: c["error"]),
            ("unanswered by the deadline (must be 0)", lambda c: c["unanswered"])]
    head = "| | " + " | ".join(f"temperature {t:g}" for t in TEMPERATURES) + " |\n"
    out = head + "|---|" + "---|" * len(TEMPERATURES) + "\n"
    for label, value in rows:
        out += f"| {label} | " + " | ".join(str(value(counts[t])) for t in TEMPERATURES) + " |\n"
    out += (f"\nWall time: {wall_s:.1f} s (max_tokens {MAX_TOKENS}, frequency_penalty "
            f"{frequency_penalty:g}, seed {SEED} at temperature 1).\n")
    if differences:
        out += "\nDifferent from the corpus README's pre-screen (vLLM + XGrammar 0.2.8):\n\n"
        out += "".join(f"- {line}\n" for line in differences)
    out += "\nRefusal reasons:\n\n"
    for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        listed = ", ".join(sorted(names)[:4]) + (", ..." if len(names) > 4 else "")
        out += f"- {len(names)} × {reason.replace('|', '/')} ({listed})\n"
    return out if reasons else out + "- none\n"


# ---- hostile requests --------------------------------------------------------------------


BODY_TEMPLATE = ('{"model":%s,"messages":[{"role":"user","content":%s}],"max_tokens":64,'
                 '"temperature":0,"response_format":{"type":"json_schema","json_schema":'
                 '{"name":"s","strict":true,"schema":%s}}}')


def hostile_schemas():
    """(label, schema as JSON text, whether an answer is validated against it). The nested
    ones are built as text: json.dumps and jsonschema would recurse 10000 deep."""
    depth = 10000
    nested = ('{"type":"object","properties":{"a":' * depth + '{"type":"integer"}'
              + "}}" * depth)
    nested_arrays = '{"type":"array","items":' * depth + '{"type":"null"}' + "}" * depth
    return [
        ("10000 nested objects", nested, False),
        ("10000 nested arrays", nested_arrays, False),
        ("1 MB pattern", json.dumps({"type": "string", "pattern": "[a-z0-9]" * 131072}), True),
        ("$ref cycle a->b->a", json.dumps({"$ref": "#/$defs/a", "$defs": {
            "a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}), False),
        ("$ref to itself", json.dumps({"$ref": "#"}), False),
        ("100000-entry enum", json.dumps({"enum": [f"v{i}" for i in range(100000)]}), True),
        ("pattern ^(a+)+$", json.dumps({"type": "string", "pattern": "^(a+)+$"}), True),
        ("pattern ^(a|a)*b$", json.dumps({"type": "string", "pattern": "^(a|a)*b$"}), True),
        ("pattern (x+x+)+y", json.dumps({"type": "string", "pattern": "(x+x+)+y"}), True),
    ]


def run_hostile(server, model):
    """Problems; all hostile requests are in flight at once, each bounded by HOSTILE_S."""
    problems = []

    def one(label, schema_text, check):
        data = (BODY_TEMPLATE % (json.dumps(model), json.dumps(PROMPT), schema_text)).encode()
        start = time.monotonic()
        status, text = server.request("POST", "/v1/chat/completions", data,
                                      timeout_s=HOSTILE_S)
        return label, status, text, check, schema_text, time.monotonic() - start

    items = hostile_schemas()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(items)) as pool:
        for label, status, text, check, schema_text, took in pool.map(lambda a: one(*a),
                                                                        items):
            failed = False
            if status is not None and 400 <= status < 500:  # 400, or 413 for the big ones
                verdict = f"refused {status}: {error_message(text)[:120]}"
            elif status == 200:
                validator = validator_for(json.loads(schema_text) if check else {})
                outcome = classify(status, text, validator)
                failed = outcome.kind in FAILING
                verdict = f"answered: {outcome.kind} {outcome.detail[:120]}"
            else:
                failed = True
                verdict = f"no answer: {text}" if status is None else f"HTTP {status}"
            if failed:
                problems.append(f"hostile {label}: {verdict}")
            print(f"hostile {label}: {verdict} ({took:.1f} s)", file=sys.stderr)
    status, text = server.request("GET", "/health", timeout_s=10)
    if status != 200:
        problems.append(f"/health after the hostile requests: {status} {text[:200]}")
    status, text = server.request("POST", "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Who was Moses?"}],
        "max_tokens": 8, "temperature": 0}, timeout_s=30)
    if status != 200:
        problems.append(f"a plain request after the hostile ones: {status} {text[:200]}")
    return problems


# ---- main --------------------------------------------------------------------------------


def run(args):
    start = time.monotonic()
    deadline = start + args.deadline
    schemas = load_schemas(args.schemas_dir, args.limit)
    if not schemas:
        print(f"FAIL: no NNN-*.json schema in {args.schemas_dir}", file=sys.stderr)
        return 1
    problems = []
    server = Server(args.launch, args.concurrency)
    try:
        status, text = server.request("GET", "/v1/models", timeout_s=10)
        if status != 200:
            raise RuntimeError(f"/v1/models: {status} {text[:200]}")
        model = json.loads(text)["data"][0]["id"]
        corpus_deadline = deadline - (0 if args.no_hostile else HOSTILE_RESERVE_S)
        results = run_corpus(server, model, schemas, args, corpus_deadline)
        counts, reasons, inconsistent = summarize(schemas, results)
        problems += inconsistent
        differences = prescreen_differences(schemas, results,
                                            prescreen_refusals(args.schemas_dir))
        report = table(schemas, counts, reasons, time.monotonic() - start, differences,
                       args.frequency_penalty)
        print("\n" + report)
        if args.report:
            with open(args.report, "w", encoding="utf-8") as f:
                f.write(f"# Structured-output corpus ({len(schemas)} schemas from "
                        f"{args.schemas_dir})\n\n{report}")
        for t in TEMPERATURES:
            c = counts[t]
            for kind, label in (("invalid", "stopped with invalid output"),
                                ("bad_prefix", "truncated with output that is not JSON"),
                                ("error", "failed otherwise"),
                                ("unanswered", "unanswered by the deadline")):
                if c[kind]:
                    problems.append(f"temperature {t:g}: {c[kind]} {label}")
        accepted = len(schemas) - counts[TEMPERATURES[0]]["refused"]
        if accepted < args.min_accepted:
            problems.append(f"only {accepted} schemas accepted (at least {args.min_accepted})")
        if not args.no_hostile:
            problems += run_hostile(server, model)
        if server.proc.poll() is not None:
            problems.append(f"the server died (exit {server.proc.returncode})")
        else:
            status, text = server.request("GET", "/health", timeout_s=10)
            if status != 200:
                problems.append(f"/health at the end: {status} {text[:200]}")
            problems += server.stop()
        if time.monotonic() > deadline:
            problems.append(f"the overall deadline of {args.deadline} s passed")
        if problems:
            print("server log (tail):\n" + server.server_log(), file=sys.stderr)
    finally:
        server.kill()
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    print(f"structured output corpus: {'FAILED' if problems else 'passed'} "
          f"({len(problems)} problems, {time.monotonic() - start:.1f} s)", file=sys.stderr)
    return 1 if problems else 0


# ---- self-test: the classifier on canned answers -----------------------------------------


def _answer(content, finish="stop"):
    return json.dumps({"object": "chat.completion", "choices": [{
        "index": 0, "finish_reason": finish,
        "message": {"role": "assistant", "content": content}}]})


class ClassifierTest(unittest.TestCase):
    SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"n": {"type": "integer", "minimum": 1},
                             "s": {"type": "string", "format": "email"}},
              "required": ["n"], "additionalProperties": False}

    def kind(self, status, body, schema=None):
        return classify(status, body, validator_for(schema or self.SCHEMA)).kind

    def test_refused(self):
        body = json.dumps({"error": {"message": "The provided JSON schema contains features "
                                     "not supported by xgrammar.", "type": "BadRequestError",
                                     "param": None, "code": 400}})
        outcome = classify(400, body, validator_for(self.SCHEMA))
        self.assertEqual(outcome, Outcome("refused", "The provided JSON schema contains "
                                                     "features not supported by xgrammar."))
        flat = json.dumps({"object": "error", "message": "bad schema", "code": 400})
        self.assertEqual(classify(400, flat, None).detail, "bad schema")

    def test_valid(self):
        self.assertEqual(self.kind(200, _answer('{"n": 3}')), "valid")
        self.assertEqual(self.kind(200, _answer(' \n{ "n" :3 ,"s":"not an email"}\t')),
                         "valid")  # any whitespace; formats are not asserted

    def test_invalid(self):
        for content in ('{"n": 0}', '{}', '{"n": 1, "x": 2}', '[1]', '{"n": 1.5}',
                        "And the LORD said", '{"n": 1', '{"n": NaN}', '{"n": 1}{}',
                        '{"n": 1, "s": "a\tb"}', "", None):
            self.assertEqual(self.kind(200, _answer(content)), "invalid", content)

    def test_draft_from_dollar_schema(self):
        # Draft 4's boolean exclusiveMaximum; under 2020-12 the same keyword is a number.
        draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
                  "maximum": 5, "exclusiveMaximum": True}
        self.assertEqual(self.kind(200, _answer("5"), draft4), "invalid")
        self.assertEqual(self.kind(200, _answer("4.5"), draft4), "valid")
        no_draft = {"prefixItems": [{"type": "integer"}], "items": False}  # 2020-12
        self.assertEqual(self.kind(200, _answer("[1]"), no_draft), "valid")
        self.assertEqual(self.kind(200, _answer("[1, 2]"), no_draft), "invalid")

    def test_truncated(self):
        for content in ('{"n": 12', '{"n": 1, "s": "abc', '  {\n', '', '[', '{"n": 1, ',
                        '{"n": -', '{"s": "a\\u00', '{"n": 1e', 'tr', '{"n": 1}  ', '[[[],{'):
            self.assertEqual(self.kind(200, _answer(content, "length")), "truncated",
                             content)
        for content in ("And the LORD", '{"n": 1}}', '{n', '{"n" 1', '"a\x01', '[1 2',
                        '{"n": 01', '{"n": 1]', 'trux', '{"n": 1} x', '{"n": 1.e'):
            self.assertEqual(self.kind(200, _answer(content, "length")), "bad_prefix",
                             content)

    def test_errors(self):
        self.assertEqual(self.kind(500, '{"error": {"message": "boom"}}'), "error")
        self.assertEqual(self.kind(None, "ConnectionResetError()"), "error")
        self.assertEqual(self.kind(200, "{}"), "error")
        self.assertEqual(self.kind(200, _answer('{"n": 1}', "abort")), "error")
        self.assertEqual(self.kind(200, _answer(None, "length")), "error")

    def test_prefix_checker(self):
        for text in ('{"a": [1, 2.5e-3, true, null, {"b": "\\"\\n\\u0041"}]}', "-0.5E+2",
                     '"x"', " [ ] "):
            self.assertIsNone(json_prefix_error(text), text)
            parse_json(text)  # and each is complete JSON
        self.assertIn("control", json_prefix_error('["\t'))
        self.assertIn("after", json_prefix_error("1 2"))

    def test_summary_and_table(self):
        schemas = [("001-a.json", {}, None), ("002-b.json", {}, None)]
        results = {("001-a.json", 0.0): Outcome("refused", "uniqueItems 12"),
                   ("001-a.json", 1.0): Outcome("valid", ""),
                   ("002-b.json", 0.0): Outcome("truncated", "")}
        counts, reasons, problems = summarize(schemas, results)
        self.assertEqual(counts[0.0]["refused"], 1)
        self.assertEqual(counts[1.0]["unanswered"], 1)
        self.assertEqual(dict(reasons), {"uniqueItems N": {"001-a.json"}})
        self.assertEqual(len(problems), 1)  # refused at 0, accepted at 1
        text = table(schemas, counts, reasons, 1.0)
        self.assertIn("| refused (HTTP 400) | 1 | 0 |", text)
        self.assertIn("| unanswered by the deadline (must be 0) | 0 | 1 |", text)

    def test_prescreen_differences(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertIsNone(prescreen_refusals(d))
            with open(os.path.join(d, "README.md"), "w") as f:
                f.write("# x\n\n### Refused (expected 400)\n\n| file | reason |\n|---|---|\n"
                        "| `001-a.json` | uniqueItems |\n| `002-b.json` | format byte |\n\n"
                        "### Not in the corpus\n\n| `003-c.json` | x |\n")
            expected = prescreen_refusals(d)
        self.assertEqual(expected, {"001-a.json", "002-b.json"})
        schemas = [(n, {}, None) for n in ("001-a.json", "002-b.json", "003-c.json")]
        results = {("001-a.json", 0.0): Outcome("refused", "x"),
                   ("002-b.json", 0.0): Outcome("valid", ""),
                   ("003-c.json", 0.0): Outcome("refused", "y")}
        self.assertEqual(prescreen_differences(schemas, results, expected), [
            "1 refused, though vLLM and XGrammar accept them: 003-c.json",
            "1 accepted, though vLLM and XGrammar refuse them: 002-b.json"])
        self.assertIn("- 1 accepted, though", table(schemas, summarize(schemas, results)[0], {},
                                                    1.0, prescreen_differences(
                                                        schemas, results, expected)))

    def test_hostile_bodies_are_json(self):
        for label, schema_text, check in hostile_schemas():
            data = BODY_TEMPLATE % (json.dumps("m"), json.dumps(PROMPT), schema_text)
            self.assertTrue(data.startswith('{"model":"m"'), label)
            if check:  # json.loads recurses; the nested ones are checked by their brackets
                json.loads(data)
                validator_for(json.loads(schema_text))
            self.assertEqual(data.count("{") + data.count("["),
                             data.count("}") + data.count("]"), label)

    def test_corpus_files_parse(self):
        schemas = load_schemas(DEFAULT_SCHEMAS, 0)  # and each has a validator
        self.assertGreaterEqual(len(schemas), 220)
        for name, schema, _ in schemas:
            self.assertIsInstance(schema, dict, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launch", help="the vllm-launch binary")
    parser.add_argument("--schemas-dir", default=DEFAULT_SCHEMAS)
    parser.add_argument("--limit", type=int, default=0, help="only the first N schemas")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--report", help="also write the table to this markdown file")
    parser.add_argument("--deadline", type=float, default=540.0, help="overall, seconds")
    parser.add_argument("--frequency-penalty", type=float, default=FREQUENCY_PENALTY,
                        help="sent with every corpus request (0: none; see FREQUENCY_PENALTY)")
    parser.add_argument("--min-accepted", type=int, default=None,
                        help="fail below this many accepted schemas (200; 0 with --limit)")
    parser.add_argument("--no-hostile", action="store_true", help="skip the hostile requests")
    parser.add_argument("--self-test", action="store_true",
                        help="check the classifier on canned answers; no server")
    args = parser.parse_args()
    if args.self_test:
        suite = unittest.TestLoader().loadTestsFromTestCase(ClassifierTest)
        result = unittest.TextTestRunner(verbosity=2).run(suite)
        return 0 if result.wasSuccessful() else 1
    if not args.launch:
        parser.error("--launch is required (or --self-test)")
    if args.min_accepted is None:
        args.min_accepted = 0 if args.limit else 200
    # Orphans of the server (engine core) come to us, so none can hide.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"FAIL: prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}", file=sys.stderr)
        return 1
    try:
        return run(args)
    except RuntimeError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
