#!/usr/bin/env python3
"""PyTorch peers of bench/gemm/gemm_bench, measured on the same GPU in the same call.

For every GLM-5 projection shape and M in {1, 16, 64, 256, 2048}:
  fallback  dequantise the block-FP8 weight to bf16 (e4m3 -> fp32, x scale per
            128x128 block, -> bf16), then torch.matmul: what an engine without
            a W8A16 kernel does on sm80 (the dequantisation runs every call).
  cublas    torch.matmul with bf16 weights (cuBLAS; on the H200 it uses
            Hopper-only instructions, which an A100 does not have).
Timing as gemm_bench: the calls of a batch captured once in a CUDA graph and
replayed ("us"; GPU time without Python/launch overhead, as gemm_bench's
main column), and the same calls issued one by one ("us_stream"); CUDA
events, weights rotated over enough copies to exceed L2, median over batches.

Example: python3 bench/gemm/peer_gemm.py --csv /tmp/peer.csv
"""
import argparse
import csv
import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_timing import graph_median_us, median_us  # noqa: E402

SHAPES = [  # name, N, K (fused_a: 2048 + 576 + 128 e4m3 rows and 32 bf16 rows, run here as one matrix)
    ("mlp_gate_up", 12288, 6144),
    ("mlp_down", 6144, 12288),
    ("q_b", 16384, 2048),
    ("kv_b", 28672, 512),
    ("o_proj", 6144, 16384),
    ("exp_gate_up", 4096, 6144),
    ("exp_down", 6144, 2048),
    ("fused_a", 2784, 6144),
]
MS = [1, 16, 64, 256, 2048]
L2_DEFEAT_BYTES = 320 << 20


def dequantize(w8, scale, n, k):
    s = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    return (w8.to(torch.float32) * s).to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ms", default="", help="comma list of M (default 1,16,64,256,2048)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    ms = [1, 64] if args.quick else MS
    if args.ms:
        ms = [int(v) for v in args.ms.split(",")]
    rows = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    for name, n, k in SHAPES:
        nscale = ((n + 127) // 128, (k + 127) // 128)
        fp8_bytes = n * k + nscale[0] * nscale[1] * 4
        bf16_bytes = n * k * 2
        c8 = max(2, L2_DEFEAT_BYTES // fp8_bytes + 1)
        c16 = max(2, L2_DEFEAT_BYTES // bf16_bytes + 1)
        w8 = [(torch.randn(n, k, device=dev) * 64).clamp(-448, 448).to(torch.float8_e4m3fn) for _ in range(c8)]
        sc = [torch.rand(nscale, device=dev) * 2e-3 + 1e-3 for _ in range(c8)]
        w16 = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.05 for _ in range(c16)]
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            # Correctness of the fallback path itself (vs fp32 math on the same values).
            ref = x.float() @ (w8[0].float() * sc[0].repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]).t()
            got = (x @ dequantize(w8[0], sc[0], n, k).t()).float()
            err = ((got - ref).abs().max() / ref.abs().max()).item()

            # Each call reads the next weight copy, so back-to-back calls and a
            # graph's calls stream their weights from memory, not from L2.
            copy8, copy16 = itertools.count(), itertools.count()

            def fallback():
                j = next(copy8) % c8
                torch.matmul(x, dequantize(w8[j], sc[j], n, k).t())

            def cublas():
                torch.matmul(x, w16[next(copy16) % c16].t())

            us_fb_stream = median_us(fallback, warmup=2, reps=5, per_rep=max(c8, 10))
            us_cb_stream = median_us(cublas, per_rep=max(c16, 20))
            us_fb = graph_median_us(fallback, per_graph=max(c8, 10), warmup=2, reps=5)
            us_cb = graph_median_us(cublas, per_graph=max(c16, 20))
            flops = 2.0 * m * n * k
            for impl, us, us_s, wb in (("fallback", us_fb, us_fb_stream, fp8_bytes),
                                       ("cublas_bf16", us_cb, us_cb_stream, bf16_bytes)):
                rows.append(dict(name=name, m=m, n=n, k=k, impl=impl, us=us, tflops=flops / us * 1e-6,
                                 gbs=wb / us * 1e-3, max_err=err if impl == "fallback" else 0.0, us_stream=us_s))
                print(f"{name:12s} M={m:<5d} {impl:12s} {us:10.2f} us {flops / us * 1e-6:7.1f} TFLOP/s "
                      f"{wb / us * 1e-3:7.0f} GB/s  (stream {us_s:.2f} us)", flush=True)
        del w8, sc, w16
        torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            wr.writeheader()
            wr.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
