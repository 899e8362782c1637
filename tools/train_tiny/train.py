#!/usr/bin/env python3
"""Trains spar's tiny GLM-5 demo model (GlmMoeDsaForCausalLM) on synthetic
chat data and exports it. Runs on a GPU host with torch + transformers +
tokenizers (see README.md); nothing of it is needed by CI.

Phases (DeepSeek-V3.2's recipe, scaled down):
  1. dense: the whole model with dense causal attention, LM loss on answers;
  2. indexer warm-up: main model frozen, the lightning indexers trained to
     match each layer's dense attention distribution (KL divergence);
  3. sparse: attention restricted to the indexer's top index_topk keys; the
     main model trained by LM loss, the indexers by KL divergence to the
     sparse attention distribution over the selected keys (their inputs
     detached, as in the paper).
Then: evaluation (held-out arithmetic, multi-turn, recall by context length
in sparse / dense / random-selection modes), export (bf16 and block-FP8),
transformers parity, goldens, provenance. Everything lands in --out
(tarred for the device tool's 8-file limit).
"""
import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tarfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batches  # noqa: E402
import data  # noqa: E402
import evaluate  # noqa: E402
import export  # noqa: E402
import tokenizer as tokmod  # noqa: E402
from model import TinyGlm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "tests", "text", "data", "templates", "glm5.jinja")
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def model_config(vocab, topk):
    return {
        "vocab_size": vocab, "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
        "num_hidden_layers": 3, "num_attention_heads": 8, "q_lora_rank": 128, "kv_lora_rank": 512,
        "qk_nope_head_dim": 64, "qk_rope_head_dim": 64, "v_head_dim": 64, "index_n_heads": 32,
        "index_head_dim": 128, "index_topk": topk, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "routed_scaling_factor": 2.5, "first_k_dense_replace": 1,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 4096, "rope_parameters": {"rope_theta": 1e6},
    }


def autocast(ids):
    # bf16 autocast on the GPU only: on the CPU it is slower than fp32 (the
    # CPU path exists for small experiments, tools/train_tiny/README.md).
    return torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=ids.is_cuda)


def lm_loss(model, ids, labels, mode):
    with autocast(ids):
        logits = model(ids, mode=mode)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def context_labels(ids, labels, lens):
    """Next-token labels for the prompt text of a batch (every position
    whose next token is real and not an answer token)."""
    nxt = torch.full_like(labels, -100)
    nxt[:, :-1] = ids[:, 1:]
    pos = torch.arange(ids.shape[1], device=ids.device)[None]
    return nxt.masked_fill((labels != -100) | (pos + 1 >= lens[:, None]), -100)


def recall_losses(model, ids, labels, lens, mode, args, value_ids, aux=None):
    """Losses on a batch of recall documents: the answers' cross-entropy;
    the prompt text's next-token cross-entropy (so the model builds the
    local-context features, e.g. which key a value follows, that matching
    a question's key against the planted facts needs: with loss on the
    answers alone nothing asks for them); and the attention guidance: the
    negative log attention mass that head 0 of the last layer puts on the
    planted "KEY is VALUE" when an answer is about to copy VALUE. Without
    the last two, two runs stalled at choosing among the document's values
    (recall = 1 / facts, models/tiny-glm5-chat/PROVENANCE.md)."""
    aux = {} if aux is None else aux
    if args.guide_weight > 0:
        g = batches.recall_guide(ids, labels, value_ids, args.value_first, args.period_id)
        if g is not None:
            aux["guide_rows"], aux["guide_layer"] = g, model.c["num_hidden_layers"] - 1
    with autocast(ids):
        logits = model(ids, mode=mode, aux=aux).float().reshape(-1, model.c["vocab_size"])
    answer = F.cross_entropy(logits, labels.reshape(-1), ignore_index=-100)
    zero = answer.new_zeros(())
    context = F.cross_entropy(logits, context_labels(ids, labels, lens).reshape(-1), ignore_index=-100) \
        if args.context_weight > 0 else zero
    guide = -aux["guide_logp"].mean() if "guide_logp" in aux else zero
    return answer, context, guide, answer + args.context_weight * context + args.guide_weight * guide


