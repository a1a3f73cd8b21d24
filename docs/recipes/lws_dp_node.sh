#!/usr/bin/env bash
# Data parallelism across the pods of a Kubernetes LeaderWorkerSet group: the command of the
# leader and of every worker (docs/MULTINODE.md has the manifest).
#
# The leader (LWS_WORKER_INDEX 0) is the head: API server and replicas 0 .. DPL-1; worker k
# runs replicas k*DPL .. as --headless. Arguments are passed on to vllm-launch. Environment
# (LWS sets the first three in every pod of the group):
#   LWS_LEADER_ADDRESS  the leader's address (a DNS name or an IP)
#   LWS_GROUP_SIZE      pods in the group
#   LWS_WORKER_INDEX    this pod's index (0: the leader)
#   VLLM_DP_LOCAL       replicas per pod (-dpl; default 1)
#   VLLM_DP_PORT        the head's --data-parallel-rpc-port (default 13345)
#   VLLM_LAUNCH         the vllm-launch binary (default: vllm-launch on PATH)
# Tested by tests/multinode/multinode_dp_test.cc (two network-namespace "nodes").
set -euo pipefail
leader=${LWS_LEADER_ADDRESS:?LWS_LEADER_ADDRESS is not set (run me in a LeaderWorkerSet pod)}
size=${LWS_GROUP_SIZE:?LWS_GROUP_SIZE is not set}
index=${LWS_WORKER_INDEX:?LWS_WORKER_INDEX is not set}
dpl=${VLLM_DP_LOCAL:-1}
port=${VLLM_DP_PORT:-13345}
# The head binds its sockets at this address, so the leader needs its own IP, not a name
# that may resolve elsewhere first.
head=$(getent ahostsv4 "$leader" | awk 'NR == 1 { print $1 }')
[[ -n $head ]] || { echo "lws_dp_node.sh: cannot resolve LWS_LEADER_ADDRESS '$leader'" >&2; exit 2; }
args=(-dp $((dpl * size)) -dpl "$dpl" -dpa "$head" -dpp "$port")
if ((index > 0)); then args+=(-dpr $((index * dpl)) --headless); fi
exec "${VLLM_LAUNCH:-vllm-launch}" "${args[@]}" "$@"
