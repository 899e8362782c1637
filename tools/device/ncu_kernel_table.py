#!/usr/bin/env python3
"""Per-kernel medians of `ncu --csv --print-units base` runs, as one Markdown table.

    ncu_kernel_table.py LABEL=FILE [LABEL=FILE ...]

Each FILE holds ncu's CSV rows (other lines, such as the profiled program's
output, are skipped) with gpu__time_duration.sum and, optionally,
dram__throughput.avg.pct_of_peak_sustained_elapsed. One row per (LABEL,
kernel): launches, median and minimum duration in microseconds, median DRAM
throughput. A missing FILE is skipped (a device call cut short). Used by
tools/device/decode_kernel_ab.sh and merge_unabsorb_ncu.sh.
"""
import csv
import statistics
import sys

DURATION = "gpu__time_duration.sum"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def kernel(name):
    """The kernel's name without its parameter list, at most 70 characters."""
    return (name[: name.rfind("(")] if "(" in name else name)[-70:]


def main(args):
    print("| build | kernel | launches | median us | min us | median DRAM % of peak |")
    for arg in args:
        label, _, path = arg.partition("=")
        try:
            lines = [line for line in open(path) if line.startswith('"')]
        except OSError:
            continue
        per = {}
        for row in csv.DictReader(lines):
            value = float(row["Metric Value"].replace(",", ""))
            per.setdefault((kernel(row["Kernel Name"]), row["Metric Name"]), []).append(value)
        for (name, metric), ns in sorted(per.items()):
            if metric != DURATION:
                continue
            dram = per.get((name, DRAM), [0.0])
            print(f"| {label} | {name} | {len(ns)} | {statistics.median(ns) / 1000:.2f} | {min(ns) / 1000:.2f} | "
                  f"{statistics.median(dram):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
