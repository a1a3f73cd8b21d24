#!/bin/bash
# -pp 2 with its second stage in another network namespace ("node", a veth link between them)
# against -pp 2 on one node: the bundled model, `vllm-launch bench serve` from the head's
# namespace at c = 1, 16, 64, two rounds interleaved. Root (ip netns); removes what it made.
# Usage: sudo bench/engine/pp_two_nodes_bench.sh   (docs/BENCHMARKS.md, "-pp 2 across two nodes")
set -u
B=${VLLM_LAUNCH:-$(dirname "$0")/../../build/release/bin/vllm-launch}
A=vxa-$$; Bn=vxb-$$
cleanup() { pkill -f "master-port 29611" ; sleep 1; ip netns del $A 2>/dev/null; ip netns del $Bn 2>/dev/null; }
trap cleanup EXIT
ip netns add $A; ip netns add $Bn
ip link add va-$$ type veth peer name vb-$$
ip link set va-$$ netns $A; ip link set vb-$$ netns $Bn
ip -n $A addr add 10.219.0.1/24 dev va-$$; ip -n $Bn addr add 10.219.0.2/24 dev vb-$$
ip -n $A link set va-$$ up; ip -n $Bn link set vb-$$ up; ip -n $A link set lo up; ip -n $Bn link set lo up
run_client() {  # $1 label
  for c in 1 16 64; do
    n=$((c==1 ? 16 : c*4))
    ip netns exec $A $B bench serve --port 8311 --dataset-name random --random-input-len 128 --random-output-len 64 --ignore-eos --random-vocab-min 10 --random-vocab-max 4000 --num-prompts $n --max-concurrency $c --seed $c 2>/dev/null | grep -E "Output token throughput|Mean TTFT|Mean ITL" | tr -s ' ' | sed "s/^/$1 c=$c: /"
  done
}
wait_ready() { for i in $(seq 1 120); do grep -q "ready at" $1 && return 0; sleep 0.5; done; echo "not ready"; cat $1 | tail; return 1; }
for round in 1 2; do
  # one node
  ip netns exec $A $B -pp 2 --port 8311 --kv-cache-memory 256MiB > /tmp/xb_h1.log 2>&1 & H=$!
  wait_ready /tmp/xb_h1.log && run_client "pp2-one-node r$round"
  kill -INT $H; wait $H
  # two nodes
  ip netns exec $Bn $B -pp 2 --nnodes 2 --node-rank 1 --master-addr 10.219.0.1 --master-port 29611 --headless > /tmp/xb_n.log 2>&1 & N=$!
  ip netns exec $A $B -pp 2 --nnodes 2 --master-addr 10.219.0.1 --master-port 29611 --port 8311 --kv-cache-memory 256MiB > /tmp/xb_h2.log 2>&1 & H=$!
  wait_ready /tmp/xb_h2.log && run_client "pp2-two-nodes r$round"
  kill -INT $H; wait $H; kill -INT $N; wait $N
done
grep -h "pipeline stage" /tmp/xb_h2.log /tmp/xb_n.log | tail -2