def indexer_kl(aux, lens, sparse, min_row=16):
    """Mean over layers and rows of KL(attention || softmax(index scores))."""
    total, layers = 0.0, 0
    for p, index, allowed in zip(aux["probs"], aux["index"], aux["allowed"]):
        b, s, _ = p.shape
        if sparse and allowed is None:
            continue
        m = allowed if sparse else torch.ones(s, s, dtype=torch.bool, device=p.device).tril()[None].expand(b, s, s)
        logq = torch.log_softmax(index.masked_fill(~m, float("-inf")), -1).masked_fill(~m, 0.0)
        kl = (p * (p.clamp_min(1e-12).log() - logq)).masked_fill(~m, 0.0).sum(-1)  # [B, S]
        pos = torch.arange(s, device=p.device)[None]
        rows = ((pos >= min_row) & (pos < lens[:, None])).float()
        total = total + (kl * rows).sum() / rows.sum().clamp_min(1.0)
        layers += 1
    return total / max(layers, 1)


def cosine(ph, warmup, floor=0.1):
    """Linear warm-up over `warmup` steps, then cosine decay to `floor` over
    the phase's progress (steps or wall-clock, so a capped phase still ends
    at the low learning rate)."""
    if ph.done < warmup:
        return (ph.done + 1) / warmup
    t = min(1.0, ph.progress())
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))


def adamw(params, lr):
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}]
    # fused=True only on CUDA: older CPU builds of torch (1.13) lack the argument.
    extra = {"fused": True} if params[0].is_cuda else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), **extra)


def set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


