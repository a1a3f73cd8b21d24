#!/usr/bin/env python3
"""Train models/kjv-llama-tiny: a ~5.4M-parameter Llama on the King James Bible.

Run by hand (not in CI), from the repository root:

    apt-get install -y bible-kjv-text          # the text; it pulls in bible-kjv (the reader)
    pip install torch transformers safetensors tokenizers
    nice python3 tools/train_tiny_model.py --out models/kjv-llama-tiny

Data: the whole KJV (66 books, 1189 chapters) as printed by Debian's `bible` program
(`bible -l100000 Gen1:1-Rev22:21`, data file /usr/lib/bible.data from bible-kjv-text).
One document per chapter ("Genesis 1", blank line, one verse per line, verse numbers
dropped), plus --chat-examples chat-formatted documents (user: one verse; assistant: the
next one or two verses) so the model learns the chat template and to end its turn with
<|eot_id|>. Every document is <|begin_of_text|> ... <|end_of_text|>; documents are
shuffled (seeded) and concatenated into one token stream. Every 50th chapter (index % 50 ==
7) is held out for validation.

Tokenizer: HF `tokenizers` byte-level BPE (ByteLevel pre-tokenizer, GPT-2 regex, no
prefix space; ByteLevel decoder), vocab 4096, trained on the same text. Special tokens
(ids 0..4): <|begin_of_text|>, <|end_of_text|>, <|eot_id|>, <|start_header_id|>,
<|end_header_id|>. Post-processor: TemplateProcessing prepending <|begin_of_text|> (as
Llama 3 does). tokenizer_config.json holds bos/eos and a Llama-3-style chat_template.

Model: LlamaForCausalLM, hidden 256, 6 layers, 8 heads, 4 kv heads, intermediate 688,
max_position_embeddings 1024, rope_theta 10000, tied embeddings. AdamW (betas 0.9/0.95,
weight decay 0.1 on matrices), lr 2e-3 with 100 warm-up steps and cosine decay to 1e-4,
batch 16 x 256 tokens (random windows of the stream, seeded), grad clip 1.0, bf16 autocast
on the CPU (weights and optimizer in f32), 2 torch threads. The run stops after --steps or
when --time-limit minutes have passed, whichever comes first; the cosine follows whichever
is further along (step fraction or time fraction), so a time-limited run still ends at
min_lr. Only a run that hits the time limit depends on machine speed (and so is not
bit-reproducible); the steps actually taken are in training_log.json. The model is saved (bf16 safetensors) every --save-every
steps and at the end.

Writes into --out: config.json, generation_config.json, model.safetensors (bfloat16),
tokenizer.json, tokenizer_config.json, training_log.json (losses, timings, samples).
models/kjv-llama-tiny/README.md is written by hand from training_log.json.
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "2")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402

BOS, EOS, EOT, SH, EH = ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                         "<|start_header_id|>", "<|end_header_id|>")
SPECIALS = [BOS, EOS, EOT, SH, EH]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")

SAMPLE_PROMPTS = ["In the beginning", "And the LORD said", "Blessed are the"]


def read_kjv(bible_bin):
    """[(title, [verse, ...]), ...] for the 1189 chapters, via the `bible` reader."""
    out = subprocess.run([bible_bin, "-l100000", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters = []
    for line in out.split("\n"):
        s = line.strip()
        if not s:
            continue
        if line.startswith("  "):  # "  12 verse text"
            num, text = s.split(" ", 1)
            assert num.isdigit(), line
            chapters[-1][1].append(text.strip())
        else:
            chapters.append((s, []))
    assert len(chapters) == 1189, len(chapters)
    return chapters


def chat_text(user, assistant):
    # Same string the chat_template renders (bos included), plus the assistant turn.
    return (f"{BOS}{SH}user{EH}\n\n{user.strip()}{EOT}"
            f"{SH}assistant{EH}\n\n{assistant.strip()}{EOT}")


def build_documents(chapters, n_chat, rng):
    train_docs, val_docs = [], []
    for i, (title, verses) in enumerate(chapters):
        doc = title + "\n\n" + "\n".join(verses)
        (val_docs if i % 50 == 7 else train_docs).append(doc)
    train_chapters = [c for i, c in enumerate(chapters) if i % 50 != 7]
    chats = []
    for _ in range(n_chat):
        _, verses = train_chapters[rng.randrange(len(train_chapters))]
        if len(verses) < 2:
            continue
        k = rng.randrange(len(verses) - 1)
        n = 1 + (rng.random() < 0.3)
        chats.append(chat_text(verses[k], " ".join(verses[k + 1:k + 1 + n])))
    return train_docs, val_docs, chats


def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    return tok


def encode_stream(tok, docs):
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        d = enc.ids
        if not d or d[0] != bos:
            d = [bos] + d
        ids.extend(d + [eos])
    return torch.tensor(ids, dtype=torch.long)


def write_tokenizer_files(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}
             for t in SPECIALS}
    cfg = {
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1024,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def save_model(model, tok, out):
    bos, eos, eot = (tok.token_to_id(t) for t in (BOS, EOS, EOT))
    sd = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()
          if not (k == "lm_head.weight" and model.config.tie_word_embeddings)}
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, state_dict=sd, safe_serialization=True)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    # Classic keys next to transformers-5's rope_parameters / dtype.
    cfg.update(rope_theta=model.config.rope_parameters["rope_theta"], rope_scaling=None,
               torch_dtype="bfloat16", dtype="bfloat16")
    with open(path, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")
    GenerationConfig(bos_token_id=bos, eos_token_id=[eos, eot]).save_pretrained(out)
    for f in os.listdir(out):
        os.chmod(os.path.join(out, f), 0o644)


def lr_at(step, progress, args):
    """Linear warm-up over args.warmup steps, then cosine from lr to min_lr over progress."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = min(1.0, max(0.0, progress))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * p))


