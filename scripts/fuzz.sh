#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz/ (docs/FUZZING.md), FUZZ_JOBS at a time.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 30 s, every target
#
# Builds the targets (scripts/setup.sh fuzz: build/asan/bin) unless FUZZ_SKIP_BUILD=1. Each target runs on
# a temporary copy of its committed corpus (tests/fuzz/corpus/<target>/, so the tree is never
# modified) with its dictionary (tests/fuzz/dict/<dict>.dict) when it has one, for
# SECONDS_PER_TARGET; a single input over 10 s or 2 GiB RSS is a failure. Crash, leak,
# timeout and OOM inputs are written to build/fuzz/artifacts/<target>/, the full log to
# build/fuzz/logs/<target>.log. Every run appends a line to build/fuzz/ledger.tsv (date,
# target, seconds, executions, exec/s, cov, ft, corpus size, result, git revision) so
# executions can be summed across runs; the closing table shows this run and the ledger totals.
#
# Environment:
#   FUZZ_CORPUS_DIR=DIR  keep the working corpus in DIR/<target>/ across runs (seeded from the
#                        committed corpus when empty) instead of a temporary copy
#   FUZZ_ARGS="..."      extra libFuzzer flags for every target (e.g. "-fork=2" or "-jobs=2")
#   FUZZ_SKIP_BUILD=1    do not (re)build the targets (build/asan) first
#   FUZZ_JOBS=N          targets run side by side (default: nproc; each uses one core)
# The last line is "fuzz: N passed, N failed" (targets). Exit status: 0 when every target ran
# clean, 1 when any failed (or the build did), 2 on a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-30}
[[ $# -gt 0 ]] && shift
if ! [[ $SECONDS_PER_TARGET =~ ^[0-9]+$ ]] || ((SECONDS_PER_TARGET == 0)); then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]" >&2
  exit 2
fi

# Target -> largest input libFuzzer generates (bytes) and dictionary (tests/fuzz/dict/).
declare -A MAX_LEN=(
  [http_request]=16384 [json_request]=16384 [engine_protocol]=4096 [worker_protocol]=4096
  [node_protocol]=8192
  [vllm_config]=8192 [engine_handshake]=2048 [dp_coordinator]=8192
  [safetensors]=8192 [model_config]=8192 [tokenizer]=16384 [tokenizer_text]=2048
  [chat_template]=8192 [router_request]=16384 [kv_events]=8192)
declare -A DICT=(
  [http_request]=http [json_request]=json [safetensors]=json [model_config]=json
  [tokenizer]=json [chat_template]=jinja [router_request]=json [kv_events]=json)

if (($# > 0)); then
  TARGETS=("$@")
else
  TARGETS=()
  for f in tests/fuzz/*_fuzzer.cc; do
    name=$(basename "$f" _fuzzer.cc)
    TARGETS+=("$name")
  done
fi
for t in "${TARGETS[@]}"; do
  if [[ ! -f tests/fuzz/${t}_fuzzer.cc ]]; then
    echo "fuzz: unknown target '$t' (tests/fuzz/<target>_fuzzer.cc)" >&2
    exit 2
  fi
done

if [[ ${FUZZ_SKIP_BUILD:-0} != 1 ]]; then
  scripts/setup.sh fuzz || { echo "fuzz: build FAILED" >&2; exit 1; }
fi

# The targets are built in build/asan (with the ASan unit tests); their logs, artifacts and
# ledger go to build/fuzz.
BIN=build/asan/bin
OUT=build/fuzz
LEDGER=$OUT/ledger.tsv
mkdir -p "$OUT/logs"
[[ -f $LEDGER ]] ||
  printf 'date\ttarget\tseconds\texecutions\texec_per_s\tcov\tft\tcorpus\tresult\trevision\n' \
    >"$LEDGER"
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || REVISION="${REVISION}+dirty"

# The reason a run failed, from its log.
failure_reason() {
  local log=$1
  if grep -q 'ERROR: libFuzzer: timeout' "$log"; then echo timeout
  elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then echo oom
  elif grep -q 'ERROR: LeakSanitizer' "$log"; then echo leak
  elif grep -q 'ERROR: AddressSanitizer' "$log"; then echo asan
  elif grep -q 'runtime error:' "$log"; then echo ubsan
  elif grep -q 'FUZZ_CHECK' "$log"; then echo invariant
  elif grep -q 'ERROR: libFuzzer: deadly signal' "$log"; then echo crash
  else echo "exit"
  fi
}

# run_target <target>: runs one target; writes its table row to $OUT/rows/<target> and
# "ok" or "FAIL(...)" to $OUT/results/<target>.
run_target() {
  local t=$1
  local bin=$BIN/${t}_fuzzer log=$OUT/logs/$t.log artifacts=$OUT/artifacts/$t
  local row=$OUT/rows/$t res=$OUT/results/$t tmp="" corpus
  mkdir -p "$artifacts"
  if [[ ! -x $bin ]]; then
    echo "fuzz: $bin is missing (build failed?)" >&2
    printf '%-16s %12s %9s %7s %8s %7s  %s' "$t" - - - - - "FAIL(missing)" >"$row"
    echo "FAIL(missing)" >"$res"
    return
  fi
  if [[ -n ${FUZZ_CORPUS_DIR:-} ]]; then
    corpus=$FUZZ_CORPUS_DIR/$t
    mkdir -p "$corpus"
    [[ -n $(ls -A "$corpus") ]] || cp -r "tests/fuzz/corpus/$t/." "$corpus/"
  else
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/vllm-fuzz-$t.XXXXXX")
    corpus=$tmp
    cp -r "tests/fuzz/corpus/$t/." "$corpus/"
  fi
  local args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048
              -max_len="${MAX_LEN[$t]:-4096}" -print_final_stats=1 -artifact_prefix="$artifacts/")
  [[ -n ${DICT[$t]:-} ]] && args+=(-dict="tests/fuzz/dict/${DICT[$t]}.dict")
  # shellcheck disable=SC2206  # FUZZ_ARGS is a list of flags
  local extra=(${FUZZ_ARGS:-})
  echo "=== fuzz $t (${SECONDS_PER_TARGET} s): $bin ${args[*]} ${extra[*]} $corpus"
  # The outer timeout only guards against a fuzzer that never stops by itself.
  timeout --kill-after=30 $((SECONDS_PER_TARGET + 300)) \
    "$bin" "${args[@]}" "${extra[@]}" "$corpus" >"$log" 2>&1
  local rc=$? execs rate status_line cov ft corp result
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  status_line=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' <<<"$status_line" | grep -oE '[0-9]+')
  ft=$(grep -oE 'ft: [0-9]+' <<<"$status_line" | grep -oE '[0-9]+')
  corp=$(grep -oE 'corp: [0-9]+(/[0-9]+[a-zA-Z]*)?' <<<"$status_line" | sed 's/corp: //')
  # Fork mode (-fork=N) prints no final stats: its status lines start with the total count.
  [[ -n $execs ]] || execs=$(grep -oE '^#[0-9]+' <<<"$status_line" | tr -d '#')
  [[ -n $rate ]] || rate=$(grep -oE 'exec/s:? [0-9]+' <<<"$status_line" | grep -oE '[0-9]+$')
  if ((rc == 0)); then
    result=ok
  else
    result="FAIL($(failure_reason "$log"))"
    echo "--- $t failed (exit $rc); last lines of $log:"
    grep -E 'ERROR|FUZZ_CHECK|runtime error|SUMMARY|Test unit written|#[0-9]+ in ' "$log" | head -30
  fi
  [[ -n $tmp ]] && rm -rf "$tmp"
  # One short line per append: lines from targets running side by side do not interleave.
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" \
    "$SECONDS_PER_TARGET" "${execs:-0}" "${rate:-0}" "${cov:-0}" "${ft:-0}" "${corp:--}" \
    "$result" "$REVISION" >>"$LEDGER"
  printf '%-16s %12s %9s %7s %8s %7s  %s' "$t" "${execs:-0}" "${rate:-0}" \
    "${cov:-0}" "${ft:-0}" "${corp:--}" "$result" >"$row"
  echo "$result" >"$res"
}

# FUZZ_JOBS targets at a time (default: the number of cores); each fuzzer is one process on
# one core, so every target still gets SECONDS_PER_TARGET of a core.
JOBS=${FUZZ_JOBS:-$(nproc)}
rm -rf "$OUT/rows" "$OUT/results"
mkdir -p "$OUT/rows" "$OUT/results"
running=0
for t in "${TARGETS[@]}"; do
  if ((running >= JOBS)); then
    wait -n
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait

failed=0 npassed=0 nfailed=0
SUMMARY=()
for t in "${TARGETS[@]}"; do
  SUMMARY+=("$(cat "$OUT/rows/$t" 2>/dev/null || printf '%-16s  FAIL(no result)' "$t")")
  if [[ $(cat "$OUT/results/$t" 2>/dev/null) == ok ]]; then
    npassed=$((npassed + 1))
  else
    failed=1
    nfailed=$((nfailed + 1))
  fi
done

echo
printf '%-16s %12s %9s %7s %8s %7s  %s\n' target executions exec/s cov ft corpus result
printf '%s\n' "${SUMMARY[@]}"
echo
echo "executions recorded in $LEDGER, all runs:"
awk -F'\t' 'NR > 1 { total[$2] += $4; runs[$2]++; if ($9 != "ok") bad[$2]++ }
  END { for (t in total) printf "  %-16s %14d executions in %d runs, %d failed\n",
                                 t, total[t], runs[t], bad[t] }' \
  "$LEDGER" | sort
echo "fuzz: ${npassed} passed, ${nfailed} failed"
exit "$failed"
