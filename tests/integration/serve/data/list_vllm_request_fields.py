#!/usr/bin/env python3
"""Prints vllm_request_fields.txt: the fields of vLLM's CompletionRequest and
ChatCompletionRequest (names and source lines only), read from an unpacked vLLM wheel.

Usage: list_vllm_request_fields.py /path/to/site-packages > vllm_request_fields.txt
"""
import ast
import sys

CLASSES = [
    ("CompletionRequest", "vllm/entrypoints/openai/completion/protocol.py"),
    ("ChatCompletionRequest", "vllm/entrypoints/openai/chat_completion/protocol.py"),
]


def main(root):
    print("# Every field of vLLM 0.33.0's CompletionRequest and ChatCompletionRequest, with its line in")
    print("# vLLM's source (the wheel vllm-0.33.0, commit g4ba787ec9): <class> <field> <file>:<line>.")
    print("# serve_request_fields_test reads it; a field without a row in the test fails there.")
    print("# Regenerate with tests/integration/serve/data/list_vllm_request_fields.py <vllm dir>.")
    for cls, path in CLASSES:
        tree = ast.parse(open(f"{root}/{path}").read())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for st in node.body:
                    if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                            and not st.target.id.startswith("_")):
                        print(f"{cls} {st.target.id} {path}:{st.lineno}")


if __name__ == "__main__":
    main(sys.argv[1])
