#!/usr/bin/env bash
# Data parallelism across the nodes of a Slurm job: the command every node runs.
#
#   srun --nodes=2 --ntasks-per-node=1 docs/recipes/slurm_dp_node.sh --model M -tp 4
#
# The job's first node (SLURM_NODEID 0) is the head: API server and replicas 0 .. DPL-1; node k
# runs replicas k*DPL .. as --headless. Arguments are passed on to vllm-launch. Environment:
#   VLLM_DP_LOCAL      replicas per node (-dpl; default 1)
#   VLLM_DP_PORT       the head's --data-parallel-rpc-port (default 13345)
#   VLLM_HEAD_ADDRESS  the head's address (default: the job's first node, resolved to IPv4)
#   VLLM_LAUNCH        the vllm-launch binary (default: vllm-launch on PATH)
# Tested by tests/multinode/multinode_dp_test.cc (two network-namespace "nodes").
set -euo pipefail
node=${SLURM_NODEID:?run me under srun (SLURM_NODEID is not set)}
nodes=${SLURM_NNODES:?run me under srun (SLURM_NNODES is not set)}
dpl=${VLLM_DP_LOCAL:-1}
port=${VLLM_DP_PORT:-13345}
head=${VLLM_HEAD_ADDRESS:-}
if [[ -z $head ]]; then
  # awk, not head: head exits at the first line and scontrol's SIGPIPE would fail the
  # pipeline (pipefail) on a job with many nodes.
  first=$(scontrol show hostnames "${SLURM_JOB_NODELIST:?}" | awk 'NR == 1')
  head=$(getent ahostsv4 "$first" | awk 'NR == 1 { print $1 }')
  [[ -n $head ]] || { echo "slurm_dp_node.sh: cannot resolve the head node '$first'" >&2; exit 2; }
fi
args=(-dp $((dpl * nodes)) -dpl "$dpl" -dpa "$head" -dpp "$port")
if ((node > 0)); then args+=(-dpr $((node * dpl)) --headless); fi
exec "${VLLM_LAUNCH:-vllm-launch}" "${args[@]}" "$@"
