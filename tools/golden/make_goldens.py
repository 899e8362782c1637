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
hands transformers a plain float32 checkpoint. The 4-bit checkpoints
(make-tiny --quant awq|gptq|int4-ct|nvfp4) are dequantized the same way,
from their documented layouts (docs/weight_formats.md): transformers'
quantizers need their kernels and a GPU, and the goldens are of the
dequantized weights by design. The forward pass is transformers' own either
way.

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


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble i of an AWQ word holds column 8c + AWQ_ORDER[i]


def nibbles(words):
    """int32 [..., W] -> uint8 [..., W, 8]: nibble i = bits 4i..4i+3."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    return ((words[..., None] >> shifts) & 0xF).to(torch.int64)


def dequant_awq(t, m):
    q = nibbles(t[m + ".qweight"])                       # [K, N/8, 8]
    z = nibbles(t[m + ".qzeros"])                        # [G, N/8, 8]
    inv = [AWQ_ORDER.index(j) for j in range(8)]         # column j of a word is nibble inv[j]
    q = q[..., inv].reshape(q.shape[0], -1)              # [K, N]
    z = z[..., inv].reshape(z.shape[0], -1)              # [G, N]
    s = t[m + ".scales"].float()                          # [G, N]
    g = q.shape[0] // s.shape[0]
    w = (q.float() - z.float().repeat_interleave(g, 0)) * s.repeat_interleave(g, 0)
    return w.t().contiguous()                             # [N, K]


def dequant_gptq(t, m, v1):
    q = nibbles(t[m + ".qweight"])                       # [K/8, N, 8]: nibble i = row 8r + i
    q = q.permute(0, 2, 1).reshape(-1, q.shape[1])        # [K, N]
    z = nibbles(t[m + ".qzeros"])                        # [G, N/8, 8]: nibble i = column 8c + i
    z = z.reshape(z.shape[0], -1) + (1 if v1 else 0)      # [G, N]
    s = t[m + ".scales"].float()
    g = q.shape[0] // s.shape[0]
    if m + ".g_idx" in t:
        assert torch.equal(t[m + ".g_idx"].long(), torch.arange(q.shape[0]) // g), m + ": act-order g_idx"
    w = (q.float() - z.float().repeat_interleave(g, 0)) * s.repeat_interleave(g, 0)
    return w.t().contiguous()


def dequant_pack_quantized(t, m):
    n, k = [int(v) for v in t[m + ".weight_shape"].tolist()]
    q = nibbles(t[m + ".weight_packed"]).reshape(n, -1)[:, :k] - 8   # signed codes [N, K]
    s = t[m + ".weight_scale"].float()                                 # [N, G]
    g = k // s.shape[1]
    if m + ".weight_zero_point" in t:
        zp = nibbles(t[m + ".weight_zero_point"])                      # [N/8, G, 8]: nibble i = row 8r + i
        zp = zp.permute(0, 2, 1).reshape(-1, zp.shape[1])[:n] - 8      # [N, G]
    else:
        zp = torch.zeros_like(s, dtype=torch.int64)
    return (q.float() - zp.float().repeat_interleave(g, 1)) * s.repeat_interleave(g, 1)


def dequant_nvfp4(t, m):
    packed = t[m + ".weight"].to(torch.int64)                          # [N, K/2]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1)  # even column low
    vals = torch.tensor(E2M1)[codes]
    scale = t[m + ".weight_scale"].float().repeat_interleave(16, 1)     # e4m3 per 16 columns
    return vals * scale * t[m + ".weight_scale_2"].float()


def dequantize_checkpoint(src, dst):
    """Copies src to dst with every quantized weight as float32: block-FP8
    (W = e4m3 * weight_scale_inv per 128x128 block) and the 4-bit layouts
    (AWQ, GPTQ, compressed-tensors pack-quantized, NVFP4), each read here
    from its documented layout (docs/weight_formats.md), independently of
    spar's C++ readers."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if not name.endswith(".safetensors") and name != "hf_quant_config.json":
            if os.path.isfile(os.path.join(src, name)):
                shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    cfg_path = os.path.join(dst, "config.json")
    cfg = json.load(open(cfg_path))
    q = cfg.pop("quantization_config", None) or {}
    method = q.get("quant_method", "modelopt" if os.path.exists(os.path.join(src, "hf_quant_config.json")) else "")
    gptq_v1 = method == "gptq" and q.get("checkpoint_format", "gptq") == "gptq"
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    index_path = os.path.join(src, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index_path))["weight_map"].values()))
             if os.path.exists(index_path) else ["model.safetensors"])
    aux = (".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_zero_point", ".weight_shape",
           ".weight_scale_2", ".input_scale", "_scale_inv")
    weight_map = {}
    for f in files:
        tensors = load_file(os.path.join(src, f))
        out = {}
        for k, v in tensors.items():
            if k.endswith(aux):
                continue
            if k.endswith(".qweight"):
                m = k[:-len(".qweight")]
                out[m + ".weight"] = dequant_awq(tensors, m) if method == "awq" else dequant_gptq(tensors, m, gptq_v1)
            elif k.endswith(".weight_packed"):
                m = k[:-len(".weight_packed")]
                out[m + ".weight"] = dequant_pack_quantized(tensors, m)
            elif v.dtype == torch.uint8 and k.endswith(".weight"):
                out[k] = dequant_nvfp4(tensors, k[:-len(".weight")])
            elif v.dtype == torch.float8_e4m3fn:
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
        idx = json.load(open(index_path))
        idx["weight_map"] = weight_map
        json.dump(idx, open(os.path.join(dst, "model.safetensors.index.json"), "w"), indent=2)
    return method or "fp8"


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
    quantized = "quantization_config" in cfg or os.path.exists(os.path.join(src, "hf_quant_config.json"))
    fp8 = quantized and cfg.get("quantization_config", {}).get("quant_method") == "fp8"
    dequantized = None
    if quantized:
        tmp = tempfile.mkdtemp()
        dequantized = dequantize_checkpoint(src, tmp)
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
        "dequantized_by_script": dequantized,
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
