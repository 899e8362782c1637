#!/usr/bin/env python3
"""Golden fixtures for spar's cpu engine, from Hugging Face transformers.

Loads make-tiny checkpoints (glm5 / dsv32, bf16 / fp8) into
GlmMoeDsaForCausalLM / DeepseekV32ForCausalLM in float32 with eager
attention, runs prompts shorter and much longer than index_topk, and writes
one JSON file per variant with
  * logits of the last positions of every prompt,
  * per-layer top-k index sets (as transformers' indexer chose them) for a
    few positions,
  * 32-token greedy continuations through transformers' own KV cache,
  * for the longest prompt, the logits with index_topk raised above the
    sequence length (dense attention), to show that sparsity matters.

Runs on the GPU host (torch + transformers 5.17); CI only reads the output.
FP8 checkpoints: transformers 5.17's Fp8Dequantize requires weight dims to be
multiples of the 128x128 scale grid, which the real GLM-5 layout breaks
(kv_a_proj_with_mqa has 576 rows = 4.5 blocks), so this script dequantizes
the FP8 tensors itself (W = e4m3 * weight_scale_inv, per block, in fp32) and
hands transformers a plain float32 checkpoint. The forward pass is
transformers' own either way.

Usage: make_goldens.py --model DIR --variant NAME --out FILE.json
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

PROMPT_LENGTHS = [6, 32, 33, 80, 200, 350]
TOPK_POSITIONS_FROM_END = [1]  # plus len//2 and a fixed early position
GREEDY_STEPS = 32
LOGITS_LAST = 4


def dequantize_checkpoint(src, dst):
    """Copies src to dst with every F8_E4M3 weight dequantized to float32."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if not name.endswith(".safetensors"):
            if os.path.isfile(os.path.join(src, name)):
                shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    cfg_path = os.path.join(dst, "config.json")
    cfg = json.load(open(cfg_path))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    index_path = os.path.join(src, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index_path))["weight_map"].values()))
             if os.path.exists(index_path) else ["model.safetensors"])
    weight_map = {}
    for f in files:
        tensors = load_file(os.path.join(src, f))
        out = {}
        for k, v in tensors.items():
            if k.endswith("_scale_inv"):
                continue
            if v.dtype == torch.float8_e4m3fn:
                s = tensors[k + "_scale_inv"].float()
                rows, cols = v.shape
                full = s.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
                out[k] = v.float() * full
            else:
                out[k] = v
        save_file(out, os.path.join(dst, f), metadata={"format": "pt"})
        for k in out:
            weight_map[k] = f
    if os.path.exists(index_path):
        shutil.copy(index_path, os.path.join(dst, "model.safetensors.index.json"))
        idx = json.load(open(index_path))
        idx["weight_map"] = weight_map
        json.dump(idx, open(os.path.join(dst, "model.safetensors.index.json"), "w"), indent=2)


def load_model(path, index_topk=None):
    config = transformers.AutoConfig.from_pretrained(path)
    if index_topk is not None:
        config.index_topk = index_topk
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, config=config, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def prompts_for(vocab_limit, seed):
    rng = random.Random(seed)
    return [[rng.randrange(vocab_limit) for _ in range(n)] for n in PROMPT_LENGTHS]


def capture_topk(model):
    """Hooks every indexer; returns a dict layer -> last [S, k] index tensor."""
    captured = {}
    for i, layer in enumerate(model.model.layers):
        indexer = getattr(layer.self_attn, "indexer", None)
        if indexer is None:
            continue

        def hook(mod, args, output, i=i):
            captured[i] = output[0].detach().cpu()
        indexer.register_forward_hook(hook)
    return captured


@torch.no_grad()
def run_prompt(model, captured, ids):
    x = torch.tensor([ids])
    out = model(input_ids=x, use_cache=True)
    logits = out.logits[0].float()
    n = len(ids)
    record = {"ids": ids,
              "logits_positions": list(range(max(0, n - LOGITS_LAST), n)),
              "logits": [logits[p].tolist() for p in range(max(0, n - LOGITS_LAST), n)]}
    positions = sorted({n - 1, n // 2, min(n - 1, 40)})
    topk = []
    for layer, idx in sorted(captured.items()):
        for p in positions:
            sel = sorted(int(j) for j in idx[p].tolist() if 0 <= int(j) <= p)
            topk.append({"layer": layer, "position": p, "indices": sel})
    record["topk"] = topk
    # Greedy decode through transformers' KV cache (and indexer key cache).
    past = out.past_key_values
    nxt = int(torch.argmax(logits[-1]))
    greedy, gaps = [nxt], []
    top2 = torch.topk(logits[-1], 2).values
    gaps.append(float(top2[0] - top2[1]))
    for _ in range(GREEDY_STEPS - 1):
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        step = out.logits[0, -1].float()
        nxt = int(torch.argmax(step))
        top2 = torch.topk(step, 2).values
        gaps.append(float(top2[0] - top2[1]))
        greedy.append(nxt)
    record["greedy"] = greedy
    record["greedy_top2_gap_min"] = min(gaps)
    return record


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--variant", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.manual_seed(0)
    src = args.model
    cfg = json.load(open(os.path.join(src, "config.json")))
    tmp = None
    fp8 = "quantization_config" in cfg
    if fp8:
        tmp = tempfile.mkdtemp()
        dequantize_checkpoint(src, tmp)
        src = tmp
    model = load_model(src)
    captured = capture_topk(model)
    prompts = prompts_for(256 + 32, args.seed)
    records = [run_prompt(model, captured, p) for p in prompts]
    # Dense control: the longest prompt with index_topk above its length.
    dense = load_model(src, index_topk=100000)
    longest = prompts[-1]
    with torch.no_grad():
        dl = dense(input_ids=torch.tensor([longest])).logits[0].float()
    n = len(longest)
    dense_record = {"ids": longest, "logits_positions": list(range(n - LOGITS_LAST, n)),
                    "logits": [dl[p].tolist() for p in range(n - LOGITS_LAST, n)]}
    result = {
        "variant": args.variant,
        "fp8_dequantized_by_script": fp8,
        "index_topk": cfg["index_topk"],
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "architecture": type(model).__name__,
        "prompt_seed": args.seed,
        "prompts": records,
        "dense_control": dense_record,
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    moved = max(abs(a - b) for a, b in zip(records[-1]["logits"][-1], dense_record["logits"][-1]))
    print(f"{args.variant}: {len(records)} prompts, greedy gap min "
          f"{min(r['greedy_top2_gap_min'] for r in records):.2e}, sparse-vs-dense last-logit max diff {moved:.3f}")
    if tmp:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
