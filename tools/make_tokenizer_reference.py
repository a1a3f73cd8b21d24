#!/usr/bin/env python3
"""Record what HF tokenizers/transformers make of models/kjv-llama-tiny's tokenizer.

Run by hand (not in CI), from the repository root, after tools/train_tiny_model.py:

    python3 tools/make_tokenizer_reference.py --model models/kjv-llama-tiny \\
        --out tests/fixtures/tokenizer/kjv_llama_tiny.json

Writes one JSON file: {"model": ..., "tokenizers_version", "transformers_version",
"encode": [{"text", "ids", "ids_with_special"}...],   # add_special_tokens False / True
"decode": [{"ids", "text", "text_skip_special"}...],
"chat": [{"messages", "add_generation_prompt", "text", "ids"}...]}
"ids" for chat are the rendered text encoded without adding special tokens (the template
already starts with <|begin_of_text|>). A C++ tokenizer / chat-template implementation
can be checked against it.
"""

import argparse
import json
import os

import tokenizers
import transformers
from transformers import AutoTokenizer

TEXTS = [
    "",
    "In the beginning",
    "In the beginning God created the heaven and the earth.",
    "And the LORD said unto Moses,",
    " leading space, and  two  spaces; trailing space ",
    "Numbers 3:16 and 12345 and 1611",
    "line one\nline two\n\nafter a blank line\r\n",
    "tabs\tand\t\tmore",
    "Jesus wept.",
    "It's, I'm, we'll, they've, he'd, you're, don't",
    "UPPER lower MiXeD",
    "punctuation!? ... -- (parens) [brackets] {braces} \"quotes\" 'single'",
    "héllo wörld café naïve",
    "emoji 😀 and 漢字 and ελληνικά",
    "<|begin_of_text|>special tokens in text<|eot_id|><|end_of_text|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "a<|eot_id|>b",
    "<|not_special|>",
    "   ",
    "\n",
    "x" * 50,
]

DECODES = [
    [0],
    [0, 1150, 263, 2088],
    [3, 402, 271, 4, 203, 203],
    [76, 132],               # "h" + half of "é": a partial UTF-8 sequence (U+FFFD)
    [1, 2, 3, 4],
]

CHATS = [
    ([{"role": "user", "content": "The LORD is my shepherd; I shall not want."}], True),
    ([{"role": "user", "content": "  padded  "}], False),
    ([{"role": "system", "content": "Speak as the King James Bible."},
      {"role": "user", "content": "Who made the heaven and the earth?"},
      {"role": "assistant", "content": "God created the heaven and the earth."},
      {"role": "user", "content": "And then?"}], True),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/kjv-llama-tiny")
    ap.add_argument("--out", default="tests/fixtures/tokenizer/kjv_llama_tiny.json")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model)
    ref = {"model": args.model, "tokenizers_version": tokenizers.__version__,
           "transformers_version": transformers.__version__,
           "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
           "vocab_size": len(tok), "encode": [], "decode": [], "chat": []}
    for t in TEXTS:
        ref["encode"].append({"text": t,
                              "ids": tok(t, add_special_tokens=False).input_ids,
                              "ids_with_special": tok(t, add_special_tokens=True).input_ids})
    for ids in DECODES:
        ref["decode"].append({"ids": ids, "text": tok.decode(ids),
                              "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
    for messages, agp in CHATS:
        text = tok.apply_chat_template(messages, add_generation_prompt=agp, tokenize=False)
        ref["chat"].append({"messages": messages, "add_generation_prompt": agp, "text": text,
                            "ids": tok(text, add_special_tokens=False).input_ids})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {len(TEXTS)} encodes, {len(DECODES)} decodes, "
          f"{len(CHATS)} chats")


if __name__ == "__main__":
    main()
