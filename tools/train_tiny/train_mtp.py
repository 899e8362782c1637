#!/usr/bin/env python3
"""Trains the multi-token-prediction (MTP) layer of models/tiny-glm5-chat on
the frozen model's own states, so spar's speculative decoding accepts real
drafts on it. Runs on the GPU host (torch, tokenizers; transformers for the
parity check), like train.py; CI needs none of it.

The layer (model.MtpLayer; GLM-5's model.layers.{num_hidden_layers}) reads,
at row t, the embedding of token t + 1 and the main model's final-normed
state at t, and predicts token t + 2. It is trained by distillation: the
KL divergence from the frozen main model's own next-token distribution at
t + 1 (what the target will sample or argmax when it verifies the draft),
plus a little cross-entropy on the data's token t + 2. Phases, as train.py's
recipe for the main model:
  1. dense: the layer except its indexer, dense causal attention;
  2. indexer warm-up: the layer's indexer to its dense attention (KL);
  3. sparse: attention through the layer's own indexer top-k (as spar runs
     it beyond index_topk), the layer by distillation, its indexer by KL to
     the sparse attention.
Then the main weights and the layer are exported together (bf16 and block
FP8; the layer's enorm/hnorm/eh_proj/shared_head stay bf16, as in
GLM-5-FP8), the shipped weights are read back, and greedy speculative
decoding is simulated on the chat evaluations for k = 1, 2, 3 (drafts as
spar makes them: the layer over the kept rows, then recurrently on its own
output; acceptance = the longest prefix the target's argmax agrees with):
the mean accepted tokens per verify step go into provenance-mtp.json, and
the simulated outputs must equal plain greedy decoding.

    OUT=/tmp/mtp python3 tools/train_tiny/train_mtp.py --base-dir models/tiny-glm5-chat \
        [--dense-seconds 150 --indexer-seconds 20 --sparse-seconds 60] [--smoke] [--device cpu]

Results in --out: bf16.tar.xz and fp8.tar.xz (the checkpoints with the
layer; tools/train_tiny/splice_mtp.py adds their layer to the shipped
checkpoints), results.tar (provenance-mtp.json, the log). tools/device/train_mtp.sh runs it in one device call.
"""
import argparse
import json
import os
import platform
import random
import sys
import tarfile
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batches  # noqa: E402
import data  # noqa: E402
import evaluate  # noqa: E402
import export  # noqa: E402
import train  # noqa: E402  (model_config, adamw, cosine, Phase, indexer_kl, autocast, log)
from model import MtpLayer, TinyGlm  # noqa: E402

log = train.log


def mtp_forward(main, mtp, ids, mode, aux=None):
    """The layer's rows 0 .. S-2 over a teacher-forced batch: row t reads
    token t + 1 and the main model's normed state at t. Returns the layer's
    logits [B, S-1, V] (row t predicts token t + 2) and the main model's
    logits [B, S, V] (no gradient)."""
    with torch.no_grad(), train.autocast(ids):
        state = main.hidden(ids, mode=mode)
        target_logits = main.lm_head(state)
    positions = torch.arange(ids.shape[1] - 1, device=ids.device)
    with train.autocast(ids):
        emb = main.embed_tokens(ids[:, 1:])
        out = mtp(emb, state[:, :-1], positions, mode=mode, aux=aux)
        logits = mtp.logits(out, main.lm_head)
    return logits.float(), target_logits.float()


def distill_losses(logits, target_logits, ids, lens):
    """KL(main's distribution of token t + 2 || the layer's at row t) and
    the data's cross-entropy, over rows whose token t + 2 exists."""
    s = logits.shape[1]
    rows = (torch.arange(s, device=ids.device)[None] + 2 < lens[:, None]).float()  # [B, S-1]
    p = torch.softmax(target_logits[:, 1:], -1)
    logq = torch.log_softmax(logits, -1)
    kl = (p * (p.clamp_min(1e-12).log() - logq)).sum(-1)
    labels = torch.full_like(ids[:, 1:], -100)
    labels[:, :-1] = ids[:, 2:]
    labels = labels.masked_fill(rows == 0, -100)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    return (kl * rows).sum() / rows.sum().clamp_min(1.0), ce


