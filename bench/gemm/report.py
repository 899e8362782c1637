#!/usr/bin/env python3
"""Joins gemm_bench's CSV with peer_gemm.py's CSV into one markdown table with
the issue's targets (no torch needed). Times are CUDA-graph replays on both
sides (GPU time); "enqueued" is ours launched one by one from the host.

Example: python3 bench/gemm/report.py ours.csv peer.csv > table.md
"""
import csv
import sys


def read_ours(path):
    # The plan column may itself hold commas (grouped MoE: "gate_up,down").
    lines = open(path).read().splitlines()
    head = lines[0].split(",")
    rows = []
    for line in lines[1:]:
        f = line.split(",")
        n_tail = len(head) - 5
        plan = ";".join(f[4:len(f) - n_tail])
        rows.append(dict(zip(head, f[:4] + [plan] + f[len(f) - n_tail:])))
    return rows


def main():
    ours = read_ours(sys.argv[1])
    peers = {}
    if len(sys.argv) > 2:
        for r in csv.DictReader(open(sys.argv[2])):
            peers[(r["name"], int(r["m"]), r["impl"])] = float(r["us"])
    copy = float(ours[0]["copy_gbs"]) if ours else 0.0
    print(f"copy roofline {copy:.0f} GB/s (read+write); H200 running sm80 code\n")
    print("| shape | M | plan | µs | enqueued µs | TFLOP/s | GB/s | % roof | max err | cuBLAS bf16 µs | vs cuBLAS | "
          "fallback µs | vs fallback | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    misses = 0
    for r in ours:
        name, m, us, roof = r["name"], int(r["m"]), float(r["us"]), float(r["roof_pct"])
        cb = peers.get((name, m, "cublas_bf16"))
        fb = peers.get((name, m, "fallback"))
        target = ""
        ok = True
        if name == "moe_gemms" and m == 64:
            ok = roof >= 60.0
            target = f">=60% roof: {'ok' if ok else 'MISS'}"
        elif name.startswith("moe"):
            target = "-"
        elif m <= 16:
            ok = roof >= 80.0 and (fb is None or fb / us >= 20.0)
            target = f">=80% roof, >=20x fallback: {'ok' if ok else 'MISS'}"
        elif m == 64:
            ok = roof >= 65.0
            target = f">=65% roof: {'ok' if ok else 'MISS'}"
        elif m >= 1024 and cb is not None:
            ok = us <= 1.6 * cb
            target = f"<=1.6x cuBLAS: {'ok' if ok else 'MISS'}"
        else:
            target = "-"
        misses += 0 if ok else 1
        cbs = f"{cb:.2f}" if cb else "-"
        fbs = f"{fb:.2f}" if fb else "-"
        vcb = f"{cb / us:.2f}x" if cb else "-"
        vfb = f"{fb / us:.1f}x" if fb else "-"
        enq = f"{float(r['us_stream']):.2f}" if r.get("us_stream") else "-"
        print(f"| {name} | {m} | {r['plan']} | {us:.2f} | {enq} | {float(r['tflops']):.1f} | {float(r['gbs']):.0f} | "
              f"{roof:.1f} | {float(r['max_err']):.1e} | {cbs} | {vcb} | {fbs} | {vfb} | {target} |")
    print(f"\ntargets missed: {misses}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
