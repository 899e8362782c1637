#!/usr/bin/env bash
# Keeps docs/reliability.md true to the tests (ctest `reliability_doc`):
#  - every bad-input case of the gRPC and HTTP matrices is in the doc;
#  - every test the doc names (`Suite.Name`) exists under tests/;
#  - every fuzz target is in the doc.
#   reliability_doc_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: reliability_doc_test.sh SOURCE_DIR}
doc=$src/docs/reliability.md
rel=$src/tests/reliability
fail=0

# The doc's two bad-input sections: gRPC from "## Bad input" to "### Through
# the OpenAI HTTP API", HTTP from there to the next "## ".
grpc_doc=$(awk '/^## Bad input/{on=1} /^### Through the OpenAI HTTP API/{on=0} on' "$doc")
http_doc=$(awk '/^### Through the OpenAI HTTP API/{on=1; print; next} /^## /{on=0} on' "$doc")

# Case names as the matrices write them: add("x", ...) and {"x", <bytes>,
# ...} (gRPC); completion("x", ...), chat("x", ...), c.push_back({"x", ...})
# (HTTP).
grpc_cases=$( (grep -oE '\badd\("[a-z0-9_]+"' "$rel/bad_input_grpc_test.cc"
               grep -oE '^\s*\{"[a-z0-9_]+", ' "$rel/bad_input_grpc_test.cc") |
             grep -oE '"[a-z0-9_]+"' | tr -d '"' | sort -u)
http_cases=$(grep -oE '\b((completion|chat)\(|push_back\(\{)"[a-z0-9_]+"' "$rel/bad_input_http_test.cc" |
             grep -oE '"[a-z0-9_]+"' | tr -d '"' | sort -u)
n_grpc=$(echo "$grpc_cases" | wc -l) n_http=$(echo "$http_cases" | wc -l)
if [[ $n_grpc -lt 40 || $n_http -lt 40 ]]; then
  echo "found only $n_grpc gRPC and $n_http HTTP bad-input cases: has the tests' syntax changed? update this script" >&2
  fail=1
fi
for c in $grpc_cases; do
  if ! grep -qF "\`$c\`" <<<"$grpc_doc"; then
    echo "docs/reliability.md: gRPC bad-input case \`$c\` is missing from its table" >&2
    fail=1
  fi
done
for c in $http_cases; do
  if ! grep -qF "\`$c\`" <<<"$http_doc"; then
    echo "docs/reliability.md: HTTP bad-input case \`$c\` is missing from its table" >&2
    fail=1
  fi
done

# Tests named in the doc, e.g. `FaultTest.WorkerKilledMidStream...`.
tests=$(grep -oE '`[A-Z][A-Za-z0-9]*Test\.[A-Z][A-Za-z0-9]*`' "$doc" | tr -d '`' | sort -u)
n_tests=$(echo "$tests" | wc -l)
for t in $tests; do
  suite=${t%%.*} name=${t#*.}
  if ! grep -rqE "TEST(_F|_P)?\($suite, $name\)" "$src/tests"; then
    echo "docs/reliability.md names $t, which no test under tests/ defines" >&2
    fail=1
  fi
done

# Fuzz targets.
fuzzers=$(grep -oE '^\s*spar_fuzzer\([a-z_]+' "$src/fuzz/CMakeLists.txt" | sed 's/.*(//' | sort -u)
for f in $fuzzers; do
  if ! grep -qF "\`$f\`" "$doc"; then
    echo "docs/reliability.md: fuzz target \`$f\` is missing" >&2
    fail=1
  fi
done

echo "checked $n_grpc gRPC and $n_http HTTP bad-input cases, $n_tests test names, $(echo "$fuzzers" | wc -l) fuzz targets"
exit $fail