@torch.no_grad()
def draft(main, mtp, seq, state, d, mode, device):
    """d drafts after seq[-1]: the layer over rows 0 .. L-2 (row t reads
    seq[t + 1] and the main state of row t; its last row reads seq[-1]),
    then recurrently: the row at the next position reads its draft and the
    layer's own previous output, as spar's Speculator::Draft."""
    if d <= 0:
        return []
    L = len(seq)
    emb = main.embed_tokens(torch.tensor([seq[1:]], device=device))
    states = state[:, :L - 1]
    drafts = []
    for i in range(d):
        positions = torch.arange(L - 1 + i, device=device)
        o = mtp(emb, states, positions, mode=mode)
        drafts.append(int(mtp.logits(o[0, -1], main.lm_head).argmax()))
        emb = torch.cat([emb, main.embed_tokens(torch.tensor([[drafts[-1]]], device=device))], 1)
        states = torch.cat([states, o[:, -1:]], 1)
    return drafts


@torch.no_grad()
def speculative_greedy(main, mtp, prompt, k, max_new, stop_ids, mode, device):
    """Greedy speculative decoding as spar's engine runs it (drafts per step
    budgeted like engine/speculation_limits.h), without a cache: each forward
    is recomputed over the whole sequence, which causal attention makes
    equal to the cached steps. Returns (output ids, verify steps with drafts,
    drafts, accepted)."""
    seq, out = list(prompt), []
    max_total = len(prompt) + max_new
    steps = drafted = accepted = 0
    state = main.hidden(torch.tensor([seq], device=device), mode=mode)
    pending = [int(main.lm_head(state[0, -1]).argmax())]
    wanted = max(0, min(k, max_total - len(seq) - 2))
    while True:
        for y in pending:
            if y in stop_ids:
                return out, steps, drafted, accepted
            out.append(y)
            seq.append(y)
            if len(out) >= max_new:
                return out, steps, drafted, accepted
        d = max(0, min(wanted, max_new - len(out) - 1))
        drafts = draft(main, mtp, seq, state, d, mode, device)
        L = len(seq)
        state = main.hidden(torch.tensor([seq + drafts], device=device), mode=mode)
        target = main.lm_head(state[0, L - 1:]).argmax(-1).tolist()
        a = 0
        while a < d and target[a] == drafts[a]:
            a += 1
        if d > 0:
            steps, drafted, accepted = steps + 1, drafted + d, accepted + a
        wanted = max(0, min(k, max_total - (L + d) - 2))
        pending = drafts[:a] + [target[a]]


