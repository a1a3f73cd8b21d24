#!/usr/bin/env python3
"""Build the tiny seeded Llama-family checkpoints and their transformers references.

Run by hand (not in CI), from the repository root:

    pip install torch transformers safetensors
    nice python3 tools/make_reference.py --out tests/fixtures/models

It writes, for each fixture NAME in {llama_mha, llama_gqa, qwen2, qwen3, phi3, llama_mqa}:

    tests/fixtures/models/NAME/config.json
    tests/fixtures/models/NAME/generation_config.json
    tests/fixtures/models/NAME/model.safetensors                      (all but llama_gqa)
    tests/fixtures/models/NAME/model-0000{1,2}-of-00002.safetensors   (llama_gqa: 2 shards)
    tests/fixtures/models/NAME/model.safetensors.index.json           (llama_gqa)
    tests/fixtures/models/NAME/reference.json

The checkpoints are built with transformers' own classes: torch.manual_seed, random init
with a larger initializer_range than the default (so greedy output is not one token
repeated), RMSNorm weights and (Qwen2) q/k/v biases perturbed away from their trivial
init so the loader's handling of them is exercised (Qwen3's per-head q_norm / k_norm
too), q and k projections scaled by QK_SCALE (Phi-3: the q and k rows of its fused
qkv_proj), then save_pretrained(
safe_serialization=True) in the on-disk dtype of the fixture.

The references are computed from the checkpoint *as loaded back from disk* with
from_pretrained(dtype=torch.float32, attn_implementation="eager"), so a loader that
upcasts bf16/f16 to f32 sees exactly the weights that produced them:

    prompts         8 seeded prompts of token ids, lengths 1, 3, 7, 16, 17, 33, 40, 64.
                    Prompts 3..7 share their first 16 tokens, prompts 5..7 their first 32
                    (prefix caching), prompt 4 is prompt 3 plus one token.
    greedy          model.generate(do_sample=False, max_new_tokens=24, min_new_tokens=24),
                    batch 1, no padding, float32.
    prompt_logits   logits at the last prompt position (they choose greedy[i][0]).
    final_logits    logits at the last position of a forward over prompt + greedy[:-1]
                    (they choose greedy[i][-1]).
    greedy_min_margin  per prompt, the smallest gap between the top two logits over the 24
                    greedy steps (teacher-forced forward); how close greedy is to a tie.

Floats are rounded to 6 significant digits. eos_token_id is vocab_size - 1 (bos is
vocab_size - 2); eos's row of the output projection (the embedding when tied) is scaled
by 0.05 so that it is never the argmax, and the script checks that along every greedy
path (so min_new_tokens never changes the result). Neither id appears in a prompt.

transformers >= 5 writes rope settings as "rope_parameters" and the dtype as "dtype";
the script also writes the classic keys ("rope_theta", "rope_scaling", "torch_dtype")
into config.json, which transformers still reads, so loaders that know only the classic
layout work too.

After writing, every fixture is loaded again from disk and its greedy tokens re-checked.
Deterministic: same torch/transformers versions give byte-identical files.
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

MAX_NEW_TOKENS = 24
QK_SCALE = 0.5
PROMPT_LENGTHS = [1, 3, 7, 16, 17, 33, 40, 64]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def fixture_specs():
    """The fixtures: name -> (config class, model class, config kwargs, extras)."""
    return {
        "llama_mha": dict(
            config_cls=LlamaConfig,
            model_cls=LlamaForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=4, intermediate_size=128, max_position_embeddings=256,
                rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                rms_norm_eps=1e-5),
            dtype="float32",
            shards=1,
            seed=1001,
        ),
        "llama_gqa": dict(
            config_cls=LlamaConfig,
            model_cls=LlamaForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=128, num_hidden_layers=3, num_attention_heads=8,
                num_key_value_heads=2, head_dim=16, intermediate_size=256,
                max_position_embeddings=512, rope_theta=500000.0,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 64},
                tie_word_embeddings=True, rms_norm_eps=1e-5),
            dtype="bfloat16",
            shards=2,
            seed=2002,
        ),
        "qwen2": dict(
            config_cls=Qwen2Config,
            model_cls=Qwen2ForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=160, max_position_embeddings=512,
                rope_theta=1000000.0, rope_scaling=None, tie_word_embeddings=True,
                rms_norm_eps=1e-6, use_sliding_window=False),
            dtype="float16",
            shards=1,
            seed=3003,
        ),
        # Qwen3: per-head q/k RMSNorm, no q/k/v bias, head_dim (32) != hidden / heads (16).
        "qwen3": dict(
            config_cls=Qwen3Config,
            model_cls=Qwen3ForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, intermediate_size=128,
                max_position_embeddings=512, rope_theta=1000000.0, rope_scaling=None,
                tie_word_embeddings=True, rms_norm_eps=1e-6, attention_bias=False,
                use_sliding_window=False),
            dtype="bfloat16",
            shards=1,
            seed=4004,
        ),
        # Phi-3: fused qkv_proj (GQA 4/2) and gate_up_proj, untied lm_head.
        "phi3": dict(
            config_cls=Phi3Config,
            model_cls=Phi3ForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512,
                original_max_position_embeddings=512, rope_theta=10000.0, rope_scaling=None,
                tie_word_embeddings=False, rms_norm_eps=1e-5, sliding_window=None),
            dtype="float16",
            shards=1,
            seed=5005,
        ),
        # One KV head (multi-query): tensor parallelism beyond it replicates the KV head.
        "llama_mqa": dict(
            config_cls=LlamaConfig,
            model_cls=LlamaForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=1, intermediate_size=128, max_position_embeddings=256,
                rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                rms_norm_eps=1e-5),
            dtype="float32",
            shards=1,
            seed=6007,
        ),
    }


def round6(x):
    """Round a float to 6 significant digits (as a JSON-friendly Python float)."""
    return float(f"{x:.6g}")


def make_prompts(seed, vocab_size, forbidden):
    """8 prompts with shared prefixes; ids in [0, vocab_size) minus `forbidden`."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([i for i in range(vocab_size) if i not in forbidden])

    def draw(n):
        idx = torch.randint(0, len(allowed), (n,), generator=g)
        return [int(allowed[i]) for i in idx]

    base = draw(64)  # shared by prompts 3..7
    prompts = [
        draw(1),
        draw(3),
        draw(7),
        base[:16],
        base[:16] + draw(1),
        base[:32] + draw(1),
        base[:32] + draw(8),
        base[:64],
    ]
    assert [len(p) for p in prompts] == PROMPT_LENGTHS
    return prompts


