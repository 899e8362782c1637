#!/usr/bin/env python3
"""GLM-5-FP8 on two nodes of 8 A100-80GB (TP/EP 8 per node, 2 pipeline stages):
expected decode speed from the per-layer times spar measured on H200s.

Not a measurement. It scales measured per-layer step times by the bytes a rank
reads per layer (engine_bench's roofline definition: replicated weights, 1/tp
of the split ones, the routed experts a batch hits under uniform routing, per
sequence the top-k latent rows and the whole indexer key cache) and by the
memory bandwidth ratio. Inputs are printed with the result; the capacity side
comes from `spar plan` (services/common/capacity_plan.h), which matched a
loaded stage on an H200 to 0.04 %.

usage: python3 bench/full_node/extrapolate_a100.py [--context 8192]
"""
import argparse

# GLM-5 geometry (dsa-spec.md 1.1); block-FP8 projections, bf16 router and weights_proj.
H, HEADS, Q_LORA, KV_LORA, ROPE, NOPE, V = 6144, 64, 2048, 512, 64, 192, 256
IDX_HEADS, IDX_DIM, TOPK = 32, 128, 2048
EXPERTS, TOP_K, MOE_INTER = 256, 8, 2048
LAYERS, DENSE_LAYERS = 78, 3
LATENT_ROW, INDEXER_ROW = 1152, 132  # bf16 latent, fp8 indexer key (+ scale), bytes per token

# Measured (bench/results/engine.md, session 4; H200 running spar's sm80 code, 8K context, graphs).
H200_COPY_GBS = 4181.0
MEASURED = {  # (tp, batch): (per-layer ms, fraction of roofline)
    (4, 1): (0.285, 0.13),
    (4, 64): (1.047, 0.54),
    (2, 64): (1.690, 0.64),
}
# A100-80GB SXM: 2039 GB/s HBM peak (perf-notes.md 2.1); copy assumed at the
# H200's measured fraction of its 4800 GB/s peak.
A100_COPY_GBS = 2039.0 * H200_COPY_GBS / 4800.0
CLOCK_RATIO = 1.98 / 1.41  # H200 vs A100 boost clock: latency-bound kernels slow down by up to this
HOP_MS = 0.3  # one stage-to-stage hop of a micro-batch's hidden states (12 KB per token): assumed, not measured


def fp8(rows, cols):
    return rows * cols + -(-rows // 128) * -(-cols // 128) * 4


def layer_bytes(tp, batch, context, moe=True):
    replicated = fp8(Q_LORA, H) + fp8(KV_LORA + ROPE, H) + fp8(IDX_DIM, H) + IDX_HEADS * H * 2
    replicated += fp8(IDX_HEADS * IDX_DIM, Q_LORA) + (EXPERTS * H * 2 if moe else 0)
    split = fp8(HEADS * (NOPE + ROPE), Q_LORA) + fp8(HEADS * (NOPE + V), KV_LORA) + fp8(H, HEADS * V)
    one_expert = 3 * fp8(MOE_INTER, H)
    if moe:
        split += one_expert  # the shared expert, column-split
        distinct = EXPERTS * (1 - (1 - TOP_K / EXPERTS) ** batch)
        experts = distinct / tp * one_expert
    else:
        split += 3 * fp8(12288, H)
        experts = 0
    cache = batch * (min(context + 1, TOPK) * LATENT_ROW + (context + 1) * INDEXER_ROW)
    return replicated + split / tp + experts + cache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--cache-tokens", type=int, default=425984,
                    help="KV cache tokens of the pipeline (spar plan --geometry glm5-full --tp 8 --stages 2)")
    a = ap.parse_args()
    ctx = a.context
    print(f"inputs: H200 copy {H200_COPY_GBS:.0f} GB/s measured; A100-80GB copy {A100_COPY_GBS:.0f} GB/s assumed "
          f"(same fraction of peak); clock ratio {CLOCK_RATIO:.2f}; hop {HOP_MS} ms assumed; context {ctx}")
    # Check the byte model against the measured rooflines it must reproduce.
    for (tp, b), (ms, frac) in sorted(MEASURED.items()):
        roof = layer_bytes(tp, b, 8192) / (H200_COPY_GBS * 1e6)
        print(f"  H200 TP {tp} batch {b}: measured {ms} ms/layer at {frac:.0%} of roofline; "
              f"this model's roofline {roof:.3f} ms -> {roof / ms:.0%}")
    seqs = a.cache_tokens // (-(-ctx // 64) * 64)
    print(f"\nA100 TP 8 x 2 stages, {a.cache_tokens} cache tokens -> {seqs} sequences of {ctx} tokens at once\n")
    print("| batch per micro-batch | bytes/rank/layer MB | A100 roofline ms/layer | expected ms/layer | "
          "per-token latency ms (78 layers + 2 hops) | tokens/s per sequence | tokens/s, 2 micro-batches in flight |")
    print("|---|---|---|---|---|---|---|")
    for batch in sorted({1, 8, max(1, seqs // 2)}):
        moe_b, dense_b = layer_bytes(8, batch, ctx), layer_bytes(8, batch, ctx, moe=False)
        roof = moe_b / (A100_COPY_GBS * 1e6)
        roof_dense = dense_b / (A100_COPY_GBS * 1e6)
        if batch == 1:
            # Latency-bound at 13 % of roofline: the measured H200 TP 4 step, up to clock-scaled.
            lo, hi = MEASURED[(4, 1)][0], MEASURED[(4, 1)][0] * CLOCK_RATIO
            lo_d, hi_d = lo, hi  # a dense layer runs the same chain of small kernels
        else:
            eff_hi, eff_lo = 0.54, 0.40  # TP 4's measured fraction; a lower one as TP 8 halves per-rank work
            lo, hi = roof / eff_hi, roof / eff_lo
            lo_d, hi_d = roof_dense / eff_hi, roof_dense / eff_lo
        step_lo = (LAYERS - DENSE_LAYERS) * lo + DENSE_LAYERS * lo_d + 2 * HOP_MS
        step_hi = (LAYERS - DENSE_LAYERS) * hi + DENSE_LAYERS * hi_d + 2 * HOP_MS
        print(f"| {batch} | {moe_b / 1e6:.0f} | {roof:.3f} | {lo:.3f}-{hi:.3f} | {step_lo:.1f}-{step_hi:.1f} | "
              f"{1000 / step_hi:.0f}-{1000 / step_lo:.0f} | {2 * batch * 1000 / step_hi:.0f}-{2 * batch * 1000 / step_lo:.0f} |")


if __name__ == "__main__":
    main()
