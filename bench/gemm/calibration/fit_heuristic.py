#!/usr/bin/env python3
"""Fits the W8A16 GEMM tile heuristic's model constants to a benchmark sweep.

The sweep is the `sweepall` lines of `gemm_bench --sweep` (every forced
configuration and split per shape and M, median µs). The model below mirrors
ChooseGemmPlan in kernels/cuda/gemm/gemm_config.cc; the fit (coordinate
descent, pure Python) minimises the mean log "regret" of the plan the model
picks against the fastest measured plan, plus a small term for the model's
absolute error. Copy the printed constants into gemm_config.h (kTileConfigs
efficiencies, kFlopPerByte, kInflightBytesForPeak, kWaveFill, kLaunch,
kActivationWeight, kSplitBytesPerElement) and check with
tests/kernels/gemm/gemm_config_test.cc.

Several sweeps may be given; a later file's (shape, M) cases replace an
earlier one's (the decode sweep of 2026-12-02 re-measured M = 1 and 16 with
the new decode tiles; the 2026-11-30 one has the larger M).

Example: python3 bench/gemm/calibration/fit_heuristic.py bench/gemm/calibration/h200_sweep_2026-11-30_graph.txt \
    bench/gemm/calibration/h200_sweep_2026-12-02_decode.txt
"""
import copy
import math
import os
import re
import sys

SHAPES = {  # name: (K, [(rows, weight bytes)])
    "mlp_gate_up": (6144, [(12288, 1)]), "mlp_down": (12288, [(6144, 1)]), "q_b": (2048, [(16384, 1)]),
    "kv_b": (512, [(28672, 1)]), "o_proj": (16384, [(6144, 1)]), "exp_gate_up": (6144, [(4096, 1)]),
    "exp_down": (2048, [(6144, 1)]), "fused_a": (6144, [(2048, 1), (576, 1), (128, 1), (32, 2)]),
}
HERE = os.path.dirname(os.path.abspath(__file__))
GEMM_DIR = os.path.join(HERE, "..", "..", "..", "kernels", "cuda", "gemm")


def tile_table_rows():
    """kTileConfigs' rows of gemm_config.h: name, the six shape fields, mma and DRAM efficiency."""
    header = open(os.path.join(GEMM_DIR, "gemm_config.h")).read()
    row = re.compile(r'\{TileConfigId::k\w+, "(\w+)", (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), '
                     r'([\d.]+), ([\d.]+)')
    for m in row.finditer(header):
        yield m.group(1), tuple(int(m.group(i)) for i in range(2, 8)), float(m.group(9)), float(m.group(10))


def tile_shape(bt, br, wr, wt, st, sub):
    """Tokens, rows, threads, stages, sub and shared memory, as gemm_config.cc works them out."""
    stage = (br * 64 + bt * 128) * sub
    return dict(bt=bt, br=br, thr=32 * wr * wt, st=st, sub=sub,
                smem=max(st * stage, bt * (br + 4) * 4) + st * sub * 8 + 16)


TILE_ROWS = list(tile_table_rows())  # read once: the shapes below, the efficiencies in read_tables
CFG = {name: tile_shape(*fields) for name, fields, _, _ in TILE_ROWS}


def read_tables():
    """The starting point is what the runtime uses now: kTileConfigs' efficiencies
    in gemm_config.h and the model constants of gemm_config.cc, read from the
    sources so the two cannot drift apart."""
    mma = {name: m for name, _, m, _ in TILE_ROWS}
    dram = {name: d for name, _, _, d in TILE_ROWS}
    source = open(os.path.join(GEMM_DIR, "gemm_config.cc")).read()

    def const(name):
        expr = re.search(r"constexpr double %s = ([^;]+);" % name, source).group(1)
        return float(eval(expr, {}))  # e.g. "4.0 * 1.281"
    return dict(need=const("kInflightBytesForPeak"), xw=const("kActivationWeight"), F=const("kFlopPerByte"),
                split=const("kSplitBytesPerElement") / 4.0, fill=const("kWaveFill"), launch=const("kLaunch"),
                dram=dram, mma=mma)


SMS, SMEM_PER_SM = 132, 164 * 1024
BYTES_PER_US_PER_SM = 4233e3 / SMS  # copy roofline share of one SM


def cdiv(a, b):
    return (a + b - 1) // b