def build_model(spec, init_std, eos, bos):
    cfg = spec["config_cls"](
        **copy.deepcopy(spec["config"]), initializer_range=init_std, eos_token_id=eos, bos_token_id=bos,
        pad_token_id=None)
    torch.manual_seed(spec["seed"])
    model = spec["model_cls"](cfg).to(torch.float32).eval()
    # Norm weights start at 1 and biases at 0; move them so a loader that ignored them
    # (or swapped them) would not reproduce the references.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(init_std * torch.randn_like(p))
            # Keep attention soft (large random q/k make it nearly one-hot).
            if "q_proj" in name or "k_proj" in name:
                p.mul_(QK_SCALE)
            elif "qkv_proj" in name:  # Phi-3: rows [q | k | v]
                head_dim = cfg.hidden_size // cfg.num_attention_heads
                qk_rows = (cfg.num_attention_heads + cfg.num_key_value_heads) * head_dim
                p[:qk_rows].mul_(QK_SCALE)
        # Shrink eos's output row (the embedding row when tied) so eos is never the
        # argmax: the references then do not depend on min_new_tokens / eos handling.
        model.get_output_embeddings().weight[eos].mul_(0.05)
    return model


def save_checkpoint(model, spec, out_dir):
    """save_pretrained in the fixture's dtype; llama_gqa is split into exactly 2 shards."""
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    dtype = DTYPES[spec["dtype"]]
    m = model.to(dtype)
    m.config.dtype = dtype
    if spec["shards"] == 1:
        m.save_pretrained(out_dir, safe_serialization=True, max_shard_size="1GB")
    else:
        total = sum(p.numel() * p.element_size() for p in m.state_dict().values())
        # Shard size a bit above half the model: the greedy packer then makes 2 shards.
        for frac in (0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.5):
            shutil.rmtree(out_dir, ignore_errors=True)
            m.save_pretrained(out_dir, safe_serialization=True,
                              max_shard_size=int(total * frac))
            shards = [f for f in os.listdir(out_dir) if f.endswith(".safetensors")]
            if len(shards) == spec["shards"]:
                break
        else:
            raise RuntimeError("could not produce %d shards" % spec["shards"])
    model.to(torch.float32)
    add_classic_config_keys(os.path.join(out_dir, "config.json"), spec)
    for f in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, f), 0o644)


