// The frames between a multi-node engine's head and its worker nodes (`--nnodes N`): node 0's
// MultiprocExecutor binds a ROUTER on --master-addr:--master-port (CURVE with the cluster key
// when one is given); every other node (`vllm-launch ... --node-rank r --headless`) connects a
// DEALER and runs its block of worker ranks (vLLM does this through torch.distributed's
// TCPStore on the same address; our own handshake carries what its workers need instead).
//
//   worker node                                   head (MultiprocExecutor)
//   HELLO [node rank, --nnodes, sizes, address] ─►  checks them against its own flags
//                         ◄─ CONFIG [engine config, broadcast handle, ready address, group specs,
//                                    timeouts]  or  REJECT [the flag, why]
//   spawns its ranks (worker-proc), which attach to the broadcast over TCP and report ready
//   to the head themselves
//   HEARTBEAT ◄──────────────────────────────────► HEARTBEAT   (each side, every interval)
//   WORKER_EXITED [rank, how] ─►                     fails the engine, naming rank and node
//                         ◄─ STOP [why]             the engine ended: stop the ranks
//
// Wire form: one msgpack array per ZMQ message, [kind:str, version:uint, fields...] with the
// fields in the order of the structs below. Decoding is bounded (kMaxNodeFrameBytes; every
// string and list has a limit below) and never throws; a frame of another protocol version
// is refused by name, so mixed vllm-launch builds fail at the handshake, not later.
#ifndef VLLM_EXECUTOR_NODE_PROTOCOL_H_
#define VLLM_EXECUTOR_NODE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::executor {

inline constexpr uint32_t kNodeProtocolVersion = 1;
// A whole frame (the CONFIG frame is the largest: the encoded config, ≤ 16 KiB, a handle and
// one group spec per pipeline stage).
inline constexpr size_t kMaxNodeFrameBytes = 256 * 1024;
inline constexpr size_t kMaxNodeAddressBytes = 255;  // host names and ZMQ endpoints' hosts
inline constexpr size_t kMaxNodeTextBytes = 4096;    // model path, handle, endpoints, messages
inline constexpr size_t kMaxNodeCommSpecs = 64;      // one per pipeline stage

// "hello": a worker node asks to join. Sizes are its own flags, for the head to compare.
struct NodeHello {
  int32_t node_rank = 0;  // --node-rank, 1 .. 1023
  int32_t nnodes = 0;     // --nnodes, 1 .. 1024
  int32_t tensor_parallel_size = 0;
  int32_t pipeline_parallel_size = 0;
  int32_t data_parallel_size = 0;
  std::string model;         // --model as given on that node (≤ kMaxNodeTextBytes)
  std::string node_address;  // the address other nodes reach it at (1 .. kMaxNodeAddressBytes)
  int64_t pid = 0;           // of the node's vllm-launch process (for logs), > 0
  friend bool operator==(const NodeHello&, const NodeHello&) = default;
};

// "config": what the node's worker processes need.
struct NodeConfig {
  std::string engine_config;     // config::EncodeVllmConfig, ≤ config::kMaxEncodedConfigBytes
  std::string broadcast_handle;  // ipc::Handle::ToText(), 1 .. kMaxNodeTextBytes
  std::string ready_address;     // tcp:// endpoint the workers PUSH ready messages to
  // Per pipeline stage, its TP group's kernels::comm::CommGroupSpec::Encode() (empty strings
  // for TP 1); 1 .. kMaxNodeCommSpecs entries, each ≤ kMaxNodeTextBytes.
  std::vector<std::string> comm_specs;
  int64_t startup_timeout_ms = 0;     // 1 .. 86'400'000
  int64_t heartbeat_interval_ms = 0;  // 1 .. 86'400'000
  int64_t heartbeat_timeout_ms = 0;   // 1 .. 86'400'000
  friend bool operator==(const NodeConfig&, const NodeConfig&) = default;
};

// "reject": the head refuses the node; `flag` names the flag to fix ("--nnodes").
struct NodeReject {
  std::string flag;     // ≤ kMaxNodeAddressBytes
  std::string message;  // ≤ kMaxNodeTextBytes
  friend bool operator==(const NodeReject&, const NodeReject&) = default;
};

// "heartbeat": no fields.
struct NodeHeartbeat {
  friend bool operator==(const NodeHeartbeat&, const NodeHeartbeat&) = default;
};

// "worker_exited": one of the node's ranks ended (how: "exited with status 1", "killed by
// signal 9").
struct NodeWorkerExited {
  int32_t rank = 0;  // 0 .. 65535
  std::string how;   // ≤ kMaxNodeTextBytes
  friend bool operator==(const NodeWorkerExited&, const NodeWorkerExited&) = default;
};

// "stop": the engine is ending (or failed); the node stops its ranks.
struct NodeStop {
  std::string reason;  // ≤ kMaxNodeTextBytes
  friend bool operator==(const NodeStop&, const NodeStop&) = default;
};

using NodeMessage =
    std::variant<NodeHello, NodeConfig, NodeReject, NodeHeartbeat, NodeWorkerExited, NodeStop>;

std::string EncodeNodeMessage(const NodeMessage& message);
// InvalidArgument for a malformed frame (naming the message and field), a value outside its
// bounds, or a frame over kMaxNodeFrameBytes; FailedPrecondition for another protocol version
// ("node protocol version 2, this vllm-launch speaks 1: run the same build on every node").
[[nodiscard]] absl::StatusOr<NodeMessage> DecodeNodeMessage(std::string_view bytes);
// "hello", "config", ... (for logs).
std::string_view NodeMessageKind(const NodeMessage& message);

}  // namespace vllm::executor

#endif  // VLLM_EXECUTOR_NODE_PROTOCOL_H_