class Phase:
    """Step loop with a step target, a wall-clock cap and a rate record."""

    def __init__(self, name, steps, cap_s):
        self.name, self.steps, self.cap_s = name, steps, cap_s
        self.done, self.start, self.losses = 0, time.time(), []

    def running(self):
        return self.done < self.steps and time.time() - self.start < self.cap_s

    def progress(self):
        """Fraction done, by steps or by the wall-clock cap, whichever is further."""
        return max(self.done / self.steps, (time.time() - self.start) / self.cap_s)

    def record(self, **losses):
        """losses: detached scalar tensors, read back only when logged (no
        per-step host synchronisation)."""
        self.done += 1
        self.losses.append(losses)
        if self.done % 50 == 0 or self.done <= 3:
            self.losses[-50:] = [{k: float(v) for k, v in l.items()} for l in self.losses[-50:]]
            avg = {k: sum(l[k] for l in self.losses[-50:]) / len(self.losses[-50:]) for k in losses}
            log(f"{self.name} step {self.done}: " + ", ".join(f"{k} {v:.4f}" for k, v in avg.items()) +
                f" ({self.done / (time.time() - self.start):.2f} steps/s)")

    def summary(self):
        el = time.time() - self.start
        if torch.cuda.is_available():
            log(f"{self.name}: {self.done} steps in {el:.1f}s, peak GPU memory "
                f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        tail = [{k: float(v) for k, v in l.items()} for l in self.losses[-50:]] or [{}]
        keys = tail[0].keys()
        return {"steps": self.done, "planned_steps": self.steps, "seconds": round(el, 1),
                "steps_per_s": round(self.done / max(el, 1e-9), 3),
                "final_losses": {k: round(sum(l[k] for l in tail) / len(tail), 5) for k in keys}}


def save_checkpoint(model, path, phase):
    torch.save({"phase": phase, "state": {k: v.detach().to("cpu", torch.bfloat16 if v.is_floating_point() and
                                                             not k.endswith("e_score_correction_bias") else v.dtype)
                                          for k, v in model.state_dict().items()}}, path)


def quick_eval(model, tok, evals, stop_ids, device, label):
    a, _ = evaluate.arithmetic_accuracy(model, tok, evals["arithmetic"][:60], stop_ids, "sparse", device)
    r, by = evaluate.recall_accuracy(model, tok, evals["recall_small"], stop_ids, "sparse", device)
    rd, _ = evaluate.recall_accuracy(model, tok, evals["recall_small"], stop_ids, "dense", device)
    log(f"eval after {label}: arithmetic {a:.3f}, recall sparse {r:.3f} dense {rd:.3f}",
        {k: round(v["accuracy"], 2) for k, v in by.items()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true", help="few steps of every phase, small pools")
    ap.add_argument("--vocab-size", type=int, default=1280)
    ap.add_argument("--index-topk", type=int, default=64)
    ap.add_argument("--dense-steps", type=int, default=10 ** 6)
    ap.add_argument("--indexer-steps", type=int, default=10 ** 6)
    ap.add_argument("--sparse-steps", type=int, default=10 ** 6)
    ap.add_argument("--dense-seconds", type=float, default=190)
    ap.add_argument("--indexer-seconds", type=float, default=35)
    ap.add_argument("--sparse-seconds", type=float, default=75)
    ap.add_argument("--short-batch", type=int, default=512)
    ap.add_argument("--long-tokens", type=int, default=16384)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--recall-max-facts", type=int, default=8,
                    help="facts planted per training document (2..N; the tests use 2..5)")
    ap.add_argument("--recall-ask-all", type=int, default=1,
                    help="1: follow-up turns ask about every planted fact, each answer trained")
    ap.add_argument("--curriculum", type=float, default=0.5,
                    help="fraction of the dense phase over which recall batches grow from the "
                         "shortest 10%% of documents to all of them (0: no curriculum)")
    ap.add_argument("--value-first", type=int, default=0,
                    help="1: facts read 'VALUE is the password of KEY.' (data.FACT_TEMPLATES_VALUE_FIRST), "
                         "in training and in the evaluation sets")
    ap.add_argument("--context-weight", type=float, default=0.3,
                    help="weight of the next-token loss on recall prompts (recall_losses)")
    ap.add_argument("--guide-weight", type=float, default=1.0,
                    help="weight of the attention guidance on recall answers (recall_losses)")
    ap.add_argument("--resume", help="checkpoint .pt to start from")
    ap.add_argument("--resume-dir", help="exported checkpoint directory (bf16) to start from, "
                                         "e.g. models/tiny-glm5-chat/bf16")
    ap.add_argument("--resumed-from", help="what --resume holds, for the provenance")
    ap.add_argument("--start-phase", choices=["dense", "indexer", "sparse"], default="dense")
    ap.add_argument("--tokenizer-dir", help="reuse this tokenizer.json instead of training one")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    device = args.device
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    smoke = args.smoke
    if smoke:
        args.dense_steps, args.indexer_steps, args.sparse_steps = 40, 10, 10
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else device
    log("torch", torch.__version__, "device", gpu)

    # ---- tokenizer ----
    from tokenizers import Tokenizer
    template = open(TEMPLATE).read()
    tok_dir = os.path.join(work, "tokenizer")
    if args.tokenizer_dir:
        tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    else:
        tok = tokmod.train_tokenizer(data.tokenizer_corpus(args.seed, 4000 if smoke else 20000), args.vocab_size)
    tokmod.save_tokenizer(tok, template, tok_dir)
    vocab = tok.get_vocab_size()
    keys = tokmod.single_token_words(tok, data.RECALL_KEYS)
    values = tokmod.single_token_words(tok, data.RECALL_VALUES)
    for d in "0123456789":
        assert len(tok.encode(d, add_special_tokens=False).ids) == 1
    eos_ids = [tok.token_to_id(t) for t in tokmod.EOS_TOKENS]
    value_ids = [tok.encode(" " + v, add_special_tokens=False).ids[0] for v in values]
    args.period_id = tok.encode(".", add_special_tokens=False).ids[0]
    pad_id = eos_ids[0]
    log(f"tokenizer: {vocab} tokens, {len(keys)}/{len(data.RECALL_KEYS)} keys and "
        f"{len(values)}/{len(data.RECALL_VALUES)} values are single tokens; eos {eos_ids}")
    if len(keys) < 16 or len(values) < 16:
        raise SystemExit("too few single-token recall words: raise --vocab-size")
    config = model_config(vocab, args.index_topk)

    # ---- evaluation sets (fixed seeds, disjoint from training where it matters) ----
    filler_tokens = sum(len(tok.encode(" " + data.filler_sentence(random.Random(i)), add_special_tokens=False).ids)
                        for i in range(400)) / 400
    overhead = 40
    targets = [8, 16, 24, 30]  # context lengths as multiples of index_topk
    counts = [max(4, int((t * args.index_topk - overhead) / filler_tokens)) for t in targets]
    evals = {
        "arithmetic": data.arithmetic_eval(args.seed + 100, 200),
        "multi_turn": data.multi_turn_eval(args.seed + 200, 60),
        "recall": data.recall_eval(args.seed + 300, keys, values, counts, 6 if smoke else 20, bool(args.value_first)),
    }
    evals["recall_small"] = evals["recall"][::5]
    log(f"filler {filler_tokens:.2f} tokens/sentence; recall sentence counts {counts} for {targets} x topk")

    # ---- training pools ----
    gen = data.Generator(args.seed + 1, keys, values, bool(args.value_first))
    prng = random.Random(args.seed + 2)
    n_short, n_long = (4000, 300) if smoke else (100000, 6000)
    max_sentences = int((2100 - overhead) / filler_tokens)
    short_convs = [gen.arithmetic() for _ in range(n_short)]
    long_convs = [gen.recall(prng.randint(3, max_sentences), args.recall_max_facts, bool(args.recall_ask_all))
                  for _ in range(n_long)]
    batches.check_segment_tokenization(tok, short_convs)
    batches.check_segment_tokenization(tok, long_convs, count=30)
    short_pool = batches.Pool(tok, short_convs, pad_id).to(device)
    long_pool = batches.Pool(tok, long_convs, pad_id).to(device)
    ls = long_pool.lengths()
    log(f"pools: {len(short_pool)} short (mean {sum(short_pool.lengths()) / len(short_pool):.1f} tokens), "
        f"{len(long_pool)} recall (tokens {min(ls)}..{max(ls)}, mean {sum(ls) / len(ls):.0f})")
    model = TinyGlm(config).to(device)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    if args.resume_dir:
        export.load_exported_into(model, export.read_safetensors(os.path.join(args.resume_dir, "model.safetensors")))
        log(f"resumed from the exported checkpoint {args.resume_dir}")
    if args.resume:
        ck = torch.load(args.resume, map_location="cpu")
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in ck["state"].items()})
        log(f"resumed from {args.resume} (after phase {ck['phase']})")
    stop_ids = set(eos_ids)
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    rng = random.Random(args.seed + 3)
    phases = {}
    order = ["dense", "indexer", "sparse"]
    start = order.index(args.start_phase)

    # ---- phase 1: dense ----
    if start <= 0:
        opt = adamw(model.main_parameters(), args.lr)
        ph = Phase("dense", args.dense_steps, args.dense_seconds)
        warm = 5 if smoke else 150
        while ph.running():
            set_lr(opt, args.lr * cosine(ph, warm))
            ids, lab, _ = short_pool.batch(rng, count=args.short_batch, device=device)
            l1 = lm_loss(model, ids, lab, "dense")
            # Length curriculum: key-value matching is learned on short
            # documents first (its gradient is diluted over long filler),
            # then the limit grows to the whole pool.
            shortest = 1.0 if args.curriculum <= 0 else 0.1 + 0.9 * ph.progress() / args.curriculum
            ids, lab, lens = long_pool.batch(rng, token_budget=args.long_tokens, device=device, shortest=shortest)
            l2, lc, lg, l2_total = recall_losses(model, ids, lab, lens, "dense", args, value_ids)
            opt.zero_grad(set_to_none=True)
            (l1 + l2_total).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            for moe in model.moe_layers():
                moe.update_bias(1e-3)
            ph.record(arith=l1.detach(), recall=l2.detach(), context=lc.detach(), guide=lg.detach())
            if ph.done % 500 == 0:
                save_checkpoint(model, ckpt_path, "dense-partial")
        phases["dense"] = ph.summary()
        save_checkpoint(model, ckpt_path, "dense")
        try:
            quick_eval(model, tok, evals, stop_ids, device, "dense")
        except Exception as e:  # informational only
            log("quick eval failed:", repr(e))

    # ---- phase 2: indexer warm-up ----
    if start <= 1:
        for p in model.main_parameters():
            p.requires_grad_(False)
        opt = adamw(model.indexer_parameters(), 1e-3)
        ph = Phase("indexer", args.indexer_steps, args.indexer_seconds)
        while ph.running():
            set_lr(opt, 1e-3 * cosine(ph, 2 if smoke else 20))
            ids, _, lens = long_pool.batch(rng, token_budget=args.long_tokens // 2, device=device)
            aux = {"want_index": True, "want_probs": True}
            with autocast(ids):
                model(ids, mode="dense", aux=aux)
            kl = indexer_kl(aux, lens, sparse=False)
            opt.zero_grad(set_to_none=True)
            kl.backward()
            torch.nn.utils.clip_grad_norm_(model.indexer_parameters(), 1.0)
            opt.step()
            ph.record(kl=kl.detach())
        phases["indexer"] = ph.summary()
        for p in model.main_parameters():
            p.requires_grad_(True)
        save_checkpoint(model, ckpt_path, "indexer")
        try:
            quick_eval(model, tok, evals, stop_ids, device, "indexer warm-up")
        except Exception as e:  # informational only
            log("quick eval failed:", repr(e))

    # ---- phase 3: sparse fine-tune ----
    if start <= 2:
        main_lr, idx_lr = args.lr * 0.25, 5e-4
        opt = adamw(model.main_parameters(), main_lr)
        opt_idx = adamw(model.indexer_parameters(), idx_lr)
        ph = Phase("sparse", args.sparse_steps, args.sparse_seconds)
        while ph.running():
            f = cosine(ph, 2 if smoke else 30)
            set_lr(opt, main_lr * f)
            set_lr(opt_idx, idx_lr * f)
            ids, lab, _ = short_pool.batch(rng, count=args.short_batch, device=device)
            l1 = lm_loss(model, ids, lab, "sparse")
            ids, lab, lens = long_pool.batch(rng, token_budget=args.long_tokens // 2, device=device)
            aux = {"want_probs": True}
            l2, lc, lg, l2_total = recall_losses(model, ids, lab, lens, "sparse", args, value_ids, aux)
            kl = indexer_kl(aux, lens, sparse=True)
            opt.zero_grad(set_to_none=True)
            opt_idx.zero_grad(set_to_none=True)
            (l1 + l2_total + kl).backward()
            torch.nn.utils.clip_grad_norm_(model.main_parameters(), 1.0)
            torch.nn.utils.clip_grad_norm_(model.indexer_parameters(), 1.0)
            opt.step()
            opt_idx.step()
            for moe in model.moe_layers():
                moe.update_bias(1e-3)
            ph.record(arith=l1.detach(), recall=l2.detach(), context=lc.detach(), guide=lg.detach(), kl=kl.detach())
            if ph.done % 300 == 0:
                save_checkpoint(model, ckpt_path, "sparse-partial")
        phases["sparse"] = ph.summary()
        save_checkpoint(model, ckpt_path, "sparse")

    # ---- export ----
    model.eval()
    models_dir = os.path.join(work, "models")
    bf16_dir = os.path.join(models_dir, "bf16")
    fp8_dir = os.path.join(models_dir, "fp8")
    export.export(model, bf16_dir, False, eos_ids, pad_id, tok_dir)
    export.export(model, fp8_dir, True, eos_ids, pad_id, tok_dir)
    log("exported", {d: os.path.getsize(os.path.join(d, "model.safetensors")) for d in (bf16_dir, fp8_dir)})

    # The trained weights are safe before anything that could fail.
    def tar(name, d):
        with tarfile.open(os.path.join(args.out, f"{name}.tar"), "w") as t:
            t.add(d, arcname=name)
    res_dir = os.path.join(work, "results")
    os.makedirs(res_dir, exist_ok=True)
    ev = {k: v for k, v in evals.items() if k != "recall_small"}
    ev["index_topk"] = args.index_topk
    for c in ev["arithmetic"]:  # the training renderer's text, for spar's template test
        c["prompt"] = data.render_prefix([{"role": "user", "content": c["question"]}], True, c["enable_thinking"])
    json.dump(ev, open(os.path.join(res_dir, "evals.json"), "w"))
    json.dump({"phases": phases, "config": config, "seed": args.seed},
              open(os.path.join(res_dir, "phases.json"), "w"), indent=2)
    for name, d in (("bf16", bf16_dir), ("fp8", fp8_dir), ("tokenizer", tok_dir), ("evals", res_dir)):
        tar(name, d)

    import traceback
    import hf_check
    failures = []

    def guarded(what, fn, default):
        try:
            return fn()
        except Exception:  # a later stage failing must not lose the others
            failures.append(what)
            log(f"FAILED: {what}\n" + traceback.format_exc())
            return default

    # ---- evaluation of the shipped weights (fp32 math on the exported bf16 / fp8 values) ----
    def run_eval(name, d, full):
        m = hf_check.torch_model_from(export.read_safetensors(os.path.join(d, "model.safetensors")), config, device)
        r = {}
        r["arithmetic"], wrong = evaluate.arithmetic_accuracy(m, tok, evals["arithmetic"], stop_ids, "sparse", device)
        r["arithmetic_wrong"] = wrong[:20]
        r["multi_turn"] = evaluate.multi_turn_accuracy(m, tok, evals["multi_turn"], stop_ids, "sparse", device)
        for mode in (("sparse", "dense", "random") if full else ("sparse",)):
            r[f"recall_{mode}"], r[f"recall_{mode}_by_size"] = evaluate.recall_accuracy(
                m, tok, evals["recall"], stop_ids, mode, device)
        log(f"eval {name}:", {k: v for k, v in r.items() if not k.endswith("wrong")})
        if wrong:
            log("  wrong arithmetic:", wrong[:10])
        return r
    results = {"bf16": guarded("eval bf16", lambda: run_eval("bf16", bf16_dir, True), {})}

    # ---- transformers goldens and parity ----
    def chat_ids(messages):
        return evaluate.encode_prompt(tok, messages)
    rc = evals["recall"]
    golden_prompts = [
        chat_ids([{"role": "user", "content": "What is 12 plus 7?"}]),
        chat_ids([{"role": "user", "content": "What is 45 minus 19?"}, {"role": "assistant", "content": "26"},
                  {"role": "user", "content": "And times 2?"}]),
        chat_ids([{"role": "user", "content": rc[0]["user"]}]),
        chat_ids([{"role": "user", "content": rc[len(rc) // 4]["user"]}]),
    ]
    goldens = {}
    for name, d in (("bf16", bf16_dir), ("fp8", fp8_dir)):
        goldens[name] = guarded(f"goldens {name}", lambda: hf_check.goldens(d, golden_prompts, f"tiny-glm5-chat-{name}"),
                                None)
    for name, g in goldens.items():
        if g is not None:
            json.dump(g, open(os.path.join(res_dir, f"golden-{name}.json"), "w"))
    tar("results", res_dir)  # again at the end, with the provenance
    log("goldens written")
    parity = {}
    for name, d in (("bf16", bf16_dir), ("fp8", fp8_dir)):
        parity[name] = guarded(f"parity {name}", lambda: hf_check.parity(d, config, golden_prompts, device), None)
        log(f"transformers parity {name}:", parity[name])
    results["fp8"] = guarded("eval fp8", lambda: run_eval("fp8", fp8_dir, False), {})

    # ---- provenance and results ----
    import transformers
    import tokenizers
    provenance = {
        "model": "tiny-glm5-chat", "architecture": "GlmMoeDsaForCausalLM", "seed": args.seed,
        "smoke": smoke, "config": config,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer": {"vocab_size": vocab, "trained_on": "tokenizer_corpus(seed) in data.py", "split_regex":
                      tokmod.SPLIT_REGEX, "recall_keys": keys, "recall_values": values},
        "data": {
            "short_pool": len(short_pool), "recall_pool": len(long_pool),
            "short": "arithmetic (+,- on 0..99 with held-out pairs removed; * on 0..12), 0-2 follow-ups "
                     "(+n, -n, *n on the previous answer), numbers in digits or words (30%), 20% system prompt, "
                     "75% thinking-on generation prompt",
            "recall": f"2-{args.recall_max_facts} 'password of KEY is VALUE' facts at random depths in "
                      f"3..{max_sentences} filler sentences, question about one key, answer 'The password of KEY "
                      "is VALUE.'" + ("; follow-up turns ask about every other fact" if args.recall_ask_all else ""),
            "recall_curriculum": args.curriculum, "value_first": args.value_first,
            "context_weight": args.context_weight, "guide_weight": args.guide_weight, "held_out_rule": "(131a + 71b + c_op) mod 11 = 0",
            "short_batch": args.short_batch, "long_tokens": args.long_tokens,
        },
        "started_from": args.resumed_from or args.resume or args.resume_dir or "random weights",
        "phases": phases,
        "eval": {k: {kk: vv for kk, vv in v.items()} for k, v in results.items()},
        "eval_sets": {"arithmetic": len(evals["arithmetic"]), "multi_turn": len(evals["multi_turn"]),
                      "recall": len(evals["recall"]), "recall_sentence_counts": counts,
                      "recall_target_multiples_of_topk": targets},
        "transformers_parity": parity,
        "failed_stages": failures,
        "host": {"gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
                 "tokenizers": tokenizers.__version__, "python": platform.python_version()},
        "total_seconds": round(time.time() - T0, 1),
    }
    json.dump(provenance, open(os.path.join(res_dir, "provenance.json"), "w"), indent=2)
    tar("results", res_dir)
    shutil.rmtree(work)
    if failures:
        log("stages that failed:", failures)
    log("done")


if __name__ == "__main__":
    main()
