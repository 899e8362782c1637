#!/usr/bin/env bash
# Runs one libFuzzer target, in one of two modes:
#   run_fuzzer.sh BINARY NAME runs=N WORKDIR SOURCE_DIR [DICT]
#     CI's (ctest label `fuzz`): deterministic. libFuzzer replays the seed
#     corpus fuzz/corpus/NAME and the regressions fuzz/regressions/NAME, then
#     mutates from them for N runs in all with -seed=1. The same build gives
#     the same inputs every time: -reload=0 (libFuzzer otherwise re-reads its
#     output corpus on a wall-clock timer), ASLR off through setarch -R
#     (pointer-seeded hashes would otherwise steer coverage differently per
#     process), and a fresh WORKDIR/corpus for the inputs it adds.
#   run_fuzzer.sh BINARY NAME seconds=S WORKDIR SOURCE_DIR [DICT]
#     exploration (tools/fuzz_explore.sh, outside the gate): a random seed
#     for S seconds; WORKDIR/corpus is kept, so each run starts where the
#     last one stopped.
# The source tree stays clean either way. A crash or a broken property
# leaves its input in WORKDIR/artifacts and fails: fix the bug, then commit
# the input to fuzz/regressions/NAME/ (fuzz/README.md).
set -uo pipefail
bin=$1 name=$2 mode=$3 work=$4 src=$5 dict=${6:-}
args=(-timeout=25 -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$work/artifacts/" -close_fd_mask=1)
launch=()
case $mode in
  runs=*)
    rm -rf "$work/corpus"
    args+=(-seed=1 -runs="${mode#runs=}" -reload=0)
    if setarch "$(uname -m)" -R true 2>/dev/null; then
      launch=(setarch "$(uname -m)" -R)
    else
      echo "run_fuzzer: setarch -R is not permitted here; ASLR stays on and runs may differ" >&2
    fi
    ;;
  seconds=*) args+=(-max_total_time="${mode#seconds=}") ;;
  *) echo "run_fuzzer: mode must be runs=N or seconds=S, got '$mode'" >&2; exit 2 ;;
esac
mkdir -p "$work/corpus" "$work/artifacts"
[[ -n "$dict" ]] && args+=(-dict="$src/fuzz/dicts/$dict")
"${launch[@]}" "$bin" "${args[@]}" "$work/corpus" "$src/fuzz/corpus/$name" "$src/fuzz/regressions/$name"
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "run_fuzzer: $name failed (exit $rc); inputs that crash it:" >&2
  ls -l "$work/artifacts" >&2
  echo "reproduce: $bin $work/artifacts/<file>; keep it: cp it to fuzz/regressions/$name/<what-it-was>" >&2
fi
exit $rc
