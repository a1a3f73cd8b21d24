#!/usr/bin/env python3
"""Build the tiny seeded Llama-family checkpoints and their transformers references.

Run by hand (not in CI), from the repository root:

    pip install torch transformers safetensors
    nice python3 tools/make_reference.py --out tests/fixtures/models

It writes, for each fixture NAME in {llama_mha, llama_gqa, qwen2, qwen3, phi3, llama_mqa,
mistral_swa, qwen2_swa, qwen3_moe, mixtral, qwen2_moe, ...} (fixture_specs() lists them
all):

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
safe_serialization=True) in the on-disk dtype of the fixture. Gemma (norm_offset): norms
multiply by 1 + w, so their weights are perturbed around 0; the tied embedding is scaled by
embed_mul and the final norm's weights shifted by final_norm_shift, without which the
sqrt(hidden)-scaled tied embedding makes every greedy path repeat its input token.

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

MoE fixtures (qwen3_moe, mixtral) are loaded with experts_implementation="eager"
(transformers' per-expert loop; its default is grouped_mm) and also record
    router_min_margin  the smallest gap between the k-th and (k+1)-th router logit over every
                    teacher-forced token: how close expert selection is to a tie.
transformers 5 holds experts as fused 3-D tensors in memory, but save_pretrained writes the
hub's one-tensor-per-expert layout (mlp.experts.E.gate_proj.weight, ...; Mixtral's
block_sparse_moe.experts.E.w1.weight, ...), so the checkpoints look like real ones.

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
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          MixtralConfig, MixtralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig

MAX_NEW_TOKENS = 24
QK_SCALE = 0.5
PROMPT_LENGTHS = [1, 3, 7, 16, 17, 33, 40, 64]
# Gemma soft caps: small enough that tanh bends the scores and logits the models produce.
GEMMA2_ATTN_CAP = 8.0
GEMMA2_FINAL_CAP = 10.0
GEMMA3_FINAL_CAP = 10.0

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
        # Mistral with a sliding window (every layer) shorter than most prompts: the
        # references differ from whole-context attention once a context passes 20 tokens.
        "mistral_swa": dict(
            config_cls=MistralConfig,
            model_cls=MistralForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=128, max_position_embeddings=512,
                rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                rms_norm_eps=1e-5, sliding_window=20),
            dtype="bfloat16",
            shards=1,
            seed=7019,
        ),
        # Qwen2 with use_sliding_window: layers >= max_window_layers (here layer 1 of 2) slide,
        # layer 0 sees the whole context.
        "qwen2_swa": dict(
            config_cls=Qwen2Config,
            model_cls=Qwen2ForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=1, intermediate_size=160, max_position_embeddings=512,
                rope_theta=1000000.0, rope_scaling=None, tie_word_embeddings=True,
                rms_norm_eps=1e-6, use_sliding_window=True, sliding_window=12,
                max_window_layers=1),
            dtype="float32",
            shards=1,
            seed=7013,
        ),
        # Qwen3-MoE: 8 experts, top-2 without renormalisation (norm_topk_prob false), layer 1
        # a dense MLP (mlp_only_layers), q/k norm as Qwen3. transformers 5 keeps experts as
        # fused 3-D tensors in memory but save_pretrained writes the hub's one-tensor-per-
        # expert layout (mlp.experts.E.{gate,up,down}_proj.weight, mlp.gate.weight).
        "qwen3_moe": dict(
            config_cls=Qwen3MoeConfig,
            model_cls=Qwen3MoeForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, intermediate_size=128,
                moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
                max_position_embeddings=512, rope_theta=1000000.0, rope_scaling=None,
                tie_word_embeddings=True, rms_norm_eps=1e-6, attention_bias=False,
                use_sliding_window=False),
            dtype="bfloat16",
            shards=1,
            seed=7007,
            moe=True,
            # transformers 5 writes num_experts as num_local_experts; hub configs say
            # num_experts.
            classic_keys=dict(num_experts=8),
        ),
        # Mixtral: 4 experts (block_sparse_moe.experts.E.w1/w3/w2), top-2 renormalised.
        "mixtral": dict(
            config_cls=MixtralConfig,
            model_cls=MixtralForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=64, num_local_experts=4,
                num_experts_per_tok=2, max_position_embeddings=512, rope_theta=1000000.0,
                rope_scaling=None, tie_word_embeddings=False, rms_norm_eps=1e-5,
                sliding_window=None),
            dtype="float16",
            shards=1,
            seed=8008,
            moe=True,
        ),
        # Qwen2-MoE: 4 experts top-2 plus a shared expert scaled by sigmoid(shared_expert_gate),
        # sparse on layers 1 and 3 only (decoder_sparse_step 2), q/k/v biases, untied.
        "qwen2_moe": dict(
            config_cls=Qwen2MoeConfig,
            model_cls=Qwen2MoeForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=96, moe_intermediate_size=32,
                shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[],
                max_position_embeddings=512, rope_theta=1000000.0, rope_scaling=None,
                tie_word_embeddings=False, rms_norm_eps=1e-6, use_sliding_window=False),
            dtype="bfloat16",
            shards=1,
            seed=9023,
            moe=True,
            classic_keys=dict(num_experts=4),
        ),
        # Gemma-2: (1 + w) RMSNorms before and after attention and MLP, embeddings scaled by
        # sqrt(hidden), GeGLU (tanh GELU), scale query_pre_attn_scalar^-0.5 (24, not head_dim
        # 16), attention and final logit soft caps; layer_types from HF's default pattern
        # (even layers slide, window 16).
        "gemma2": dict(
            config_cls=Gemma2Config,
            model_cls=Gemma2ForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=128,
                max_position_embeddings=512, rope_theta=10000.0, rope_scaling=None,
                tie_word_embeddings=True, rms_norm_eps=1e-6, sliding_window=16,
                query_pre_attn_scalar=24, attn_logit_softcapping=GEMMA2_ATTN_CAP,
                final_logit_softcapping=GEMMA2_FINAL_CAP),
            dtype="float32",
            shards=1,
            seed=9009,
            norm_offset=True,
            embed_mul=0.1,
            final_norm_shift=7.0,
        ),
        # Gemma-3 (text): Gemma-2's layer plus per-head (1 + w) q/k norms; local layers rope
        # base 10000 unscaled, global layers theta 1e5 with linear scaling 4 (transformers 5
        # writes rope_parameters keyed by layer type); no attention soft cap; window 20.
        "gemma3": dict(
            config_cls=Gemma3TextConfig,
            model_cls=Gemma3ForCausalLM,
            config=dict(
                vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, intermediate_size=128,
                max_position_embeddings=512, rope_theta=100000.0, rope_local_base_freq=10000.0,
                rope_scaling={"rope_type": "linear", "factor": 4.0},
                tie_word_embeddings=True, rms_norm_eps=1e-6, sliding_window=20,
                layer_types=["sliding_attention", "sliding_attention", "full_attention",
                             "full_attention"],
                query_pre_attn_scalar=48, final_logit_softcapping=GEMMA3_FINAL_CAP),
            dtype="bfloat16",
            shards=1,
            seed=10010,
            norm_offset=True,
            embed_mul=0.1,
            final_norm_shift=7.0,
            classic_keys=dict(rope_local_base_freq=10000.0),
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
                # Gemma's norms multiply by (1 + w): perturb around 0 instead.
                centre = 0.0 if spec.get("norm_offset") else 1.0
                p.copy_(centre + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(init_std * torch.randn_like(p))
            # Keep attention soft (large random q/k make it nearly one-hot).
            if "q_proj" in name or "k_proj" in name:
                p.mul_(QK_SCALE)
            elif "qkv_proj" in name:  # Phi-3: rows [q | k | v]
                head_dim = cfg.hidden_size // cfg.num_attention_heads
                qk_rows = (cfg.num_attention_heads + cfg.num_key_value_heads) * head_dim
                p[:qk_rows].mul_(QK_SCALE)
        # Gemma: the embedding enters the stream times sqrt(hidden) and, tied, is also the
        # output projection, so at init every model repeats its input token. Shrink it and
        # widen the final norm (its (1 + w) ~ 8) to keep the logits' spread.
        if "embed_mul" in spec:
            model.get_input_embeddings().weight.mul_(spec["embed_mul"])
            model.model.norm.weight.add_(spec["final_norm_shift"])
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
    cfg.update(spec.get("classic_keys", {}))
    with open(path, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")


def load_f32(spec, path):
    # MoE: the plain per-expert loop (transformers' default is grouped_mm).
    extra = dict(experts_implementation="eager") if spec.get("moe") else {}
    return spec["model_cls"].from_pretrained(path, dtype=torch.float32,
                                             attn_implementation="eager", **extra).eval()


@torch.no_grad()
def router_min_margin(model, prompts, gen):
    """The smallest gap between the k-th and (k+1)-th router logit over every token of the
    teacher-forced sequences: how close expert selection is to a tie."""
    gaps = []

    def hook(module, args, out):
        logits = out[0].float()
        top = logits.topk(module.top_k + 1, dim=-1).values
        gaps.append(float((top[:, -2] - top[:, -1]).min()))

    # In memory both architectures call the sparse block `mlp` (Mixtral's is
    # block_sparse_moe on disk only).
    handles = [layer.mlp.gate.register_forward_hook(hook) for layer in model.model.layers
               if hasattr(layer.mlp, "experts")]
    for p, g in zip(prompts, gen):
        all_logits(model, p + g[:-1])
    for h in handles:
        h.remove()
    return round6(min(gaps))


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
    model = load_f32(spec, out_dir)
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
    if spec.get("moe"):
        ref["router_min_margin"] = router_min_margin(model, prompts, gen)
        print(f"{name}: router min k-th vs (k+1)-th logit gap {ref['router_min_margin']}")
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
    model = load_f32(spec, out_dir)
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