def cost(P, name, m, cfg, s):
    k, segs = SHAPES[name]
    c = CFG[cfg]
    rb = 64 * c["sub"]
    if any(k * wb % rb for _, wb in segs):
        return None
    ks = cdiv(max(k * wb // rb for _, wb in segs), s)
    tiles = cdiv(m, c["bt"]) * sum(cdiv(n, c["br"]) for n, _ in segs)
    per_sm = cdiv(tiles * s, SMS)
    res = max(1, min(SMEM_PER_SM // c["smem"], 2048 // c["thr"], 32))
    bw = min(1, min(per_sm, res) * (c["st"] - 1) * c["br"] * rb / P["need"]) * P["dram"][cfg]
    t_mem = (c["br"] * rb * ks + P["xw"] * c["bt"] * 2 * rb * ks) / bw
    t_cmp = 2 * c["bt"] * c["br"] * k / s / (P["F"] * P["mma"][cfg])
    t_split = P["split"] * min(m, c["bt"]) * c["br"] * 4 if s > 1 else 0
    return per_sm * (max(t_mem, t_cmp) + t_split) + cdiv(per_sm, res) * P["fill"] + P["launch"]


def load(paths):
    cases = {}
    for path in paths:
        cases.update(load_one(path))
    return cases


def load_one(path):
    cases = {}
    for line in open(path):
        f = line.split()
        if len(f) < 3 or f[0] != "sweepall" or f[1] not in SHAPES:
            continue
        for item in f[3:]:
            plan, us = item.split(":")
            cfg, s = plan.split("/s")
            if cfg not in CFG:  # e.g. the stream kernel's S* plans in the run-3 sweep
                continue
            cases.setdefault((f[1], int(f[2][2:])), []).append((cfg, int(s), float(us)))
    return cases


def evaluate(P, cases, verbose=False):
    regrets, sq = [], []
    for (name, m), lst in sorted(cases.items()):
        best = min(us for _, _, us in lst)
        preds = [(cost(P, name, m, cfg, s), cfg, s, us) for cfg, s, us in lst if cost(P, name, m, cfg, s) is not None]
        sq += [(math.log(c / BYTES_PER_US_PER_SM) - math.log(us)) ** 2 for c, _, _, us in preds]
        _, cfg, s, us = min(preds)
        regrets.append(math.log(us / best))
        if verbose:
            print(f"{name:12s} M={m:<5d} pick {cfg:7s} s{s:<2d} {us:9.2f} µs  best {best:9.2f}  {us / best:.2f}x")
    return sum(regrets) / len(regrets), sum(sq) / len(sq), max(math.exp(r) for r in regrets)


def main():
    P = read_tables()
    cases = load(sys.argv[1:])
    keys = [(k, kk) for k, v in P.items() if isinstance(v, dict) for kk in v] + \
           [(k, None) for k, v in P.items() if not isinstance(v, dict)]
    only = os.environ.get("FIT_ONLY")  # e.g. "T64R4F,T64R4W2F": fit these, hold the rest
    if only:
        names = set(only.split(","))
        keys = [key for key in keys if (key[1] or key[0]) in names]

    def obj(Q):
        r, s, _ = evaluate(Q, cases)
        return r + 0.02 * s

    best = obj(P)
    r0, _, mx0 = evaluate(P, cases)
    print(f"start: mean regret {math.exp(r0):.3f}x, worst {mx0:.2f}x")
    for _ in range(int(os.environ.get("FIT_ROUNDS", "60"))):
        improved = False
        for key in keys:
            for f in (0.5, 0.7, 0.85, 0.95, 1.05, 1.18, 1.4, 2.0):
                Q = copy.deepcopy(P)
                v = Q[key[0]][key[1]] if key[1] is not None else Q[key[0]]
                nv = v * f
                if key[0] in ("dram", "mma"):
                    nv = min(nv, 1.0)
                if key[1] is not None:
                    Q[key[0]][key[1]] = nv
                else:
                    Q[key[0]] = nv
                o = obj(Q)
                if o < best - 1e-6:
                    best, P, improved = o, Q, True
        if not improved:
            break
    print(P)
    r, s, mx = evaluate(P, cases, verbose=True)
    print(f"mean regret {math.exp(r):.3f}x, worst {mx:.2f}x, rms log error {math.sqrt(s):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
