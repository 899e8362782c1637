#!/usr/bin/env python3
"""Recall-recipe probe: trains one variant of the recall recipe for a fixed
time from a checkpoint and reports recall accuracy over time, so that
several variants can run side by side on one GPU (tools/device/train_tiny.sh
runs four, picks the best and continues it with train.py).

Why: the first two runs never learned key recall (30% with 2-5 facts =
choosing among the document's values): with loss only on the answers,
nothing asks the model for the features a key match needs. The variants
differ in the fact order (key first, "The password of KEY is VALUE.", or
value first, "VALUE is the password of KEY.") and in the attention guidance
(train.recall_losses); all ask about every fact and train next-token
prediction on the prompt text.

Recall here is measured teacher-forced: an answer is exact iff the argmax at
every answer position is the answer's next token (the same as greedy
decoding's exact match), one forward per case, dense attention.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batches  # noqa: E402
import data  # noqa: E402
import export  # noqa: E402
import train  # noqa: E402
from model import TinyGlm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--resume-dir", required=True, help="exported bf16 checkpoint to start from")
    ap.add_argument("--out", required=True, help="writes NAME.pt (train.py --resume format) and NAME.json")
    ap.add_argument("--value-first", type=int, default=0)
    ap.add_argument("--context-weight", type=float, default=0.3)
    ap.add_argument("--guide-weight", type=float, default=0.0)
    ap.add_argument("--recall-max-facts", type=int, default=8)
    ap.add_argument("--max-sentences", type=int, default=40, help="documents of 1..N filler sentences")
    ap.add_argument("--tokens", type=int, default=8192, help="recall tokens per step")
    ap.add_argument("--short-batch", type=int, default=256, help="arithmetic conversations per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--eval-seconds", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    args.recall_ask_all = 1
    dev = args.device
    torch.manual_seed(args.seed)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    import tokenizer as tokmod
    keys = tokmod.single_token_words(tok, data.RECALL_KEYS)
    values = tokmod.single_token_words(tok, data.RECALL_VALUES)
    value_ids = [tok.encode(" " + v, add_special_tokens=False).ids[0] for v in values]
    args.period_id = tok.encode(".", add_special_tokens=False).ids[0]
    pad = tok.token_to_id("<|endoftext|>")
    cfg = train.model_config(tok.get_vocab_size(), 64)
    model = TinyGlm(cfg)
    export.load_exported_into(model, export.read_safetensors(os.path.join(args.resume_dir, "model.safetensors")))
    model = model.to(dev)

    vf = bool(args.value_first)
    gen = data.Generator(args.seed + 11, keys, values, vf)
    prng = random.Random(args.seed + 12)
    pool = batches.Pool(tok, [gen.recall(prng.randint(1, args.max_sentences), args.recall_max_facts, True)
                              for _ in range(4000)], pad).to(dev)
    short = batches.Pool(tok, [gen.arithmetic() for _ in range(20000)], pad).to(dev)
    evals = {}
    for n in (10, 20, 44, 91):
        cases = data.recall_eval(args.seed + 500 + n, keys, values, [n], 40, vf)
        evals[n] = batches.Pool(tok, [data.conversation_segments([(c["user"], c["answer"])], None, True)
                                      for c in cases], pad).to(dev)

    @torch.no_grad()
    def exact(p):
        model.eval()
        ok = 0
        for b0 in range(0, len(p), 8):
            rows = list(range(b0, min(len(p), b0 + 8)))
            n = int(max(p.all_lens[r] for r in rows))
            idx = torch.tensor(rows, device=dev)
            ids, lab = p.all_ids[idx, :n].long(), p.all_labels[idx, :n].long()
            with train.autocast(ids):
                pred = model(ids, mode="dense").argmax(-1)
            ok += int(((pred == lab) | (lab == -100)).all(-1).sum())
        model.train()
        return ok / len(p)

    opt = train.adamw(model.main_parameters(), args.lr)
    rng = random.Random(args.seed + 5)
    t0, step, next_eval, history = time.time(), 0, args.eval_seconds, []
    while True:
        el = time.time() - t0
        prog = min(1.0, el / args.seconds)
        train.set_lr(opt, args.lr * min(1.0, (step + 1) / 30) * (0.1 + 0.45 * (1 + math.cos(math.pi * prog))))
        ids, lab, _ = short.batch(rng, count=args.short_batch, device=dev)
        l1 = train.lm_loss(model, ids, lab, "dense")
        ids, lab, lens = pool.batch(rng, token_budget=args.tokens, device=dev)
        l2, lc, lg, l2_total = train.recall_losses(model, ids, lab, lens, "dense", args, value_ids)
        opt.zero_grad(set_to_none=True)
        (l1 + l2_total).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for moe in model.moe_layers():
            moe.update_bias(1e-3)
        step += 1
        done = el > args.seconds
        if el > next_eval or done:
            next_eval += args.eval_seconds
            r = {"step": step, "seconds": round(el, 1), "arith_loss": round(float(l1), 4),
                 "recall_loss": round(float(l2), 4), "context_loss": round(float(lc), 4),
                 "guide_loss": round(float(lg), 4)}
            r.update({f"recall_{n}": exact(p) for n, p in evals.items()})
            history.append(r)
            print(args.name, json.dumps(r), flush=True)
        if done:
            break
    torch.save({"phase": f"recall probe {args.name}", "state": {k: v.detach().cpu() for k, v in
                                                                 model.state_dict().items()}},
               os.path.join(args.out, f"{args.name}.pt"))
    flags = {"value_first": args.value_first, "context_weight": args.context_weight,
             "guide_weight": args.guide_weight}
    json.dump({"name": args.name, "flags": flags, "history": history},
              open(os.path.join(args.out, f"{args.name}.json"), "w"), indent=1)


# Variants in order of preference: the original fact order before the
# value-first one, no guidance before guidance (the more natural recipe
# wins unless another is clearly better).
PREFERENCE = ["kf", "kf_guide", "vf", "vf_guide"]


def pick(directory, margin=0.03):
    """Prints the chosen variant's name and train.py flags: the best mean
    recall on the 20-, 44- and 91-sentence sets at the end of its probe,
    the earlier one in PREFERENCE when within `margin` of the best."""
    scores = {}
    for name in PREFERENCE:
        path = os.path.join(directory, f"{name}.json")
        if os.path.exists(path):
            r = json.load(open(path))
            last = r["history"][-1]
            scores[name] = (sum(last[f"recall_{n}"] for n in (20, 44, 91)) / 3, r["flags"])
    if not scores:
        raise SystemExit("no probe finished")
    best = max(s for s, _ in scores.values())
    name = next(n for n in PREFERENCE if n in scores and scores[n][0] >= best - margin)
    f = scores[name][1]
    print(name, f"--value-first {f['value_first']} --context-weight {f['context_weight']} "
          f"--guide-weight {f['guide_weight']}")
    print({n: round(s, 3) for n, (s, _) in scores.items()}, file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["pick"]:
        pick(sys.argv[2])
    else:
        main()
