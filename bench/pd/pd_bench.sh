#!/bin/bash
# Prefill/decode disaggregation (1 prefill + 1 decode instance, NixlConnector, the router's
# --pd-disaggregation) against two colocated instances behind the router (round_robin), on two
# "nodes": network namespaces joined by a veth link, each pinned to one core (taskset -c 0 / -c 1
# for everything started in it; the router and the client run on node A, core 0, in both
# configurations). The bundled model, random 896-token prompts (its max_model_len is 1024),
# 128 output tokens, c = 8 and 32 (4c prompts), two rounds interleaved (the order of the two
# configurations alternates). Then, one request at a time: the decode instance's TTFT when it
# loads a prompt's KV from the prefill instance vs a plain instance computing the prompt.
# Root (ip netns); removes what it made. Results (JSON) stay in $PD_OUT (default /tmp/pd_bench).
# Usage: sudo bench/pd/pd_bench.sh   (docs/BENCHMARKS.md, "Disaggregated prefill/decode")
#        then python3 bench/pd/plot_pd.py /tmp/pd_bench/summary.json docs/img/pd_bench.png
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${VLLM_LAUNCH:-$HERE/../../build/release/bin/vllm-launch}
OUT=${PD_OUT:-/tmp/pd_bench}
ROUNDS=${PD_ROUNDS:-2}
CONCS=${PD_CONCS:-"8 32"}
IN_LEN=896; OUT_LEN=128
TMP=$(mktemp -d /tmp/pd-bench.XXXXXX)
cp "$SRC" "$TMP/vllm-launch"; B=$TMP/vllm-launch   # a rebuild during the run swaps nothing
A=pda-$$; Bn=pdb-$$; IPA=10.221.0.1; IPB=10.221.0.2
PA=8410; PB=8420; PR=8400
cleanup() {
  for ns in $A $Bn; do for p in $(ip netns pids $ns 2>/dev/null); do kill -INT $p 2>/dev/null; done; done
  for _ in $(seq 20); do [ -z "$(ip netns pids $A 2>/dev/null)$(ip netns pids $Bn 2>/dev/null)" ] && break; sleep 0.5; done
  for ns in $A $Bn; do for p in $(ip netns pids $ns 2>/dev/null); do kill -9 $p 2>/dev/null; done; done
  ip netns del $A 2>/dev/null; ip netns del $Bn 2>/dev/null; rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rm -rf "$OUT"; mkdir -p "$OUT"
ip netns add $A; ip netns add $Bn
ip link add pa-$$ type veth peer name pb-$$
ip link set pa-$$ netns $A; ip link set pb-$$ netns $Bn
ip -n $A addr add $IPA/24 dev pa-$$; ip -n $Bn addr add $IPB/24 dev pb-$$
ip -n $A link set pa-$$ up; ip -n $Bn link set pb-$$ up; ip -n $A link set lo up; ip -n $Bn link set lo up
# One BLAS / kernel thread per instance: the server sizes its pools from the machine's cores (2),
# not from the affinity mask.
ONA="ip netns exec $A env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 taskset -c 0"
ONB="ip netns exec $Bn env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 taskset -c 1"
SFLAGS="--kv-cache-memory 512MiB"   # the log's "KV-cache blocks" line: 5461 blocks of 16 tokens
PROD='{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
CONS='{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
wait_ready() { for _ in $(seq 1 240); do grep -q "ready at" $1 && return 0; sleep 0.25; done; echo "not ready: $1"; tail $1; exit 1; }
wait_health() { for _ in $(seq 1 120); do ip netns exec $A curl -sf -o /dev/null http://127.0.0.1:$PR/health && return 0; sleep 0.25; done; echo "router not healthy"; exit 1; }
# shellcheck disable=SC2046  # one argument per pid
cpu_s() { python3 "$HERE/pd_tool.py" cpu $(ip netns pids $1); }
stop() { for p in "$@"; do kill -INT $p; done; for p in "$@"; do wait $p; done; }
run_client() {  # $1 config, $2 round
  # warm-up (other prompts: --seed), not counted
  $ONA $B bench serve --port $PR --dataset-name random --random-input-len $IN_LEN --random-output-len $OUT_LEN --ignore-eos --random-vocab-min 10 --random-vocab-max 4000 --num-prompts 8 --max-concurrency 8 --seed 99$2 --disable-tqdm > /dev/null 2>&1
  for c in $CONCS; do
    n=$((c*4 < 32 ? 32 : c*4))
    ca=$(cpu_s $A); cb=$(cpu_s $Bn); s0=$(grep -E '^cpu[01] ' /proc/stat | tr '\n' ';'); t0=$(date +%s.%N)
    $ONA /usr/bin/time -o $OUT/time_$1_c${c}_r$2.txt -f "%U %S" $B bench serve --port $PR --dataset-name random --random-input-len $IN_LEN --random-output-len $OUT_LEN --ignore-eos --random-vocab-min 10 --random-vocab-max 4000 --num-prompts $n --max-concurrency $c --seed $((c*10+$2)) --percentile-metrics ttft,itl --metric-percentiles 50,99 --disable-tqdm --save-result --result-dir $OUT --result-filename bench_$1_c${c}_r$2.json > $OUT/log_$1_c${c}_r$2.txt 2>&1
    t1=$(date +%s.%N); s1=$(grep -E '^cpu[01] ' /proc/stat | tr '\n' ';'); ca2=$(cpu_s $A); cb2=$(cpu_s $Bn)
    echo "{\"wall\": $(echo "$t1 - $t0" | bc), \"cpu_a\": $(echo "$ca2 - $ca" | bc), \"cpu_b\": $(echo "$cb2 - $cb" | bc), \"client\": \"$(tail -1 $OUT/time_$1_c${c}_r$2.txt)\", \"stat0\": \"$s0\", \"stat1\": \"$s1\"}" > $OUT/meta_$1_c${c}_r$2.json
    grep -E "Output token throughput|P99 ITL|P99 TTFT|Failed" $OUT/log_$1_c${c}_r$2.txt | tr -s ' ' | sed "s/^/$1 r$2 c=$c: /"
  done
}
pd() {  # $1 round
  VLLM_NIXL_SIDE_CHANNEL_HOST=$IPA $ONA $B --host 127.0.0.1 --port $PA $SFLAGS --kv-transfer-config "$PROD" > $OUT/pd_prefill_r$1.log 2>&1 & P=$!
  VLLM_NIXL_SIDE_CHANNEL_HOST=$IPB $ONB $B --host $IPB --port $PB $SFLAGS --kv-transfer-config "$CONS" > $OUT/pd_decode_r$1.log 2>&1 & D=$!
  wait_ready $OUT/pd_prefill_r$1.log; wait_ready $OUT/pd_decode_r$1.log
  $ONA $B router --pd-disaggregation --prefill http://127.0.0.1:$PA --decode http://$IPB:$PB --port $PR > $OUT/pd_router_r$1.log 2>&1 & R=$!
  wait_ready $OUT/pd_router_r$1.log; wait_health
  run_client pd $1
  # every decode request loaded its prompt (nothing recomputed): external prefix-cache hits
  ip netns exec $A curl -s http://$IPB:$PB/metrics | grep -E "^vllm:(external_prefix_cache_hits_total|prefix_cache_queries_total)" | sed "s/^/pd r$1 decode: /"
  $ONA python3 "$HERE/pd_tool.py" probe --mode pd --prefill http://127.0.0.1:$PA --decode http://$IPB:$PB --len $IN_LEN --seed $((1000*$1)) --out $OUT/probe_pd_r$1.json
  stop $R $P $D
}
colocated() {  # $1 round
  $ONA $B --host 127.0.0.1 --port $PA $SFLAGS > $OUT/co_a_r$1.log 2>&1 & P=$!
  $ONB $B --host $IPB --port $PB $SFLAGS > $OUT/co_b_r$1.log 2>&1 & D=$!
  wait_ready $OUT/co_a_r$1.log; wait_ready $OUT/co_b_r$1.log
  $ONA $B router --worker-urls http://127.0.0.1:$PA http://$IPB:$PB --policy round_robin --port $PR > $OUT/co_router_r$1.log 2>&1 & R=$!
  wait_ready $OUT/co_router_r$1.log; wait_health
  run_client colocated $1
  $ONA python3 "$HERE/pd_tool.py" probe --mode plain --plain http://$IPB:$PB --len $IN_LEN --seed $((1000*$1)) --out $OUT/probe_plain_r$1.json
  stop $R $P $D
}
for round in $(seq 1 $ROUNDS); do
  if [ $((round % 2)) = 1 ]; then pd $round; colocated $round; else colocated $round; pd $round; fi
done
grep -h "KV-cache blocks" $OUT/pd_prefill_r1.log | sed 's/^/prefill: /'
{ echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"; echo; python3 "$HERE/pd_tool.py" table $OUT; } | tee $OUT/tables.md
