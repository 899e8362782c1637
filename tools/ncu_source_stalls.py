#!/usr/bin/env python3
"""Where a kernel's warps wait, from ncu's per-SASS source counters.

Reads the CSV that
  ncu --section SourceCounters --warp-sampling-interval 0 -o REP ...
  ncu --import REP.ncu-rep --page source --csv --print-source sass > SRC.csv
writes (on the GPU host; the device tool brings the CSV back) and prints,
for each opcode, its share of the warp stall samples and of the executed
instructions, then the single instructions with the most samples. An opcode
whose share of samples is far above its share of instructions is where the
warps wait: the first use of a load's registers (memory latency), an mma
(tensor pipe or its operands), a barrier. Session 25 compared the 4-bit and
8-bit streaming GEMMs this way (bench/results/gemm.md): the 8-bit kernel
waits once a round, at the first use of its weights; the 4-bit one at four
places in its compute phase.

  tools/ncu_source_stalls.py SRC.csv [--top 12]
"""
import argparse
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    """The SASS opcode without predicate and modifiers: '@!P0 LDG.E.128 R4, ...' -> 'LDG'."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv_file")
    parser.add_argument("--top", type=int, default=12, help="opcodes and instructions listed (12)")
    args = parser.parse_args()
    rows = list(csv.reader(open(args.csv_file, newline="")))
    # The first row names the kernel; the second is the header.
    header_at = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if header_at is None:
        sys.exit(f"{args.csv_file}: no 'Address' / 'Source' header: not an ncu source page CSV")
    header, data = rows[header_at], rows[header_at + 1:]
    try:
        col_addr, col_src = header.index("Address"), header.index("Source")
        col_samples = header.index("Warp Stall Sampling (All Samples)")
        col_exec = header.index("Instructions Executed")
    except ValueError as missing:
        sys.exit(f"{args.csv_file}: {missing} (profile with --section SourceCounters)")
    samples = collections.Counter()
    executed = collections.Counter()
    for r in data:
        op = opcode(r[col_src])
        if op:
            samples[op] += number(r[col_samples])
            executed[op] += number(r[col_exec])
    total_samples = sum(samples.values()) or 1.0
    total_exec = sum(executed.values()) or 1.0
    if rows[0] and rows[0][0] == "Kernel Name":
        print(rows[0][1])
    print(f"{total_samples:.0f} stall samples, {total_exec:.0f} warp instructions executed")
    print(f"{'opcode':10s} {'samples':>8s} {'executed':>9s}")
    for op, value in samples.most_common(args.top):
        print(f"{op:10s} {100 * value / total_samples:7.1f}% {100 * executed[op] / total_exec:8.1f}%")
    print("instructions with the most samples:")
    for r in sorted(data, key=lambda r: -number(r[col_samples]))[: args.top]:
        print(f"  {100 * number(r[col_samples]) / total_samples:5.1f}%  {r[col_addr]}  {r[col_src].strip()[:72]}")


if __name__ == "__main__":
    main()
