#!/usr/bin/env python3
"""Global loads and the first uses of their results, in SASS order.

Reads the SASS that tools/sass_local.sh prints and writes, per function, one
line of letters in instruction order: L a global load (LDG), u the first
instruction that reads a loaded register, | a barrier or exit. A kernel
whose loads are all in flight before it waits reads "LLLL...uuuu"; one that
waits for memory once per load reads "LuLuLu": each "uL" is another round
trip (~0.5 us on an H200) in a row. The decode step's small kernels were
audited this way (2026-12-04): the MoE combine read "LuuuuLuuuu..." for its
ten rows, RMSNorm four chunks in a row behind the residual's store.

Static order only: a loop body is read once, and the letters do not say
which load a use waits for (the SASS around it does).

  tools/sass_local.sh kernels/cuda/gemm/moe_kernels.cu MoeCombine | tools/sass_load_chains.py
"""
import re
import sys

INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*);")


def registers(dest, op):
    """The registers a load writes: Rn, and Rn+1.. for 64- and 128-bit loads."""
    m = re.match(r"R(\d+)", dest)
    if not m:
        return []
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    return [f"R{int(m.group(1)) + i}" for i in range(width)]


def trace(lines):
    """(function name, letters) for each function of the listing."""
    name, letters, pending = None, [], set()
    for line in lines:
        if line.startswith(".text."):
            if name is not None:
                yield name, "".join(letters)
            name, letters, pending = line[len(".text."):].rstrip(":\n"), [], set()
            continue
        m = INSTRUCTION.match(line)
        if not m or name is None:
            continue
        op, args = m.groups()
        operands = [a.strip() for a in args.split(",")]
        # A store reads all its operands; anything else writes its first.
        sources = " ".join(operands if op.startswith("ST") else operands[1:])
        used = {r for r in pending if re.search(r"\b" + r + r"\b", sources)}
        if used:
            letters.append("u")
            pending -= used
        if op.startswith("LDG"):
            pending.update(registers(operands[0], op))
            letters.append("L")
        elif op.startswith("BAR") or op == "EXIT":
            letters.append("|")
    if name is not None:
        yield name, "".join(letters)


def main():
    for name, letters in trace(sys.stdin):
        print(name[:110])
        print("   ", letters)


if __name__ == "__main__":
    main()
