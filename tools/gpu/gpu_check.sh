#!/usr/bin/env bash
# One call's worth of GPU checks (issue 17), for a lent GPU machine that has the binaries packed
# by tools/gpu/gpu_bundle.sh in .gpu/: the GPU tests, `vllm-launch --device cuda` serving the bundled
# model and a dummy Llama-3-8B-shaped one with `bench serve` against each, and cuda_decode_bench.
# Every step has a time limit; logs go to $OUT/gpu_logs.tar.gz, the summary to $OUT/summary.txt
# and the benchmark table to $OUT/cuda_decode_bench.txt. Steps to run can be named:
#   tools/gpu/gpu_check.sh [tests] [serve] [serve8b] [bench]      (default: all four)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/gpu_out}
logs=$out/logs
mkdir -p "$logs"
steps=${*:-tests serve serve8b bench}
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
run() {  # run NAME LIMIT_S CMD...: logs to $logs/NAME.log, one summary line
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$root/tools/gpu/gpu_run.sh" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  say "$(printf '%-34s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))") $(grep -Eo '\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$logs/$name.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]|Failure|error|Error' "$logs/$name.log" | head -8 | sed 's/^/    /' | tee -a "$summary"
  pack
  return $rc
}
# The logs travel back as one archive (a call returns at most 8 files), rewritten after every
# step so that a call cut off at its limit still returns what ran.
pack() { tar -C "$out" -czf "$out/gpu_logs.tar.gz.part" logs && mv "$out/gpu_logs.tar.gz.part" "$out/gpu_logs.tar.gz"; }
trap 'pack; rm -rf "$logs"' EXIT

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem \
  --format=csv 2>&1 | tee -a "$summary"
[[ -d "$root/.gpu/bin" ]] || tar -C "$root/.gpu" -xJf "$root/.gpu/bundle.tar.xz"
bin=$root/.gpu/bin
missing=$("$root/tools/gpu/gpu_run.sh" ldd "$bin/vllm-launch" | grep 'not found')
[[ -z "$missing" ]] || say "missing libraries: $missing"

if [[ " $steps " == *" tests "* ]]; then
  export GTEST_COLOR=no
  run probe 30 "$bin/gpu_cuda_probe_test"
  run ops 60 "$bin/gpu_cuda_ops_test"
  run attention 90 "$bin/gpu_cuda_attention_test"
  run nccl 60 "$bin/gpu_nccl_communicator_test"
  run model 180 "$bin/gpu_cuda_model_test"
  run executor_cuda 60 "$bin/executor_multiproc_cuda_test"
fi

# serve NAME MODEL_DIR EXTRA_FLAGS...: starts vllm-launch on the GPU, waits for /health (up to
# 120 s), asks one completion, runs bench serve, stops the server.
serve() {
  local name=$1 model=$2
  shift 2
  local port=18000 t0=$SECONDS
  "$root/tools/gpu/gpu_run.sh" "$bin/vllm-launch" --model "$model" --device cuda --port $port "$@" \
    >"$logs/$name.server.log" 2>&1 &
  local pid=$!
  local ok=0
  for _ in $(seq 240); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then ok=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  say "$name: ready=$ok after $((SECONDS - t0))s"
  if [[ $ok == 1 ]]; then
    curl -s --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt":"In the beginning God created","max_tokens":24,"temperature":0}' \
      | tee "$logs/$name.completion.json" | head -c 600 | tee -a "$summary"
    echo | tee -a "$summary"
    run "$name.bench" 90 "$bin/vllm-launch" bench serve --port $port --num-prompts 200 \
      --random-input-len 256 --random-output-len 128 --ignore-eos --random-vocab-max 4000 \
      --disable-tqdm
    grep -E 'throughput|TTFT|TPOT|ITL|Successful|Failed' "$logs/$name.bench.log" | tee -a "$summary"
    curl -s "http://127.0.0.1:$port/metrics" >"$logs/$name.metrics.txt" 2>&1
  fi
  kill -TERM $pid 2>/dev/null
  for _ in $(seq 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  say "$name: server exit $? ; $(grep -ciE 'error|fatal' "$logs/$name.server.log") error lines"
  grep -iE 'error|fatal|abort' "$logs/$name.server.log" | head -6 | sed 's/^/    /' | tee -a "$summary"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | sed 's/^/    left on GPU: /' | tee -a "$summary"
}

if [[ " $steps " == *" serve "* ]]; then
  serve serve_tiny "$root/models/kjv-llama-tiny"
fi
if [[ " $steps " == *" serve8b "* ]]; then
  m=/tmp/llama3-8b-shape
  mkdir -p $m
  cp "$root"/models/kjv-llama-tiny/{tokenizer.json,tokenizer_config.json,generation_config.json} $m/
  cat >$m/config.json <<'EOF'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,
 "intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,
 "num_key_value_heads":8,"head_dim":128,"vocab_size":128256,"max_position_embeddings":8192,
 "rms_norm_eps":1e-05,"rope_theta":500000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16",
 "bos_token_id":0,"eos_token_id":1,"hidden_act":"silu"}
EOF
  serve serve_8b $m --load-format dummy --max-model-len 4096
fi
if [[ " $steps " == *" bench "* ]]; then
  run cuda_decode_bench 180 "$bin/cuda_decode_bench"
  cp "$logs/cuda_decode_bench.log" "$out/cuda_decode_bench.txt"
  tail -40 "$out/cuda_decode_bench.txt"
fi
echo "== summary"; cat "$summary"
