#!/usr/bin/env python3
"""engine_bench --op-profile tables of several runs, joined by op label.

    op_profile_join.py LABEL=LOG [LABEL=LOG ...]

Each LOG holds engine_bench's "op profile, <shape> (eager, per layer; sum X
us):" tables. Prints one Markdown table per shape: every op label with its
us/layer in each run (blank where a run has no such label: an op renamed
between builds shows on one side only), the first run's value against the
others' as a ratio, and the sums. A missing LOG is skipped (a call cut short).
Used by tools/device/step_compare.sh.
"""
import re
import sys

HEADER = re.compile(r"^op profile, (.*) \(eager, per layer; sum ([0-9.]+) us\):")
ROW = re.compile(r"^\| (.+?) \| ([0-9.]+) \| ([0-9.]+) \| [0-9]+% \|$")


def read(path):
    """{shape: {op: us}} and {shape: sum} of one log."""
    tables, sums, shape = {}, {}, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = HEADER.match(line)
            if m:
                shape = m.group(1)
                tables[shape] = {}
                sums[shape] = float(m.group(2))
                continue
            m = ROW.match(line)
            if m and shape is not None:
                tables[shape][m.group(1)] = float(m.group(3))
            elif not line.startswith("|"):
                shape = None
    return tables, sums


def main(args):
    runs = []
    for arg in args:
        label, _, path = arg.partition("=")
        try:
            runs.append((label, *read(path)))
        except OSError:
            print(f"({label}: {path} missing)")
    if not runs:
        return 1
    shapes = []
    for _, tables, _ in runs:
        shapes += [s for s in tables if s not in shapes]
    labels = [r[0] for r in runs]
    for shape in shapes:
        ops = {}
        for _, tables, _ in runs:
            for op, us in tables.get(shape, {}).items():
                ops[op] = max(ops.get(op, 0.0), us)
        print(f"\n{shape}, eager us/layer")
        print("| op | " + " | ".join(labels) + f" | {labels[0]} / others |")
        print("|---|" + "---|" * (len(labels) + 1))
        for op in sorted(ops, key=lambda o: -ops[o]):
            vals = [tables.get(shape, {}).get(op) for _, tables, _ in runs]
            cells = ["" if v is None else f"{v:.1f}" for v in vals]
            ratios = [f"{vals[0] / v:.2f}" for v in vals[1:] if v and vals[0] is not None]
            print(f"| {op} | " + " | ".join(cells) + " | " + " ".join(ratios) + " |")
        totals = [sums.get(shape) for _, _, sums in runs]
        print("| **sum** | " + " | ".join("" if t is None else f"{t:.1f}" for t in totals) + " | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