def acceptance(main, mtp, tok, evals, stop_ids, device, mode="sparse"):
    """Mean accepted tokens per verify step (accepted + 1) for k = 1, 2, 3 on
    the chat evaluations, and whether the outputs equal plain greedy."""
    sets = {
        "arithmetic": ([evaluate.encode_prompt(tok, [{"role": "user", "content": c["question"]}], c["enable_thinking"])
                        for c in evals["arithmetic"]], 8),
        "multi_turn_first": ([evaluate.encode_prompt(tok, [{"role": "user", "content": c["turns"][0]["user"]}])
                              for c in evals["multi_turn"]], 8),
        "recall": ([evaluate.encode_prompt(tok, [{"role": "user", "content": c["user"]}]) for c in evals["recall"]], 16),
    }
    report = {}
    for name, (prompts, max_new) in sets.items():
        plain = evaluate.greedy(main, prompts, max_new, stop_ids, mode=mode, device=device)
        for k in (1, 2, 3):
            steps = drafted = accepted = mismatches = 0
            for p, want in zip(prompts, plain):
                got, s, d, a = speculative_greedy(main, mtp, p, k, max_new, stop_ids, mode, device)
                steps, drafted, accepted = steps + s, drafted + d, accepted + a
                mismatches += got != want
            report[f"{name}_k{k}"] = {
                "prompts": len(prompts), "verify_steps": steps, "draft_tokens": drafted, "accepted": accepted,
                "acceptance_rate": round(accepted / max(drafted, 1), 4),
                "mean_tokens_per_verify_step": round(1 + accepted / max(steps, 1), 4),
                "outputs_differing_from_plain_greedy": mismatches}
            log(f"acceptance {name} k={k}:", report[f"{name}_k{k}"])
    return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-dir", default="models/tiny-glm5-chat", help="the trained model (bf16/ is read)")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--dense-seconds", type=float, default=150)
    ap.add_argument("--indexer-seconds", type=float, default=20)
    ap.add_argument("--sparse-seconds", type=float, default=60)
    ap.add_argument("--short-batch", type=int, default=512)
    ap.add_argument("--long-tokens", type=int, default=16384)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--ce-weight", type=float, default=0.1, help="data cross-entropy next to the distillation KL")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = args.device
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    base = os.path.join(args.base_dir, "bf16")
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else device
    log("torch", torch.__version__, "device", gpu)

    from tokenizers import Tokenizer
    import tokenizer as tokmod
    tok = Tokenizer.from_file(os.path.join(base, "tokenizer.json"))
    keys = tokmod.single_token_words(tok, data.RECALL_KEYS)
    values = tokmod.single_token_words(tok, data.RECALL_VALUES)
    eos_ids = [tok.token_to_id(t) for t in tokmod.EOS_TOKENS]
    stop_ids = set(eos_ids)
    base_config = json.load(open(os.path.join(base, "config.json")))
    config = train.model_config(tok.get_vocab_size(), base_config["index_topk"])
    config["vocab_size"] = base_config["vocab_size"]
    main_model = TinyGlm(config).to(device)
    export.load_exported_into(main_model, export.read_safetensors(os.path.join(base, "model.safetensors")))
    main_model.eval()
    for p in main_model.parameters():
        p.requires_grad_(False)
    mtp = MtpLayer(config).to(device)
    log(f"MTP layer: {sum(p.numel() for p in mtp.parameters()) / 1e6:.2f}M parameters on a frozen "
        f"{sum(p.numel() for p in main_model.parameters()) / 1e6:.2f}M model")

    gen = data.Generator(args.seed + 11, keys, values, False)
    prng = random.Random(args.seed + 12)
    n_short, n_long = (2000, 200) if args.smoke else (50000, 3000)
    filler_tokens = 12.0
    max_sentences = int((2100 - 40) / filler_tokens)
    short_pool = batches.Pool(tok, [gen.arithmetic() for _ in range(n_short)], eos_ids[0]).to(device)
    long_pool = batches.Pool(tok, [gen.recall(prng.randint(3, max_sentences), 8, True) for _ in range(n_long)],
                             eos_ids[0]).to(device)
    rng = random.Random(args.seed + 13)
    phases = {}

    def batch_pair(mode, aux=None):
        """Distillation over a batch of conversations and one of recall documents."""
        total, kls, ces = 0.0, [], []
        for pool, kw in ((short_pool, {"count": args.short_batch}), (long_pool, {"token_budget": args.long_tokens})):
            ids, _, lens = pool.batch(rng, device=device, **kw)
            logits, target = mtp_forward(main_model, mtp, ids, mode, aux if pool is long_pool else None)
            kl, ce = distill_losses(logits, target, ids, lens)
            total = total + kl + args.ce_weight * ce
            kls.append(kl.detach())
            ces.append(ce.detach())
            last_lens = lens
        return total, kls, ces, last_lens

    def step_moe():
        mtp.block.mlp.update_bias(1e-3)

    # ---- 1: dense ----
    opt = train.adamw(mtp.main_parameters(), args.lr)
    ph = train.Phase("mtp-dense", 40 if args.smoke else 10 ** 6, args.dense_seconds)
    mtp.train()
    while ph.running():
        train.set_lr(opt, args.lr * train.cosine(ph, 5 if args.smoke else 100))
        loss, kls, ces, _ = batch_pair("dense")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        step_moe()
        ph.record(kl_chat=kls[0], kl_recall=kls[1], ce_chat=ces[0], ce_recall=ces[1])
    phases["dense"] = ph.summary()

    # ---- 2: the layer's indexer to its dense attention ----
    for p in mtp.main_parameters():
        p.requires_grad_(False)
    opt = train.adamw(mtp.indexer_parameters(), 1e-3)
    ph = train.Phase("mtp-indexer", 10 if args.smoke else 10 ** 6, args.indexer_seconds)
    while ph.running():
        train.set_lr(opt, 1e-3 * train.cosine(ph, 2 if args.smoke else 20))
        ids, _, lens = long_pool.batch(rng, token_budget=args.long_tokens // 2, device=device)
        aux = {"want_index": True, "want_probs": True}
        mtp_forward(main_model, mtp, ids, "dense", aux)
        kl = train.indexer_kl(aux, lens - 1, sparse=False)
        opt.zero_grad(set_to_none=True)
        kl.backward()
        torch.nn.utils.clip_grad_norm_(mtp.indexer_parameters(), 1.0)
        opt.step()
        ph.record(kl=kl.detach())
    phases["indexer"] = ph.summary()
    for p in mtp.main_parameters():
        p.requires_grad_(True)

    # ---- 3: sparse ----
    main_lr, idx_lr = args.lr * 0.25, 5e-4
    opt = train.adamw(mtp.main_parameters(), main_lr)
    opt_idx = train.adamw(mtp.indexer_parameters(), idx_lr)
    ph = train.Phase("mtp-sparse", 10 if args.smoke else 10 ** 6, args.sparse_seconds)
    while ph.running():
        f = train.cosine(ph, 2 if args.smoke else 30)
        train.set_lr(opt, main_lr * f)
        train.set_lr(opt_idx, idx_lr * f)
        aux = {"want_probs": True}
        loss, kls, ces, lens = batch_pair("sparse", aux)
        kl_idx = train.indexer_kl(aux, lens - 1, sparse=True)
        opt.zero_grad(set_to_none=True)
        opt_idx.zero_grad(set_to_none=True)
        (loss + kl_idx).backward()
        torch.nn.utils.clip_grad_norm_(mtp.main_parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(mtp.indexer_parameters(), 1.0)
        opt.step()
        opt_idx.step()
        step_moe()
        ph.record(kl_chat=kls[0], kl_recall=kls[1], kl_indexer=kl_idx.detach())
    phases["sparse"] = ph.summary()
    mtp.eval()

    # ---- export: the main weights plus the layer (the FP8 export re-quantizes
    # the main weights with torch's rounding; tools/train_tiny/splice_mtp.py
    # adds just the layer to the shipped checkpoints) ----
    # The work folder stays outside --out: the device tool brings back at
    # most 8 files of at most 16 MiB, so --out holds only the xz tars.
    work = tempfile.mkdtemp(prefix="train_mtp_")
    dirs = {}
    for name, fp8 in (("bf16", False), ("fp8", True)):
        d = os.path.join(work, name)
        export.export(main_model, d, fp8, eos_ids, eos_ids[0], base, mtp=mtp)
        dirs[name] = d
        with tarfile.open(os.path.join(args.out, f"{name}.tar.xz"), "w:xz") as t:
            t.add(d, arcname=name)
    log("exported", {k: os.path.getsize(os.path.join(d, "model.safetensors")) for k, d in dirs.items()})

    # ---- acceptance on the shipped weights ----
    evals = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tiny_chat",
                                        "evals.json")))
    if args.smoke:
        evals = {k: v[:8] if isinstance(v, list) else v for k, v in evals.items()}
    results = {}
    for name, d in dirs.items():
        tensors = export.read_safetensors(os.path.join(d, "model.safetensors"))
        m = TinyGlm(config)
        export.load_exported_into(m, tensors)
        layer = MtpLayer(config)
        export.load_mtp_into(layer, tensors)
        results[name] = acceptance(m.to(device).eval(), layer.to(device).eval(), tok, evals, stop_ids, device)
    parity = {}
    try:
        import hf_check
        prompts = [evaluate.encode_prompt(tok, [{"role": "user", "content": "What is 12 plus 7?"}])]
        for name, d in dirs.items():
            parity[name] = hf_check.parity(d, config, prompts, device)
    except Exception as e:  # informational: transformers ignores the MTP layer's tensors
        parity["error"] = repr(e)
    log("transformers parity with the MTP layer in the checkpoint:", parity)

    import tokenizers
    provenance = {
        "what": "the MTP layer of tiny-glm5-chat, trained on the frozen model (tools/train_tiny/train_mtp.py)",
        "base": base, "seed": args.seed, "config": config,
        "mtp_parameters": sum(p.numel() for p in mtp.parameters()),
        "loss": f"KL(main next-token distribution at t+1 || MTP at t) + {args.ce_weight} x data cross-entropy",
        "data": {"chat": len(short_pool), "recall": len(long_pool)},
        "phases": phases, "acceptance": results, "transformers_parity": parity,
        "host": {"gpu": gpu, "torch": torch.__version__, "tokenizers": tokenizers.__version__,
                 "python": platform.python_version()},
        "total_seconds": round(time.time() - train.T0, 1),
    }
    res = os.path.join(work, "results")
    os.makedirs(res, exist_ok=True)
    json.dump(provenance, open(os.path.join(res, "provenance-mtp.json"), "w"), indent=2)
    with tarfile.open(os.path.join(args.out, "results.tar"), "w") as t:
        t.add(res, arcname="results")
    log("done")


if __name__ == "__main__":
    main()