def add_classic_config_keys(path, spec):
    """Also write rope_theta / rope_scaling / torch_dtype (pre-transformers-5 layout)."""
    with open(path) as f:
        cfg = json.load(f)
    cfg["rope_theta"] = spec["config"]["rope_theta"]
    cfg["rope_scaling"] = copy.deepcopy(spec["config"]["rope_scaling"])
    cfg["torch_dtype"] = spec["dtype"]
    cfg["dtype"] = spec["dtype"]
    with open(path, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")


def load_f32(model_cls, path):
    return model_cls.from_pretrained(path, dtype=torch.float32,
                                     attn_implementation="eager").eval()


@torch.no_grad()
def greedy(model, prompt):
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS,
                         num_beams=1, pad_token_id=model.config.eos_token_id)
    return [int(t) for t in out[0, len(prompt):]]


@torch.no_grad()
def all_logits(model, ids):
    return model(torch.tensor([ids])).logits[0].float()


def compute_reference(model, prompts, eos):
    gen, prompt_logits, final_logits, margins = [], [], [], []
    for p in prompts:
        g = greedy(model, p)
        assert len(g) == MAX_NEW_TOKENS
        logits = all_logits(model, p + g[:-1])[len(p) - 1:]  # [24, vocab]
        # Teacher-forced argmax must reproduce generate() step by step, and eos must
        # never be the argmax (min_new_tokens would otherwise have changed the path).
        am = logits.argmax(-1).tolist()
        if am != g:
            raise RuntimeError(f"teacher-forced argmax {am} != generate {g}")
        if eos in g:
            raise RuntimeError("eos generated")
        top2 = logits.topk(2, dim=-1).values
        margins.append(round6(float((top2[:, 0] - top2[:, 1]).min())))
        gen.append(g)
        prompt_logits.append([round6(v) for v in logits[0].tolist()])
        final_logits.append([round6(v) for v in logits[-1].tolist()])
    return gen, prompt_logits, final_logits, margins


def make_fixture(name, spec, out_root, init_std):
    vocab = spec["config"]["vocab_size"]
    eos, bos = vocab - 1, vocab - 2
    out_dir = os.path.join(out_root, name)
    model = build_model(spec, init_std, eos, bos)
    save_checkpoint(model, spec, out_dir)
    del model
    model = load_f32(spec["model_cls"], out_dir)
    prompts = make_prompts(spec["seed"] + 7, vocab, {eos, bos})
    gen, plog, flog, margins = compute_reference(model, prompts, eos)
    distinct = [len(set(g)) for g in gen]
    ref = {
        "model": name,
        "architecture": spec["model_cls"].__name__,
        "prompts": prompts,
        "max_new_tokens": MAX_NEW_TOKENS,
        "greedy": gen,
        "prompt_logits": plog,
        "final_logits": flog,
        "greedy_min_margin": margins,
        "vocab_size": vocab,
        "hidden_size": spec["config"]["hidden_size"],
        "eos_token_id": eos,
        "bos_token_id": bos,
        "eos_in_references": False,
        "dtype_on_disk": spec["dtype"],
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "seed": spec["seed"],
        "initializer_range": init_std,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "generate_args": {"do_sample": False, "max_new_tokens": MAX_NEW_TOKENS,
                          "min_new_tokens": MAX_NEW_TOKENS, "batch_size": 1,
                          "padding": False},
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: distinct tokens per generation {distinct}, "
          f"min top1-top2 margin {min(margins):.4g}")
    for p, g in zip(prompts[:3], gen[:3]):
        print(f"  {p[:8]}... -> {g}")
    return distinct


def verify(name, spec, out_root):
    """Reload from disk and re-check the recorded greedy tokens."""
    out_dir = os.path.join(out_root, name)
    with open(os.path.join(out_dir, "reference.json")) as f:
        ref = json.load(f)
    model = load_f32(spec["model_cls"], out_dir)
    cfg = model.config
    assert cfg.eos_token_id == ref["eos_token_id"]
    assert cfg.tie_word_embeddings == spec["config"]["tie_word_embeddings"]
    for p, g in zip(ref["prompts"], ref["greedy"]):
        got = greedy(model, p)
        if got != g:
            raise RuntimeError(f"{name}: greedy mismatch on reload: {got} != {g}")
    print(f"{name}: verified ({len(ref['prompts'])} prompts) rope={cfg.rope_parameters}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--only", nargs="*", help="fixture names (default: all)")
    ap.add_argument("--init-std", type=float, default=0.3,
                    help="initializer_range for the random weights")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    specs = fixture_specs()
    names = args.only or list(specs)
    for name in names:
        make_fixture(name, specs[name], args.out, args.init_std)
    for name in names:
        verify(name, specs[name], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
