#!/usr/bin/env python3
"""Build small tokenizer.json fixtures with HF `tokenizers` and record HF's results on them.

Run by hand (not in CI), from the repository root:

    nice python3 tools/make_tokenizer_goldens.py --text /tmp/kjv.txt

Writes under tests/fixtures/tokenizer/:
  llama3_bpe/   byte-level BPE with Llama-3's exact Split regex + ByteLevel(use_regex=false),
                ignore_merges, Llama-3 special tokens, TemplateProcessing BOS;
  qwen2_bpe/    the same with Qwen2's regex (single digits), no BOS post-processor,
                a non-special added token;
  fallback_bpe/ BPE over raw UTF-8 characters (no ByteLevel) with byte_fallback and
                <0xNN> tokens, decoder Sequence[ByteFallback, Fuse];
  llama2_sp/    SentencePiece-converted BPE as transformers' LlamaConverter writes Llama-2 /
                Mistral v0.1 (legacy): <unk> <s> </s>, <0x00>..<0xFF>, byte_fallback,
                fuse_unk, normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no
                pre-tokenizer, decoder Sequence[Replace("▁", " "), ByteFallback, Fuse,
                Strip(" ", 1, 0)], TemplateProcessing "<s> $A"; normalized added tokens;
  metaspace_sp/ the same vocab in the non-legacy shape (Mistral v0.3; LlamaConverter with
                legacy=False): no normalizer, pre_tokenizer Metaspace(prepend_scheme "first",
                split false), the same decoder;
  metaspace_split_sp/ pre_tokenizer Metaspace(prepend_scheme "always", split true), decoder
                Sequence[ByteFallback, Metaspace, Fuse], TemplateProcessing "<s> $A </s>";
  qwen2_nfc_bpe/, qwen2_nfkc_bpe/ qwen2_bpe with the NFC normalizer of Qwen2's real
                tokenizer.json, and with Sequence[NFKC]; their corpus adds texts whose
                normalization forms differ;
each with tokenizer.json, tokenizer_config.json and golden.json:
  {"encode": [{"text", "ids", "ids_with_special"[, "decoded"]}], "decode": [{"ids", "text",
   "text_skip_special"}]} ("decoded": HF's decode of "ids" where it is not "text").
And tests/fixtures/tokenizer/chat_templates.json: the Llama-3, Qwen2, Qwen2.5, Mistral, Gemma-2,
Gemma-3 and Phi-3
chat templates as published in their tokenizer_config.json files, rendered with jinja2 the
way transformers does (trim_blocks, lstrip_blocks, raise_exception) on several
conversations. Everything is seeded/deterministic.
"""

import argparse
import json
import os
import random

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_0|>"]
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

MULTILINGUAL = [
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ἐν ἀρχῇ ἦν ὁ λόγος",
    "我能吞下玻璃而不伤身体。日本語のテキスト、カタカナ。한국어 문장입니다.",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني.",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती.",
    "family 👨‍👩‍👧‍👦 wave 👋🏽 flag 🏳️‍🌈 thumbs 👍🏿 heart ❤️",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 ग\u094d",
    "mixed: Hello мир κόσμε 世界 عالم दुनिया 🌍",
    "\u00a0nbsp\u2003em-space\u3000ideographic space\u200bzero-width",
]
ADVERSARIAL = [
    "",
    " ",
    "                                        x",
    "a          \n\n\n\n      b\t\t\t\tc  \r\n\r\n  ",
    "\n\n\n",
    "\t \t \n \t",
    "1234567890123456789 0.5 3.14159 1,000,000 007",
    "It's I'M we'LL they'Ve he'd You'RE don'T 's 't 're",
    "UPPER lower MiXeD cAmElCaSe SCREAMING_SNAKE",
    "<|begin_of_text|>inside<|eot_id|> text <|end_of_text|><|im_start|>x<|im_end|>",
    "<|eot_id|><|eot_id|><|begin_of_text|",
    "<|endoftext|>tail",
    "almost <|special|> and <| eot_id |> and <<|eot_id|>>",
    "\ufffd replacement and \u0000 nul and \u007f del and \u200d zwj",
    "!!!??? ... ---- ((())) [[[]]] {{{}}} @@@ ### $$$ %%% ^^^ &&& *** ``` ~~~",
    "http://example.com/path?q=1&r=2#frag user@example.org",
    "x" * 1000,
    "antidisestablishmentarianism" * 20,
    "In the beginning God created the heaven and the earth. " * 5,
    "\u0085next-line\u2028line-sep\u2029para-sep",
]


