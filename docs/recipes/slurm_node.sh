#!/usr/bin/env bash
# vLLM 0.33's multi-node flags from a Slurm job: the command every node runs.
#
#   srun --nodes=2 --ntasks-per-node=1 docs/recipes/slurm_node.sh --model M -tp 8 -pp 2
#   srun --nodes=2 --ntasks-per-node=1 docs/recipes/slurm_node.sh --model M -dp 2 -pp 4
#
# Adds --nnodes SLURM_NNODES --node-rank SLURM_NODEID --master-addr HEAD --master-port PORT,
# and --headless on every node but the first (the head: API server and engine core). The
# parallel sizes are yours: one engine across the nodes (-tp × -pp a multiple of the nodes), or
# with -dp each node's replicas (-dp × -tp × -pp over the nodes, each replica within a node).
# Environment:
#   VLLM_MASTER_PORT   --master-port (default 29501)
#   VLLM_HEAD_ADDRESS  the head's address (default: the job's first node, resolved to IPv4)
#   VLLM_LAUNCH        the vllm-launch binary (default: vllm-launch on PATH)
# Tested by tests/multinode/multinode_pp_test.cc (two network-namespace "nodes").
set -euo pipefail
node=${SLURM_NODEID:?run me under srun (SLURM_NODEID is not set)}
nodes=${SLURM_NNODES:?run me under srun (SLURM_NNODES is not set)}
port=${VLLM_MASTER_PORT:-29501}
head=${VLLM_HEAD_ADDRESS:-}
if [[ -z $head ]]; then
  first=$(scontrol show hostnames "${SLURM_JOB_NODELIST:?}" | awk 'NR == 1')
  head=$(getent ahostsv4 "$first" | awk 'NR == 1 { print $1 }')
  [[ -n $head ]] || { echo "slurm_node.sh: cannot resolve the head node '$first'" >&2; exit 2; }
fi
args=(--nnodes "$nodes" --node-rank "$node" --master-addr "$head" --master-port "$port")
if ((node > 0)); then args+=(--headless); fi
exec "${VLLM_LAUNCH:-vllm-launch}" "$@" "${args[@]}"
