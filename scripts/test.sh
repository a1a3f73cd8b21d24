#!/usr/bin/env bash
# Builds and runs every test, suite by suite:
#   release  the release build (unit, integration, lint, GPU tests that skip without a GPU)
#   asan     the unit tests under ASan+UBSan, in the build the libFuzzer targets share
#   fuzz     the libFuzzer targets, 30 s each, one per core at a time (scripts/fuzz.sh)
#   tsan     the ipc unit tests (with the shared-memory all-reduce) and the multi-threaded
#            parts' unit tests (label tsan-unit: thread pool, DP coordinator, router, engine-core
#            process, engine-core client, AsyncLLM, API server, MultiprocExecutor) under TSan,
#            with Abseil built with TSan too (scripts/setup.sh tsan downloads its Debian source)
# First installs the pinned Python packages the tests import (PyPI, into build/release/pydeps).
# Prints each suite's build and test wall time, the slowest tests, and one closing line
# "N passed, N failed" over all suites (tests/README.md keeps the latest figures).
set -uo pipefail
cd "$(dirname "$0")/.."
export CTEST_OUTPUT_ON_FAILURE=1
# A lint test whose tool is missing fails here instead of skipping (tools/lint/).
export VLLM_LINT_STRICT=1

passed=0 failed=0
TIMES=()
START=$(date +%s)
# ccache's counters for this run only (scripts/setup.sh installs ccache; cmake/Ccache.cmake).
ccache -z >/dev/null 2>&1 || true

# add_counts <passed> <failed>
add_counts() { passed=$((passed + $1)); failed=$((failed + $2)); }

run_suite() {  # run_suite <suite> <preset> "<build targets>" <ctest args...>
  local suite=$1 preset=$2 targets=$3; shift 3
  local t0 t1 t2
  t0=$(date +%s)
  echo "=== build ${preset} ${targets}"
  # shellcheck disable=SC2086  # targets is a list
  if ! scripts/setup.sh "$preset" $targets; then
    echo "build ${preset} FAILED"; add_counts 0 1
    TIMES+=("$(printf '%-8s %8s %8s  build failed' "$suite" $(( $(date +%s) - t0 )) -)")
    return
  fi
  t1=$(date +%s)
  echo "=== test ${preset} $*"
  local log="build/${preset}/ctest.log"
  ctest --test-dir "build/${preset}" --timeout 300 "$@" 2>&1 | tee "$log"
  t2=$(date +%s)
  # ctest's own summary: "NN% tests passed, F tests failed out of T". A run that ends without
  # it (ctest itself crashed) counts as one failure.
  local summary p=0 f=1
  summary=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [[ -n $summary ]]; then
    f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
    p=$(( $(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary") - f ))
  fi
  add_counts "$p" "$f"
  TIMES+=("$(printf '%-8s %8d %8d  %d passed, %d failed' "$suite" $((t1 - t0)) $((t2 - t1)) "$p" "$f")")
}

# The slowest tests of a suite's ctest log: "  seconds  name".
slowest() {
  grep -E 'Test +#[0-9]+: ' "build/$1/ctest.log" 2>/dev/null |
    sed -E 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/' | sort -rn | head -"$2" |
    awk -v s="$1" '{ printf "  %-8s %8.1f  %s\n", s, $1, $2 }'
}

# The libFuzzer targets (tests/fuzz/, docs/FUZZING.md), built in build/asan with the unit
# tests: each runs 30 s on a copy of its committed corpus; each target counts as one test.
run_fuzz_suite() {
  local t0 t1
  t0=$(date +%s)
  echo "=== fuzz 30 s per target"
  local log=build/asan/fuzz.log summary p=0 f=1
  FUZZ_SKIP_BUILD=1 scripts/fuzz.sh 30 2>&1 | tee "$log"
  t1=$(date +%s)
  # fuzz.sh's last line: "fuzz: P passed, F failed". Without it (the script died), one failure.
  summary=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  if [[ -n $summary ]]; then
    p=$(sed -E 's/^fuzz: ([0-9]+) passed.*/\1/' <<<"$summary")
    f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$summary")
  fi
  add_counts "$p" "$f"
  TIMES+=("$(printf '%-8s %8s %8d  %d passed, %d failed' fuzz "(asan)" $((t1 - t0)) "$p" "$f")")
}

# Python packages the tests import, pinned, from PyPI into the release build tree (ctest puts
# it on PYTHONPATH): the official openai SDK (serve_openai_sdk_test) and lizard (size_test's
# function lengths). Skipped when the pinned versions are already there. A failed install shows
# up as those tests' failure.
OPENAI_VERSION=3.54.0
LIZARD_VERSION=1.24.3
JSONSCHEMA_VERSION=4.26.0  # the structured-output corpus test validates outputs with it
ANTHROPIC_VERSION=2.16.0   # serve_anthropic_sdk_test drives /v1/messages with it
install_pydeps() {
  local dir=build/release/pydeps
  local check="import sys, openai, lizard, jsonschema, anthropic
from importlib.metadata import version
sys.exit(openai.__version__ != '${OPENAI_VERSION}' or lizard.version != '${LIZARD_VERSION}' or
         version('jsonschema') != '${JSONSCHEMA_VERSION}' or
         anthropic.__version__ != '${ANTHROPIC_VERSION}')"
  PYTHONPATH=$dir python3 -c "$check" 2>/dev/null && return
  echo "=== pip install openai==${OPENAI_VERSION} lizard==${LIZARD_VERSION}" \
       "jsonschema==${JSONSCHEMA_VERSION} into ${dir}"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
      --no-warn-conflicts --upgrade --target "$dir" "openai==${OPENAI_VERSION}" \
      "lizard==${LIZARD_VERSION}" "jsonschema==${JSONSCHEMA_VERSION}" \
      "anthropic==${ANTHROPIC_VERSION}" ||
    echo "pip install FAILED: serve_openai_sdk_test, the corpus test and size_test will fail"
}

install_pydeps
run_suite release release "" -j2
run_suite asan asan "unit_tests fuzzers" -L unit -j2
run_fuzz_suite
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  run_suite tsan tsan "tsan_unit_tests" -L 'ipc-unit|tsan-unit' -j2

echo
echo "suite       build s   test s"
printf '%s\n' "${TIMES[@]}"
echo "total $(( $(date +%s) - START )) s; ccache: $(ccache --print-stats 2>/dev/null |
  awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
              $1 == "cache_miss" { m = $2 } END { printf "%d hits, %d misses (this run)", h, m }')"
echo "slowest tests:"
for s in release asan tsan; do slowest "$s" 5; done
echo "${passed} passed, ${failed} failed"
[[ $failed -eq 0 ]]
