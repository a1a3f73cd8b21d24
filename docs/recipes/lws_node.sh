#!/usr/bin/env bash
# vLLM 0.33's multi-node flags from a Kubernetes LeaderWorkerSet group: the command of the
# leader and of every worker pod (docs/MULTINODE.md has the manifest).
#
# Adds --nnodes LWS_GROUP_SIZE --node-rank LWS_WORKER_INDEX --master-addr <leader's IP>
# --master-port PORT, and --headless on the workers; the leader (index 0) is the head. The
# parallel sizes are the arguments' (see slurm_node.sh). Environment (LWS sets the first three):
#   LWS_LEADER_ADDRESS  the leader's address (a DNS name or an IP)
#   LWS_GROUP_SIZE      pods in the group
#   LWS_WORKER_INDEX    this pod's index (0: the leader)
#   VLLM_MASTER_PORT    --master-port (default 29501)
#   VLLM_LAUNCH         the vllm-launch binary (default: vllm-launch on PATH)
# Tested by tests/multinode/multinode_pp_test.cc (two network-namespace "nodes").
set -euo pipefail
leader=${LWS_LEADER_ADDRESS:?LWS_LEADER_ADDRESS is not set (run me in a LeaderWorkerSet pod)}
size=${LWS_GROUP_SIZE:?LWS_GROUP_SIZE is not set}
index=${LWS_WORKER_INDEX:?LWS_WORKER_INDEX is not set}
port=${VLLM_MASTER_PORT:-29501}
# The head binds its sockets at this address: the leader's IP, not a name.
head=$(getent ahostsv4 "$leader" | awk 'NR == 1 { print $1 }')
[[ -n $head ]] || { echo "lws_node.sh: cannot resolve LWS_LEADER_ADDRESS '$leader'" >&2; exit 2; }
args=(--nnodes "$size" --node-rank "$index" --master-addr "$head" --master-port "$port")
if ((index > 0)); then args+=(--headless); fi
exec "${VLLM_LAUNCH:-vllm-launch}" "$@" "${args[@]}"
