#!/usr/bin/env bash
# The sanitizer and fuzzing pass of CI (tools/test.sh runs it after the main
# suite; docs/reliability.md): a second, CPU-only build with clang-14 under
# AddressSanitizer (with LeakSanitizer) + UndefinedBehaviorSanitizer, the
# whole `cpu` test suite on it, then every libFuzzer target fuzzed
# deterministically: its seed corpus and regressions, then SPAR_FUZZ_RUNS
# (default 20000) runs with -seed=1 (fuzz/run_fuzzer.sh), so two runs of the
# gate run the same inputs. Random, timed fuzzing and long soaks are
# tools/fuzz_explore.sh, outside the gate. Any sanitizer report fails the
# pass, from a test binary or from a daemon a test started. Extra arguments
# go to the cpu ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SPAR_SANITIZE_DIR:-build-san}
# -O2 with line tables: reports carry file:line.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -gline-tables-only" \
  -DSPAR_CUDA=OFF -DSPAR_BUILD_BENCH=OFF -DSPAR_SANITIZE=ON -DSPAR_FUZZ=ON \
  -DSPAR_FUZZ_RUNS="${SPAR_FUZZ_RUNS:-20000}" >/dev/null
cmake --build "$dir" -j "$(nproc)"

# Every process writes its reports to its own file under $reports (ASan's
# and UBSan's log_path), so a report from a daemon fails the pass even when
# the test that started it passed (daemons stopped with SIGTERM run
# LeakSanitizer at exit). halt_on_error: the first report ends the process.
reports="$(cd "$dir" && pwd)/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# Debian's llvm-14 installs the symbolizer (file:line in reports) with a
# versioned name only.
symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer)
common_asan="halt_on_error=1:detect_leaks=1:external_symbolizer_path=$symbolizer"
common_ubsan="print_stacktrace=1:halt_on_error=1:external_symbolizer_path=$symbolizer"
status=0
# The daemons compute several times slower here: the fault and soak tests
# stretch their budgets for work to finish (not their promptness bounds) by
# SPAR_TEST_TIME_SCALE. The soak runs 500 of its 2,000 streams (at the same
# 64 in flight): the whole soak is the main suite's, and here it took ~4 min.
# Of the trained tiny GLM-5's goldens (each ~75 s here, 30-65 s even in
# Release: the model is 6.4M parameters) the logits tests load and run both
# real checkpoints (bf16, block-FP8); the top-k, greedy and dense-control
# comparisons run the same forward passes and are left to the main suite, as
# are its answer tests' long recall prompts (arithmetic and multi-turn run here)
# and the same answers asked through a cluster's OpenAI API (tiny_chat_openai).
SPAR_TEST_TIME_SCALE=${SPAR_TEST_TIME_SCALE:-3} SPAR_SOAK_REQUESTS=${SPAR_SOAK_REQUESTS:-500} \
ASAN_OPTIONS="$common_asan:log_path=$reports/asan" \
UBSAN_OPTIONS="$common_ubsan:log_path=$reports/ubsan" \
  ctest --test-dir "$dir" --output-on-failure -L cpu -j "$(nproc)" \
    -E 'TinyChatGoldenTest\.(TopKSets|GreedyContinuations|DenseControl)|TinyChatTest\.(LongContext|RandomSelection)|tiny_chat_openai' \
    "$@" || status=1
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports (one file per process):" >&2
  for f in "$reports"/*; do
    echo "===== $f" >&2
    cat "$f" >&2
  done
  status=1
fi

# The fuzzers, with a fixed seed and run count: libFuzzer reads the reports
# from stderr itself.
ASAN_OPTIONS="$common_asan" UBSAN_OPTIONS="$common_ubsan" \
  ctest --test-dir "$dir" --output-on-failure -L fuzz -j "$(nproc)" || status=1
exit $status