# Text whose normalization forms differ: decomposed and precomposed accents, singletons
# (Ångström, Ohm), compatibility characters (ligatures, full-width, circled, superscripts,
# fractions, squared CJK, Roman numerals), Hangul syllables and jamo, reordered marks.
UNICODE_NORMALIZATION = [
    "cafe\u0301 vs caf\u00e9, A\u030a vs \u00c5 vs \u212b, \u2126 ohm, \u1e9b\u0323 long s",
    "o\u0308\u0301 u\u0308\u0300 a\u0323\u0302 vs a\u0302\u0323 q\u0307\u0323",
    "\ufb01nance \ufb02ow \ufb00 \ufb03 \ufb04 \u017f",
    "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 \uff11\uff12\uff13 \uff01\uff1f \uff76\uff80\uff76\uff85",
    "\u2460\u2461\u2462 x\u00b2 y\u2083 \u00bd \u2153 \u2167 \u216b \u337f \u3392 \u2122 \u2026",
    "\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab\u1100\u116e\u11a8 \u3131\u314f",
    "\u0958 \u0915\u093c \u09dc \u0a33 \u0f43 \u2adc \U0001d400\U0001d401 \U0001f1fa\U0001f1f8",
    "\u00a0nbsp \u2002en \u3000ideo \u00b5 \u03bc \u0385 \u1fee \u1e9e",
]


def corpus_lines(path, limit):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text[:limit]


