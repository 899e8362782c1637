#!/usr/bin/env python3
"""PyTorch fallback for the lightning indexer, timed on the same GPU as indexer_bench.

What an engine without sm80 indexer kernels would run (the shape of vLLM's reverted
torch fallback, PR #35271, with the block-major FP8 page layout read correctly):
  decode:  gather pages -> dequantize e4m3 * scale -> einsum over heads -> relu -> weighted
           sum -> mask
  prefill: dequantize -> einsum('mhd,nd->hmn') -> relu -> weighted sum over heads -> causal mask
           (query chunks of 2048 rows to bound memory)
  top-k:   torch.topk(logits, 2048)
Medians of CUDA-event timed runs after warm-up. Same shapes as indexer_bench.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_timing import graph_median_us, median_us  # noqa: E402

PAGE = 64
PAGE_BYTES = PAGE * 132


def random_fp8_pages(num_pages, gen):
    pages = torch.randint(0, 256, (num_pages, PAGE_BYTES), dtype=torch.uint8, device="cuda", generator=gen)
    codes = pages[:, : PAGE * 128]
    codes[(codes & 0x7F) == 0x7F] ^= 1  # no NaN codes
    scales = (torch.rand(num_pages, PAGE, device="cuda", generator=gen) * 1e-3 + 1e-3).contiguous()
    pages[:, PAGE * 128 :] = scales.view(torch.uint8).view(num_pages, PAGE * 4)
    return pages


def decode_logits(q, w, pages, table, ctx_lens, ctx):
    b, h, d = q.shape
    blk = pages[table]  # [B, NP, 8448]
    np_ = table.shape[1]
    vals = blk[..., : PAGE * 128].reshape(b, np_ * PAGE, d).view(torch.float8_e4m3fn).to(torch.bfloat16)
    scales = blk[..., PAGE * 128 :].contiguous().view(torch.float32).reshape(b, np_ * PAGE)
    scores = torch.einsum("bhd,bsd->bhs", q, vals).float()
    logits = (scores.relu() * w[..., None]).sum(1) * scales
    logits = logits[:, :ctx]
    mask = torch.arange(ctx, device="cuda")[None, :] >= ctx_lens[:, None]
    return logits.masked_fill(mask, float("-inf"))


def prefill_logits(q, w, k_codes, k_scale, ks, ke):
    m, h, d = q.shape
    n = k_codes.shape[0]
    k = k_codes.view(torch.float8_e4m3fn).to(torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float32)
    pos = torch.arange(n, device="cuda")[None, :]
    for c0 in range(0, m, 2048):
        c1 = min(m, c0 + 2048)
        score = torch.einsum("mhd,nd->hmn", q[c0:c1], k).float()
        logits = (score.relu() * w[c0:c1].t()[..., None]).sum(0) * k_scale[None, :]
        mask = (pos < ks[c0:c1, None]) | (pos >= ke[c0:c1, None])
        out[c0:c1] = logits.masked_fill(mask, float("-inf"))
    return out


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    summary = []

    if only in ("", "decode"):
        print("\n== torch fallback: paged decode logits (FP8 cache) ==")
        for batch, ctx, heads in [(1, 4096, 32), (1, 32768, 32), (1, 131072, 32), (32, 4096, 32), (32, 32768, 32),
                                  (32, 131072, 32), (64, 4096, 32), (64, 32768, 32), (64, 131072, 32),
                                  (64, 32768, 64), (64, 131072, 64)]:
            np_ = ctx // PAGE
            pages = random_fp8_pages(batch * np_, gen)
            table = torch.randperm(batch * np_, device="cuda", generator=gen).view(batch, np_)
            q = (torch.rand(batch, heads, 128, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
            w = torch.rand(batch, heads, device="cuda", generator=gen) * 0.07 - 0.02
            ctx_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
            us = median_us(lambda: decode_logits(q, w, pages, table, ctx_lens, ctx), warmup=2)
            print(f"B{batch} ctx{ctx} H{heads} n1: {us:10.1f} us")
            if batch == 64 and ctx == 131072 and heads == 32:
                summary.append(f"torch decode B64 ctx131072 H32 n1: {us:.1f} us")
            del pages, table
            torch.cuda.empty_cache()

    if only in ("", "prefill"):
        print("\n== torch fallback: prefill logits (FP8 keys, causal) ==")
        for queries, keys, heads in [(2048, 2048, 32), (4096, 8192, 32), (16384, 16384, 32), (2048, 2048, 64),
                                     (4096, 8192, 64)]:
            k_codes = torch.randint(0, 256, (keys, 128), dtype=torch.uint8, device="cuda", generator=gen)
            k_codes[(k_codes & 0x7F) == 0x7F] ^= 1
            k_scale = torch.rand(keys, device="cuda", generator=gen) * 1e-3 + 1e-3
            q = (torch.rand(queries, heads, 128, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
            w = torch.rand(queries, heads, device="cuda", generator=gen) * 0.07 - 0.02
            ks = torch.zeros(queries, dtype=torch.int64, device="cuda")
            ke = torch.arange(queries, device="cuda") + (keys - queries + 1)
            pairs = float(ke.sum().item())
            us = median_us(lambda: prefill_logits(q, w, k_codes, k_scale, ks, ke), warmup=1, reps=3)
            tf = pairs * heads * 256 / (us * 1e-6) / 1e12
            print(f"{queries}x{keys} H{heads}: {us:10.1f} us  {tf:6.1f} TFLOP/s (non-masked)")
            if queries == 4096:
                summary.append(f"torch prefill {queries}x{keys} H{heads}: {us:.1f} us {tf:.1f} TFLOP/s")
            torch.cuda.empty_cache()

    if only in ("", "topk"):
        print("\n== torch.topk 2048 ==")
        for rows, length in [(64, 131072), (1, 32768), (1, 131072), (64, 32768), (1, 200000), (128, 131072),
                             (8, 131072), (32, 32768), (256, 32768)]:
            x = torch.randn(rows, length, device="cuda", generator=gen)
            us = median_us(lambda: torch.topk(x, 2048, dim=-1), warmup=3, reps=20)
            gus = graph_median_us(lambda: torch.topk(x, 2048, dim=-1))
            print(f"{rows} x {length}: {us:10.1f} us  (graph replay {gus:8.1f} us)")
            if (rows, length) in ((64, 131072), (1, 32768)):
                summary.append(f"torch.topk {rows}x{length}: {us:.1f} us, graph replay {gus:.1f} us")

    print("\n== torch summary ==")
    for s in summary:
        print(s)


if __name__ == "__main__":
    main()
