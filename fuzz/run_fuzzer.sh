#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time (ctest label `fuzz`).
#   run_fuzzer.sh BINARY NAME SECONDS WORKDIR SOURCE_DIR [DICT]
# New inputs go to WORKDIR/corpus (the source tree stays clean); the seed
# corpus fuzz/corpus/NAME and the regressions fuzz/regressions/NAME are read
# too. A crash leaves its input in WORKDIR/artifacts and fails the test:
# fix the bug, then commit the input to fuzz/regressions/NAME/ (README.md).
set -uo pipefail
bin=$1 name=$2 seconds=$3 work=$4 src=$5 dict=${6:-}
mkdir -p "$work/corpus" "$work/artifacts" "$src/fuzz/regressions/$name"
args=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2560 -print_final_stats=1
      -artifact_prefix="$work/artifacts/" -close_fd_mask=1)
[[ -n "$dict" ]] && args+=(-dict="$src/fuzz/dicts/$dict")
"$bin" "${args[@]}" "$work/corpus" "$src/fuzz/corpus/$name" "$src/fuzz/regressions/$name"
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "run_fuzzer: $name failed (exit $rc); inputs that crash it:" >&2
  ls -l "$work/artifacts" >&2
  echo "reproduce: $bin $work/artifacts/<file>; keep it: cp it to fuzz/regressions/$name/<what-it-was>" >&2
fi
exit $rc
