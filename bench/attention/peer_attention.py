#!/usr/bin/env python3
"""PyTorch fallback for sparse MLA (what an engine without a sparse kernel does):
gather the top-k latent rows, einsum, softmax, einsum. Same shapes as
attention_bench; writes {"decode": {...}, "prefill": {...}} in microseconds
(medians of CUDA-event timings after warm-up) to the JSON path given.

  python3 bench/attention/peer_attention.py OUT.json
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_timing import median_us  # noqa: E402

TOPK = 2048
SCALE = 0.0625


def attend(q, k):
    # q [T, H, 576] bf16, k [T, K, 576] bf16 -> [T, H, 512]
    s = torch.einsum("thd,tkd->thk", q, k).float() * SCALE
    p = torch.softmax(s, dim=-1).to(torch.bfloat16)
    return torch.einsum("thk,tkd->thd", p, k[..., :512])


def gather_bf16(cache, idx):
    return cache[idx]


def gather_fp8(cache8, idx):
    # 656-byte rows: 512 e4m3 | 4 fp32 scales | 64 bf16 rope, dequantized to bf16.
    rows = cache8[idx]  # [T, K, 656] uint8
    vals = rows[..., :512].view(torch.float8_e4m3fn).to(torch.float32)
    scales = rows[..., 512:528].contiguous().view(torch.float32)  # [T, K, 4]
    nope = (vals.view(*vals.shape[:-1], 4, 128) * scales.unsqueeze(-1)).view(*vals.shape)
    rope = rows[..., 528:656].contiguous().view(torch.bfloat16)
    return torch.cat([nope.to(torch.bfloat16), rope], dim=-1)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "peer_attention.json"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = 1 << 20
    cache = torch.randn(rows, 576, device=dev, dtype=torch.bfloat16)
    cache8 = torch.randint(0, 120, (rows, 656), device=dev, dtype=torch.uint8)
    cache8[:, 512:528] = torch.full((rows, 4), 0.01, device=dev).view(torch.uint8).view(rows, 16)
    result = {"decode": {}, "prefill": {}}
    for fmt in ("bf16", "fp8"):
        for batch in (1, 16, 64, 128):
            for heads in (8, 16, 64, 128):
                idx = torch.randint(0, rows, (batch, TOPK), device=dev)
                q = torch.randn(batch, heads, 576, device=dev, dtype=torch.bfloat16)
                if fmt == "bf16":
                    fn = lambda: attend(q, gather_bf16(cache, idx))
                else:
                    fn = lambda: attend(q, gather_fp8(cache8, idx))
                us = median_us(fn, warmup=3, reps=20)
                result["decode"][f"{fmt}/{batch}/{heads}"] = us
                print(f"peer decode {fmt} batch {batch:4d} heads {heads:4d}: {us:10.1f} us", flush=True)
    # Prefill: 4096 query tokens over a 64K-token context, chunked by 512
    # tokens so the gathered keys fit in memory.
    ctx = 65536
    for heads in (64, 128):
        idx = torch.randint(0, ctx, (4096, TOPK), device=dev)
        q = torch.randn(4096, heads, 576, device=dev, dtype=torch.bfloat16)

        def fn():
            for c in range(0, 4096, 512):
                attend(q[c:c + 512], gather_bf16(cache, idx[c:c + 512]))

        us = median_us(fn, warmup=1, reps=5)
        result["prefill"][f"bf16/4096/{heads}"] = us
        print(f"peer prefill 4096 x {heads} heads: {us:10.1f} us", flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