def train(text, pattern, special, vocab_size, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    extra = "\n".join(MULTILINGUAL)  # so some non-Latin merges exist
    tok.train_from_iterator([text, extra], trainer=trainer)
    return tok


def train_fallback(text):
    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"),
                                             behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>", "<unk>"],
                                  show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    j["model"]["byte_fallback"] = True
    j["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                                     {"type": "Fuse"}]}
    return Tokenizer.from_str(json.dumps(j))


# Texts for the SentencePiece-style fixtures on top of MULTILINGUAL + ADVERSARIAL: spaces at
# the edges, added tokens next to text (Prepend applies to each piece between them), byte
# fallback for characters outside the vocab.
SENTENCEPIECE = [
    "Hello", " Hello", "  Hello", "Hello ", "Hello  ", " ", "  ", "\n", " \n ", "\n\nx\n",
    "a b  c   d    e", "\tTab\t", "<s>", "<s>Hello", "<s> Hello", "Hello<s>", "Hello <s> world",
    "</s></s> <unk>", "<s><s>", "a</s>b", "hallelujah", "say hallelujah!",
    "Hallelujah hallelujah", "xhallelujah", "[INST] Who? [/INST] Me.</s>", "[INST]x",
    "<tool_call>{}</tool_call>", "▁ pre-escaped ▁▁ meta", "▁", "café naïve über",
    "我能 😀😀", "é漢🌍",
    "In the beginning God created the heaven and the earth.\n\nAnd the earth was void.",
]


def sentencepiece_model(text):
    """A tiny SentencePiece-like BPE: Metaspace-split training, then Llama-2's id layout."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator([text, "\n".join(MULTILINGUAL[:3])], trainer=trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    return {"type": "BPE", "dropout": None, "unk_token": "<unk>",
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
            "merges": trained["merges"]}


def sp_added(content, i, special=True, normalized=False):
    return {"id": i, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": normalized, "special": special}


SP_BOS = {"SpecialToken": {"id": "<s>", "type_id": 0}}
SP_TEMPLATE = {"type": "TemplateProcessing",
               "single": [SP_BOS, {"Sequence": {"id": "A", "type_id": 0}}],
               "pair": [SP_BOS, {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": "<s>", "type_id": 1}},
                        {"Sequence": {"id": "B", "type_id": 1}}],
               "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
LLAMA_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def sentencepiece_tokenizers(text):
    """The three SentencePiece-style tokenizer.json shapes over one vocab (see the docstring)."""
    model = sentencepiece_model(text)
    n = len(model["vocab"])
    specials = [sp_added("<unk>", 0), sp_added("<s>", 1), sp_added("</s>", 2)]
    llama2 = {"version": "1.0", "truncation": None, "padding": None,
              "added_tokens": specials + [
                  sp_added("[INST]", n, special=True, normalized=True),
                  sp_added("[/INST]", n + 1, special=True, normalized=True),
                  sp_added("hallelujah", n + 2, special=False, normalized=True)],
              "normalizer": {"type": "Sequence", "normalizers": [
                  {"type": "Prepend", "prepend": "▁"},
                  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
              "pre_tokenizer": None, "post_processor": SP_TEMPLATE, "decoder": LLAMA_DECODER,
              "model": model}
    metaspace = dict(llama2, normalizer=None, added_tokens=specials + [
        sp_added("[INST]", n), sp_added("[/INST]", n + 1),
        sp_added("<tool_call>", n + 2, special=False, normalized=False),
        sp_added(" hallelujah", n + 3, special=False, normalized=True)])
    metaspace["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                                  "prepend_scheme": "first", "split": False}
    split = dict(metaspace, added_tokens=specials + [sp_added("</tool_call>", n, special=False)])
    split["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                              "prepend_scheme": "always", "split": True}
    split["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        {"type": "Fuse"}]}
    split["post_processor"] = dict(SP_TEMPLATE, single=SP_TEMPLATE["single"] + [
        {"SpecialToken": {"id": "</s>", "type_id": 0}}], special_tokens=dict(
            SP_TEMPLATE["special_tokens"], **{"</s>": {"id": "</s>", "ids": [2],
                                                       "tokens": ["</s>"]}}))
    return [(name, Tokenizer.from_str(json.dumps(j, ensure_ascii=False)))
            for name, j in (("llama2_sp", llama2), ("metaspace_sp", metaspace),
                            ("metaspace_split_sp", split))]


def record_sentencepiece(text, out_dir, only):
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "tokenizer_class": "LlamaTokenizer", "clean_up_tokenization_spaces": False,
              "chat_template": TEMPLATES["mistral"]}
    for name, tok in sentencepiece_tokenizers(text):
        if only and name not in only:
            continue
        ids = tok.encode("\n我 é <s> x", add_special_tokens=False).ids
        record(tok, name, out_dir, dict(config, legacy=name == "llama2_sp"),
               [[0, 1, 2, 3, 13, 259, 260], ids, [1] + ids, ids[1:], ids[::-1]],
               extra_texts=SENTENCEPIECE)


def record(tok, name, out_dir, config, decodes, extra_texts=()):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
        f.write("\n")
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # what we will load
    g = {"tokenizers_version": tokenizers.__version__, "encode": [], "decode": []}
    for t in MULTILINGUAL + ADVERSARIAL + list(extra_texts):
        e = {"text": t, "ids": tok.encode(t, add_special_tokens=False).ids,
             "ids_with_special": tok.encode(t, add_special_tokens=True).ids}
        decoded = tok.decode(e["ids"], skip_special_tokens=False)
        if decoded != t:  # not a round trip (SentencePiece-style spaces): what HF decodes
            e["decoded"] = decoded
        g["encode"].append(e)
    rng = random.Random(1234)
    n = tok.get_vocab_size(with_added_tokens=True)
    decodes = list(decodes) + [[rng.randrange(n) for _ in range(rng.randrange(1, 40))]
                               for _ in range(40)]
    for e in g["encode"][:12]:
        decodes.append(e["ids"])
    for ids in decodes:
        g["decode"].append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                            "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(g, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {d}: vocab {n}, {len(g['encode'])} encodes, {len(g['decode'])} decodes")


def record_unicode(qwen, out_dir):
    """qwen2_bpe with the normalizer Qwen2's real tokenizer.json has (NFC), and with NFKC."""
    for name, normalizer in (("qwen2_nfc_bpe", normalizers.NFC()),
                             ("qwen2_nfkc_bpe", normalizers.Sequence([normalizers.NFKC()]))):
        tok = Tokenizer.from_str(qwen.to_str())
        tok.normalizer = normalizer
        record(tok, name, out_dir,
               {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "tokenizer_class": "Qwen2Tokenizer"},
               [[0, 1, 2, 3]], extra_texts=UNICODE_NORMALIZATION)


def build_tokenizers(text, out_dir, only):
    record_sentencepiece(text, out_dir, only)
    if only and not only & {"llama3_bpe", "qwen2_bpe", "fallback_bpe", "qwen2_nfc_bpe",
                            "qwen2_nfkc_bpe"}:
        return
    llama = train(text, LLAMA3_PATTERN, LLAMA3_SPECIAL, 2000, ignore_merges=True)
    llama.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", 0)])])
    record(llama, "llama3_bpe", out_dir,
           {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": TEMPLATES["llama3"]}, [[0, 1, 2, 3, 4, 5, 6, 7]])
    qwen = train(text, QWEN2_PATTERN, QWEN2_SPECIAL, 2000, ignore_merges=False)
    qwen.add_tokens(["<tool_call>", " hallelujah"])  # non-special added tokens
    qwen.post_processor = processors.ByteLevel(trim_offsets=False)
    record(qwen, "qwen2_bpe", out_dir,
           {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "tokenizer_class": "Qwen2Tokenizer", "chat_template": TEMPLATES["qwen2_5"]},
           [[0, 1, 2, 3]])
    record_unicode(qwen, out_dir)
    fb = train_fallback(text)
    record(fb, "fallback_bpe", out_dir,
           {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "tokenizer_class": "PreTrainedTokenizerFast"}, [[0, 1, 2]])


TEMPLATES = {
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        "{% endif %}"),
    "qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "qwen2_5": """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
""",
    "mistral": (
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
        "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
        "user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
    "mistral_v3": """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system_message is defined %}
            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
""",
    # Exercises the rest of the documented subset (namespace, loop.*, filters, tests).
    # google/gemma-2-2b-it (the same as gemma-2b-it / gemma-1.1).
    "gemma2": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
        "{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"),
    # google/gemma-3-*-it: the system message is folded into the first user turn.
    "gemma3": """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
""",
    # microsoft/Phi-3-mini-4k-instruct.
    "phi3": (
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
        "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
        "{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"),
    "subset": """{%- set ns = namespace(count=0, roles=[]) %}
{%- for m in messages %}
  {%- set ns.count = ns.count + 1 %}
  {{- loop.index ~ '/' ~ loop.length ~ (' first' if loop.first else '') }}{% if loop.last %} last{% endif %}
  {{ m.role | upper }}: {{ m['content'] | trim | lower }} ({{ m.content | length }})
  {%- if m.role in ['user', 'system'] and not m.content is none %} u{% elif m.role == 'assistant' %} a{% else %} ?{% endif %}
  {{ ' ' ~ (m.content is string) ~ ' ' ~ (m.missing is defined) ~ ' ' ~ (1 < 2) ~ (2 > 3) }}
{% endfor %}
count={{ ns.count }} {{ messages | length }} {{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }} {{ 'abc' | first }}
{{ {'b': 1, 'a': [true, none, "x<&>'"]} | tojson }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 * 3 - 1 }} {{ -4 }} {{ 1.5 }}
{{ bos_token ~ eos_token }}{{ none | string }}|{{ true }}|{{ 'He said "hi"' | tojson }}|{{ 'x' in 'xyz' }}
{%- if add_generation_prompt %}
GEN{% endif %}
""",
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "  What is 2+2?  "},
     {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?\n"}],
    [{"role": "user", "content": "Héllo wörld 漢字 😀 \"quotes\" and 'single'"},
     {"role": "assistant", "content": "Reply with\nnewlines\n\n"},
     {"role": "user", "content": ""}],
    [{"role": "system", "content": "Only a system message."}],
]


def render_templates(out_dir):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers replaces jinja2's HTML-safe tojson with plain json.dumps.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = tojson
    out = {"jinja2_version": jinja2.__version__,
           "environment": "ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)",
           "bos_token": "<s>", "eos_token": "</s>", "templates": TEMPLATES, "renders": []}
    for name, source in TEMPLATES.items():
        tmpl = env.from_string(source)
        for ci, conv in enumerate(CONVERSATIONS):
            for agp in (False, True):
                entry = {"template": name, "conversation": ci, "messages": conv,
                         "add_generation_prompt": agp}
                try:
                    entry["text"] = tmpl.render(messages=conv, add_generation_prompt=agp,
                                                bos_token="<s>", eos_token="</s>")
                except jinja2.exceptions.TemplateError as e:
                    entry["error"] = str(e)
                out["renders"].append(entry)
    path = os.path.join(out_dir, "chat_templates.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}: {len(out['renders'])} renders")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", default="/tmp/kjv.txt", help="training text (public domain)")
    ap.add_argument("--chars", type=int, default=1_500_000, help="characters of it to use")
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    ap.add_argument("--only", nargs="*", default=[],
                    help="rewrite only these fixtures (e.g. llama2_sp metaspace_sp)")
    args = ap.parse_args()
    only = set(args.only)
    if not only:
        render_templates(args.out)
    build_tokenizers(corpus_lines(args.text, args.chars), args.out, only)


if __name__ == "__main__":
    main()
