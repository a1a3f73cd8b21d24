#!/usr/bin/env python3
"""Recompute a fixture's references with NumPy alone, straight from the files on disk.

Run by hand (not in CI), from the repository root, after tools/make_reference.py:

    python3 tools/check_reference_numpy.py tests/fixtures/models/llama_gqa [more dirs...]

Writes nothing. It reads config.json (the classic keys rope_theta / rope_scaling /
tie_word_embeddings / attention bias by architecture), the safetensors file(s) (through
model.safetensors.index.json when present; F32/F16/BF16 upcast to float32), runs a plain
float32 Llama/Qwen2/Qwen3/Phi-3 forward (RMSNorm, Qwen3's per-head q/k RMSNorm, Phi-3's
fused qkv_proj / gate_up_proj, rotate-half RoPE with llama3 scaling, GQA causal
attention (sliding window per layer_types / sliding_window), SiLU MLP) without a KV cache, greedily decodes reference.json's prompts, and
compares tokens and logits with reference.json. It is an independent check of the
fixtures and a compact statement of the arithmetic the C++ runtime must match.
Needs numpy and safetensors (pip), not torch or transformers.
"""

import json
import math
import os
import sys

import numpy as np


def load_weights(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx)
             else ["model.safetensors"])
    w = {}
    for f in files:
        # safetensors.numpy cannot represent bfloat16; read raw bytes for those.
        w.update(read_safetensors(os.path.join(d, f)))
    return w


def read_safetensors(path):
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {dt}")
        out[name] = arr.reshape(info["shape"]).astype(np.float32)
    return out


def inv_freq(cfg, head_dim):
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    sc = cfg.get("rope_scaling")
    if sc:
        kind = sc.get("rope_type", sc.get("type"))
        if kind == "linear":
            inv = inv / sc["factor"]
        elif kind == "llama3":
            factor, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
            old = sc["original_max_position_embeddings"]
            low_wl, high_wl = old / lo, old / hi
            wl = 2 * math.pi / inv
            scaled = np.where(wl > low_wl, inv / factor, inv)
            smooth = (old / wl - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = (wl >= high_wl) & (wl <= low_wl)
            inv = np.where(medium, smoothed, scaled)
        else:
            raise ValueError(kind)
    return inv.astype(np.float32)


def forward(cfg, w, ids):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    T = len(ids)

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        return y

    freqs = np.outer(np.arange(T, dtype=np.float32), inv_freq(cfg, hd))
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rope(x):  # [heads, T, hd]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + np.concatenate([-x2, x1], axis=-1) * sin

    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    # Sliding window: query i sees keys j with i - window < j <= i (HF's sliding mask).
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    types = cfg.get("layer_types") or ["sliding_attention" if window else "full_attention"] * \
        cfg["num_hidden_layers"]
    far = np.tril(np.full((T, T), -np.inf, dtype=np.float32), -window) if window else None
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        layer_mask = mask + far if types[l] == "sliding_attention" else mask
        h = rms(x, w[p + "input_layernorm.weight"])
        if p + "self_attn.qkv_proj.weight" in w:  # Phi-3: fused rows [q | k | v]
            q, k, v = np.split(lin(h, p + "self_attn.qkv_proj"), [nh * hd, (nh + nkv) * hd], -1)
        else:
            q, k, v = (lin(h, p + "self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))
        q = q.reshape(T, nh, hd).transpose(1, 0, 2)
        k = k.reshape(T, nkv, hd).transpose(1, 0, 2)
        v = v.reshape(T, nkv, hd).transpose(1, 0, 2)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3: each head normalised, before RoPE
            q = rms(q, w[p + "self_attn.q_norm.weight"])
            k = rms(k, w[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        k = np.repeat(k, nh // nkv, axis=0)
        v = np.repeat(v, nh // nkv, axis=0)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + layer_mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(T, nh * hd)
        x = x + lin(o, p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate_up_proj.weight" in w:  # Phi-3: fused rows [gate | up]
            g, u = np.split(lin(h, p + "mlp.gate_up_proj"), 2, -1)
        else:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(g / (1 + np.exp(-g)) * u, p + "mlp.down_proj")
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def check(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg["architectures"][0] in ("Gemma2ForCausalLM", "Gemma3ForCausalLM",
                                   "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                                   "MixtralForCausalLM"):
        # Not covered: Gemma's (1 + w) sandwich norms, GeGLU, soft caps and per-layer RoPE;
        # mixture-of-experts routing (the C++ CPU model checks those against transformers).
        print(f"{d}: skipped ({cfg['architectures'][0]} is not covered by this check)")
        return True
    ref = json.load(open(os.path.join(d, "reference.json")))
    w = load_weights(d)
    worst = 0.0
    ok = True
    for i, (p, g) in enumerate(zip(ref["prompts"], ref["greedy"])):
        seq = list(p)
        for _ in range(ref["max_new_tokens"]):
            logits = forward(cfg, w, seq)
            seq.append(int(np.argmax(logits[-1])))
        got = seq[len(p):]
        logits = forward(cfg, w, p + g[:-1])
        worst = max(worst,
                    float(np.abs(logits[len(p) - 1] - ref["prompt_logits"][i]).max()),
                    float(np.abs(logits[-1] - ref["final_logits"][i]).max()))
        if got != g:
            ok = False
            print(f"  prompt {i}: tokens differ\n    numpy {got}\n    ref   {g}")
    print(f"{d}: {'OK' if ok else 'MISMATCH'}; max |logit diff| {worst:.3g}")
    return ok


if __name__ == "__main__":
    results = [check(d) for d in sys.argv[1:]]
    sys.exit(0 if results and all(results) else 1)
