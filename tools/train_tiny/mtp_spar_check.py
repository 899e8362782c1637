#!/usr/bin/env python3
"""Checks that spar runs the MTP layer as the training code computes it:
greedy speculative decoding simulated in torch (train_mtp.speculative_greedy:
the layer over the kept rows, then recurrently; drafts budgeted as
engine/speculation_limits.h) against `spar generate --num-speculative-tokens
K` on the cpu backend, for K = 1, 2, 3 on fixed prompts: the output ids must
be equal, and so must the verify steps, drafted and accepted tokens (spar
prints them on stderr). Equal counts mean equal drafts at every step, i.e.
the same row semantics (which token and state a row reads, position 0's
zeroed embedding, enorm/hnorm order, eh_proj halves, the recurrence, the
shared head).

    python3 tools/train_tiny/mtp_spar_check.py --spar build/services/cli/spar [--mtp-dir DIR]

Without --mtp-dir the MTP layer is constructed on models/tiny-glm5-chat:
eh_proj = [I | 0] (the layer passes its token's embedding on), the decoder
layer random but its output projections zero, shared_head.norm = the final
norm, then a few distillation steps on the model's own continuations
(train_mtp's losses; also a smoke test of them): its drafts are then right
often enough to exercise acceptance and the recurrent drafts. Needs torch (1.13 is enough; no
GPU, no tokenizers); exits non-zero on a mismatch.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402
import train  # noqa: E402
import train_mtp  # noqa: E402
from model import MtpLayer, TinyGlm  # noqa: E402


def pass_through_mtp(main, config):
    mtp = MtpLayer(config)
    h = config["hidden_size"]
    torch.manual_seed(5)
    with torch.no_grad():
        mtp.eh_proj.weight.zero_()
        mtp.eh_proj.weight[:, :h] = torch.eye(h)
        mtp.block.self_attn.o_proj.weight.zero_()
        mtp.block.mlp.down_proj.zero_()
        mtp.block.mlp.shared_experts.down_proj.weight.zero_()
        mtp.head_norm.weight.copy_(main.norm.weight)
    return mtp


def quick_distill(main, mtp, vocab, steps, seed=4):
    """A few distillation steps (train_mtp's losses) on the model's own greedy
    continuations of random prompts, so the drafts are right often enough
    to exercise the recurrent drafts and their acceptance."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        pool = torch.randint(0, vocab - 200, (48, 12), generator=g)
        for _ in range(28):
            pool = torch.cat([pool, main(pool)[:, -1].argmax(-1, keepdim=True)], 1)
    opt = torch.optim.AdamW(mtp.main_parameters(), lr=2e-3)
    lens = torch.full((16,), pool.shape[1])
    with torch.enable_grad():
        for step in range(steps):
            ids = pool[torch.randint(0, pool.shape[0], (16,), generator=g)]
            logits, target = train_mtp.mtp_forward(main, mtp, ids, "dense")
            kl, ce = train_mtp.distill_losses(logits, target, ids, lens)
            opt.zero_grad()
            (kl + 0.1 * ce).backward()
            opt.step()
            if step % 50 == 0 or step == steps - 1:
                print(f"distill step {step}: kl {float(kl):.3f} ce {float(ce):.3f}", flush=True)


def spar_run(spar, model_dir, prompt, max_new, k):
    cmd = [spar, "generate", "--model", model_dir, "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens",
           str(max_new), "--ignore-eos", "--show-ids", "--num-speculative-tokens", str(k)]
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=True)
    ids = [int(x) for x in r.stdout.strip().splitlines()[-1].split()]
    m = re.search(r"speculative decoding: (\d+) verify steps, (\d+) tokens drafted, (\d+) accepted", r.stderr)
    if m is None:
        raise SystemExit(f"no speculation counts from spar: {r.stderr}")
    return ids, tuple(int(x) for x in m.groups())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spar", required=True)
    ap.add_argument("--base-dir", default="models/tiny-glm5-chat")
    ap.add_argument("--mtp-dir", help="a checkpoint directory with the MTP layer (train_mtp.py's bf16)")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("--distill-steps", type=int, default=150,
                    help="without --mtp-dir: distillation steps for the constructed layer (0: none)")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    src = args.mtp_dir or os.path.join(args.base_dir, "bf16")
    cfg = json.load(open(os.path.join(src, "config.json")))
    config = train.model_config(cfg["vocab_size"], cfg["index_topk"])
    tensors = export.read_safetensors(os.path.join(src, "model.safetensors"))
    main_model = TinyGlm(config)
    export.load_exported_into(main_model, tensors)
    main_model.eval()
    tmp = None
    if args.mtp_dir:
        mtp = MtpLayer(config)
        export.load_mtp_into(mtp, tensors)
        model_dir = args.mtp_dir
    else:
        mtp = pass_through_mtp(main_model, config)
        quick_distill(main_model, mtp, cfg["vocab_size"], args.distill_steps)
        tmp = tempfile.mkdtemp()
        model_dir = os.path.join(tmp, "model")
        eos = cfg["eos_token_id"]
        export.export(main_model, model_dir, False, eos, cfg.get("pad_token_id", eos[0]), src, mtp=mtp)
        # The exported bf16 values are what spar runs: the torch side reads them back too.
        tensors = export.read_safetensors(os.path.join(model_dir, "model.safetensors"))
        export.load_exported_into(main_model, tensors)
        mtp = MtpLayer(config)
        export.load_mtp_into(mtp, tensors)
    mtp.eval()
    rng = random.Random(3)
    # Lengths from 1 (the layer's row at position 0) to beyond index_topk (its own indexer selects).
    prompts = [[rng.randrange(cfg["vocab_size"] - 200) for _ in range(n)]
               for n in [1, 12, 30, 70, 90, 130][:args.prompts]]
    failures = 0
    for k in (1, 2, 3):
        want, got = [0, 0, 0], [0, 0, 0]
        for p in prompts:
            ids, s, d, a = train_mtp.speculative_greedy(main_model, mtp, p, k, args.max_new, set(), "sparse", "cpu")
            want = [want[0] + s, want[1] + d, want[2] + a]
            sids, counts = spar_run(args.spar, model_dir, p, args.max_new, k)
            got = [got[i] + counts[i] for i in range(3)]
            if sids != ids:
                failures += 1
                print(f"k={k} prompt of {len(p)}: spar {sids} != torch {ids}")
        ok = want == got
        failures += not ok
        print(f"k={k}: torch (verify steps, drafted, accepted) {tuple(want)}, spar {tuple(got)}: "
              f"{'equal' if ok else 'DIFFERENT'}")
    if tmp:
        shutil.rmtree(tmp)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
