#!/usr/bin/env bash
# Installs the pinned openai Python SDK that serve_openai_sdk_test needs (PyPI, into
# build/release/pydeps), then builds and runs every test: the release build (unit, integration,
# GPU tests that skip without a GPU), the unit tests under ASan+UBSan, the libFuzzer targets
# for 30 s each (scripts/fuzz.sh), and the ipc unit tests (with the shared-memory all-reduce)
# under TSan.
# Prints one closing line "N passed, N failed" over all suites.
set -uo pipefail
cd "$(dirname "$0")/.."
export CTEST_OUTPUT_ON_FAILURE=1

passed=0 failed=0
run_suite() {  # run_suite <preset> <build target or ""> <ctest args...>
  local preset=$1 target=$2; shift 2
  echo "=== build ${preset} ${target}"
  if ! scripts/setup.sh "$preset" $target; then
    echo "build ${preset} FAILED"; failed=$((failed + 1)); return
  fi
  echo "=== test ${preset} $*"
  local log="build/${preset}/ctest.log"
  ctest --test-dir "build/${preset}" --timeout 300 "$@" 2>&1 | tee "$log"
  # ctest's own summary: "NN% tests passed, F tests failed out of T". A run that ends without
  # it (ctest itself crashed) counts as one failure.
  local summary p=0 f=1
  summary=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [[ -n $summary ]]; then
    f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
    p=$(( $(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary") - f ))
  fi
  passed=$((passed + p)); failed=$((failed + f))
}

# The libFuzzer targets (tests/fuzz/, docs/FUZZING.md): builds the fuzz preset, runs each target
# for 30 s on a copy of its committed corpus; each target counts as one test.
run_fuzz_suite() {
  echo "=== build fuzz"
  if ! scripts/setup.sh fuzz; then
    echo "build fuzz FAILED"; failed=$((failed + 1)); return
  fi
  echo "=== fuzz 30 s per target"
  local log=build/fuzz/fuzz.log summary p=0 f=1
  FUZZ_SKIP_BUILD=1 scripts/fuzz.sh 30 2>&1 | tee "$log"
  # fuzz.sh's last line: "fuzz: P passed, F failed". Without it (the script died), one failure.
  summary=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  if [[ -n $summary ]]; then
    p=$(sed -E 's/^fuzz: ([0-9]+) passed.*/\1/' <<<"$summary")
    f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$summary")
  fi
  passed=$((passed + p)); failed=$((failed + f))
}

# Python packages the integration tests import: the official openai SDK, pinned, from PyPI into
# the release build tree (ctest puts it on PYTHONPATH for serve_openai_sdk_test). Skipped when
# the pinned version is already there. A failed install shows up as that test's failure.
OPENAI_VERSION=3.54.0
install_pydeps() {
  local dir=build/release/pydeps
  local check="import sys, openai; sys.exit(openai.__version__ != '${OPENAI_VERSION}')"
  PYTHONPATH=$dir python3 -c "$check" 2>/dev/null && return
  echo "=== pip install openai==${OPENAI_VERSION} into ${dir}"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
      --no-warn-conflicts --upgrade --target "$dir" "openai==${OPENAI_VERSION}" ||
    echo "pip install openai FAILED: serve_openai_sdk_test will fail"
}

install_pydeps
run_suite release "" -j2
run_suite asan unit_tests -L unit -j2
run_fuzz_suite
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  run_suite tsan ipc_unit_tests -L ipc-unit -j2

echo "${passed} passed, ${failed} failed"
[[ $failed -eq 0 ]]