def lm_loss(model, x):
    """Mean next-token cross-entropy of x[:, 1:] given x[:, :-1]."""
    logits = model(input_ids=x[:, :-1]).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             x[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, val, seq, n_windows=32):
    model.eval()
    g = torch.Generator().manual_seed(1234)
    starts = torch.randint(0, len(val) - seq - 1, (n_windows,), generator=g)
    losses = []
    for b in starts.split(16):
        x = torch.stack([val[s:s + seq + 1] for s in b.tolist()])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            losses.append(float(lm_loss(model, x)))
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def samples(model_dir, max_new_tokens=48):
    """Load the saved model back (f32) and decode SAMPLE_PROMPTS greedily."""
    from transformers import AutoTokenizer
    tokz = AutoTokenizer.from_pretrained(model_dir)
    m = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for p in SAMPLE_PROMPTS:
        ids = tokz(p, return_tensors="pt").input_ids
        g = m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                       max_new_tokens=max_new_tokens)
        out.append({"prompt": p, "prompt_ids": ids[0].tolist(),
                    "greedy_ids": g[0, ids.shape[1]:].tolist(),
                    "text": tokz.decode(g[0, ids.shape[1]:], skip_special_tokens=False)})
    chat = tokz.apply_chat_template(
        [{"role": "user", "content": "The LORD is my shepherd; I shall not want."}],
        add_generation_prompt=True, tokenize=False)
    ids = tokz(chat, add_special_tokens=False, return_tensors="pt").input_ids
    g = m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                   max_new_tokens=max_new_tokens)
    out.append({"prompt": chat, "prompt_ids": ids[0].tolist(),
                "greedy_ids": g[0, ids.shape[1]:].tolist(),
                "text": tokz.decode(g[0, ids.shape[1]:], skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/kjv-llama-tiny")
    ap.add_argument("--bible", default="/usr/bin/bible")
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--chat-examples", type=int, default=4000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--time-limit", type=float, default=20.0, help="minutes of training")
    ap.add_argument("--save-every", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)

    t0 = time.time()
    chapters = read_kjv(args.bible)
    train_docs, val_docs, chats = build_documents(chapters, args.chat_examples, rng)
    tok = train_tokenizer(train_docs + val_docs, args.vocab)
    assert tok.get_vocab_size() == args.vocab, tok.get_vocab_size()
    write_tokenizer_files(tok, args.out)
    docs = train_docs + chats
    rng.shuffle(docs)
    train = encode_stream(tok, docs)
    val = encode_stream(tok, val_docs)
    print(f"data: {len(train_docs)} chapters + {len(chats)} chat docs -> {len(train)} train "
          f"tokens, {len(val)} val tokens; tokenizer {time.time() - t0:.1f}s", flush=True)

    cfg = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        intermediate_size=args.intermediate, max_position_embeddings=1024,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        initializer_range=0.02, bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS), pad_token_id=None)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.3f}M parameters", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(args.seed)
    log = {"args": vars(args), "n_params": n_params, "train_tokens": len(train),
           "val_tokens": len(val), "torch_version": torch.__version__,
           "transformers_version": transformers.__version__, "steps": [], "evals": []}
    model.train()
    t_train = time.time()
    step, ema = 0, None
    stopped_early = False
    # Progress through the cosine schedule: the larger of the step fraction and the
    # time fraction, so a run cut short by --time-limit still ends with a decayed lr.
    def progress_at(step):
        by_steps = (step - args.warmup) / max(1, args.steps - args.warmup)
        return max(by_steps, (time.time() - t_train) / (args.time_limit * 60))

    lr = args.lr
    while step < args.steps:
        prog = progress_at(step)
        if prog >= 1.0:
            stopped_early = True
            break
        lr = lr_at(step, prog, args)
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train) - args.seq - 1, (args.batch,), generator=g)
        x = torch.stack([train[s:s + args.seq + 1] for s in starts.tolist()])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = lm_loss(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        lv = loss.item()
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        if step % 25 == 0 or step == 1:
            el = time.time() - t_train
            log["steps"].append({"step": step, "loss": round(lv, 4), "ema": round(ema, 4),
                                 "lr": lr, "elapsed_s": round(el, 1)})
            print(f"step {step} loss {lv:.4f} ema {ema:.4f} lr {lr:.2e} "
                  f"{el:.0f}s ({step * args.batch * args.seq / el:.0f} tok/s)", flush=True)
        if step % args.save_every == 0 or step == args.steps:
            vl = evaluate(model, val, args.seq)
            log["evals"].append({"step": step, "val_loss": round(vl, 4),
                                 "elapsed_s": round(time.time() - t_train, 1)})
            print(f"  eval step {step}: val loss {vl:.4f}", flush=True)
            save_model(model, tok, args.out)
    train_s = time.time() - t_train
    if not log["evals"] or log["evals"][-1]["step"] != step:
        vl = evaluate(model, val, args.seq)
        log["evals"].append({"step": step, "val_loss": round(vl, 4),
                             "elapsed_s": round(train_s, 1)})
    save_model(model, tok, args.out)
    log.update(final_step=step, stopped_early=stopped_early, train_seconds=round(train_s, 1),
               final_train_loss_ema=round(ema, 4), final_val_loss=log["evals"][-1]["val_loss"])
    log["samples"] = samples(args.out)
    with open(os.path.join(args.out, "training_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    print(f"done: {step} steps in {train_s:.0f}s, val loss {log['final_val_loss']}")
    for s in log["samples"]:
        print(repr(s["prompt"]), "->", repr(s["text"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
