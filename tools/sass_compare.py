#!/usr/bin/env python3
"""Kernel by kernel, how a change moved the machine code of CUDA files, without a GPU.

    tools/sass_compare.py [--base REV] [--sm 80|90] [--all] FILE.cu [FILE.cu ...]

For each file: every kernel's SASS (tools/sass_local.sh, compute_80 PTX to sm_80 or sm_90 machine
code, as the build does) and ptxas's registers and spill bytes, in the working tree and at REV
(default HEAD, checked out into a temporary worktree), then one line per kernel: static instructions,
registers, spill stores, and whether the code is identical (addresses, labels and the anonymous
namespace's hash ignored). A kernel "identical" here runs the same instructions on the GPU, so a
refactor that keeps every line identical needs no device time to prove it changed nothing; kernels
that are new or gone are listed as such. --all prints identical kernels too (by default only a count).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANGLED = {}  # normalized name -> a mangled name as compiled (to demangle)

# What sass_local.sh's output carries that does not change the code.
NOISE = [
    (re.compile(r"/\*[0-9a-f]{4,}\*/"), ""),
    (re.compile(r"\.L_x_\d+"), ".L"),
    (re.compile(r"__internal_\d+"), "__internal"),
    (re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+"), "_GLOBAL__N_"),
]


def normalize(line):
    for pattern, repl in NOISE:
        line = pattern.sub(repl, line)
    return line.rstrip()


def kernels_sass(root, path, sm, build):
    """{mangled name: [normalized lines]} of every function in the file's cubin."""
    env = dict(os.environ, SPAR_SASS_SM=str(sm), SPAR_BUILD_DIR=build)
    # sass_local.sh takes its include root from where it lies: run the copy in `root`.
    out = subprocess.run(["bash", os.path.join(root, "tools", "sass_local.sh"), os.path.join(root, path), "."],
                         cwd=root, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sass_local.sh failed on {root}/{path}:\n{out.stderr[-3000:]}")
    functions, current = {}, None
    for line in out.stdout.splitlines():
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            current = normalize(m.group(1))
            functions[current] = []
            MANGLED[current] = m.group(1)
        elif current is not None:
            functions[current].append(normalize(line))
    return functions


def ptxas_info(root, path, sm, build):
    """{mangled name: (registers, spill store bytes)} from ptxas -v (the flags of sass_local.sh)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["/usr/local/cuda/bin/nvcc", f"-I{root}", f"-I{build}", "-gencode", f"arch=compute_80,code=sm_{sm}",
               "--expt-relaxed-constexpr", "-O3", "-DNDEBUG", "-std=c++17", "-x", "cu", "-cubin", "-Xptxas", "-v",
               os.path.join(root, path), "-o", os.path.join(tmp, "k.cubin")]
        out = subprocess.run(cmd, capture_output=True, text=True)
    info, current = {}, None
    for line in out.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = normalize(m.group(1))
            continue
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and current:
            info.setdefault(current, [0, 0])[1] = int(m.group(1))
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            info.setdefault(current, [0, 0])[0] = int(m.group(1))
    return info


def short_name(key):
    """A readable kernel name: demangled, namespaces and parameter list dropped."""
    mangled = MANGLED.get(key, key)
    try:
        name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip() or mangled
    except OSError:
        name = mangled
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\([^()]*\)$", "", name)
    name = re.sub(r"\b[\w]+::", "", name)
    return name


def instructions(lines):
    return sum(1 for line in lines if re.match(r"^\s+(@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]*\b", line))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="CUDA sources, relative to the repository root")
    ap.add_argument("--base", default="HEAD", help="the revision to compare with (default HEAD)")
    ap.add_argument("--sm", type=int, choices=(80, 90), default=90, help="machine code (90: what the H200 runs)")
    ap.add_argument("--all", action="store_true", help="list identical kernels too")
    args = ap.parse_args()
    build = os.environ.get("SPAR_BUILD_DIR", os.path.join(ROOT, "build-cuda"))
    with tempfile.TemporaryDirectory() as tmp:
        base_root = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", base_root, args.base], check=True)
        try:
            # The same disassembly both sides: this tree's sass_local.sh.
            shutil.copy(os.path.join(ROOT, "tools", "sass_local.sh"), os.path.join(base_root, "tools", "sass_local.sh"))
            for path in args.files:
                old, new = kernels_sass(base_root, path, args.sm, build), kernels_sass(ROOT, path, args.sm, build)
                old_info, new_info = ptxas_info(base_root, path, args.sm, build), ptxas_info(ROOT, path, args.sm, build)
                names = sorted(set(old) | set(new), key=short_name)
                same = [n for n in names if old.get(n) == new.get(n)]
                print(f"{path} (sm_{args.sm}, {args.base} -> working tree): {len(names)} functions, "
                      f"{len(same)} identical")
                print(f"  {'kernel':60} {'instructions':>15} {'registers':>11} {'spill B':>9}  code")
                for n in names:
                    if n in same and not args.all:
                        continue
                    o, w = old.get(n), new.get(n)
                    oi, ni = old_info.get(n, ["-", "-"]), new_info.get(n, ["-", "-"])
                    state = "identical" if o == w else "new" if o is None else "gone" if w is None else "differs"
                    ins = f"{instructions(o) if o else '-'} -> {instructions(w) if w else '-'}"
                    print(f"  {short_name(n)[:60]:60} {ins:>15} {f'{oi[0]} -> {ni[0]}':>11} "
                          f"{f'{oi[1]} -> {ni[1]}':>9}  {state}")
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base_root], check=False)


if __name__ == "__main__":
    main()
