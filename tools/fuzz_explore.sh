#!/usr/bin/env bash
# Random fuzzing and long soaks, outside the CI gate (the gate replays each
# fuzzer's corpus and regressions with a fixed seed and run count:
# tools/sanitize.sh). Run it by hand or on a schedule, then record what it
# ran and found in docs/reliability.md ("Exploration runs").
#
#   tools/fuzz_explore.sh [--seconds S] [--soak REQUESTS] [TARGET...]
#
# Builds the sanitizer tree (build-san, as tools/sanitize.sh configures it),
# fuzzes each TARGET (default: every libFuzzer target) for S seconds (default
# 600) with a random seed, keeping each target's corpus in
# build-san/fuzz/explore/<target>/ between runs, and with --soak runs the
# load test at REQUESTS streams on the Release tree (build/, which
# tools/build.sh makes). Prints one summary line per target; exits non-zero
# when anything crashed or broke a property, leaving the input in
# build-san/fuzz/explore/<target>/artifacts/ (fix it, then keep the input in
# fuzz/regressions/<target>/, fuzz/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=600 soak=0 targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --soak) soak=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
dir=${SPAR_SANITIZE_DIR:-build-san}
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -gline-tables-only" \
  -DSPAR_CUDA=OFF -DSPAR_BUILD_BENCH=OFF -DSPAR_SANITIZE=ON -DSPAR_FUZZ=ON >/dev/null || exit 1
# Target name and dictionary, as fuzz/CMakeLists.txt declares them.
declare -A dicts
while read -r name dict; do dicts[$name]=$dict; done < <(
  grep -oE '^\s*spar_fuzzer\([a-z_]+( DICT [a-z_.]+)?' fuzz/CMakeLists.txt |
    sed -E 's/^\s*spar_fuzzer\(([a-z_]+)( DICT ([a-z_.]+))?/\1 \3/')
[[ ${#targets[@]} -gt 0 ]] || targets=("${!dicts[@]}")
cmake --build "$dir" --target "${targets[@]}" -j "$(nproc)" || exit 1
symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer)
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:external_symbolizer_path=$symbolizer"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:external_symbolizer_path=$symbolizer"
status=0 summary=()
for t in $(printf '%s\n' "${targets[@]}" | sort); do
  [[ -v dicts[$t] ]] || { echo "fuzz_explore: no fuzz target $t" >&2; status=1; continue; }
  work=$dir/fuzz/explore/$t
  mkdir -p "$work"
  fuzz/run_fuzzer.sh "$dir/fuzz/$t" "$t" "seconds=$seconds" "$work" . "${dicts[$t]}" >"$work/last.log" 2>&1
  rc=$?
  runs=$(grep -oE '^stat::number_of_executed_units: [0-9]+' "$work/last.log" | grep -oE '[0-9]+$')
  cov=$(grep -oE '^#[0-9]+[[:space:]]+DONE +cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$work/last.log" | tail -n 1 |
        sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)/cov \1, ft \2, corpus \3/')
  if [[ $rc -eq 0 ]]; then
    summary+=("$t: ${seconds} s, ${runs:-?} runs, ${cov:-?}, no finding")
  else
    summary+=("$t: FOUND something after ${runs:-?} runs (exit $rc): see $work/last.log and $work/artifacts/")
    status=1
  fi
done
if [[ $soak -gt 0 ]]; then
  if [[ -x build/tests/reliability/soak_test ]]; then
    SPAR_SOAK_REQUESTS=$soak build/tests/reliability/soak_test --gtest_filter='SoakTest.TwoThousand*' \
      >"$dir/fuzz/explore/soak.log" 2>&1
    rc=$?
    summary+=("soak: $soak requests: $([[ $rc -eq 0 ]] && echo passed || echo "FAILED (exit $rc)") ($(grep -oE '[0-9]+ ms total' "$dir/fuzz/explore/soak.log" | tail -n 1))")
    [[ $rc -eq 0 ]] || status=1
  else
    summary+=("soak: build/tests/reliability/soak_test is not built (tools/build.sh)")
    status=1
  fi
fi
printf '%s\n' "${summary[@]}"
exit $status
