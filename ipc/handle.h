// The serialisable description of a MessageQueue: everything a reader needs to attach, on this
// node (shared memory + ipc:// for oversize payloads) or on another node (tcp://, possibly
// CURVE-authenticated).
//
// Wire form: a msgpack array
//   ["vllm-mq", version:uint, n_readers:uint, local_reader_ranks:[int...], shm_name:str,
//    max_chunks:uint, max_chunk_bytes:uint, local_address:str, remote_address:str,
//    remote_curve:bool]
// Version 2 added remote_curve. A handle never carries key material.
// Text form (argv, environment): base64 of the wire form.
#ifndef VLLM_IPC_HANDLE_H_
#define VLLM_IPC_HANDLE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vllm::ipc {

struct Handle {
  static constexpr uint32_t kVersion = 2;

  uint32_t n_readers = 0;                   // all readers, ranks 0..n_readers-1
  std::vector<int32_t> local_reader_ranks;  // ranks reading through shared memory, in slot order
  std::string shm_name;                     // empty when there are no local readers
  uint64_t max_chunks = 0;
  uint64_t max_chunk_bytes = 0;
  std::string local_address;   // ZMQ ipc:// for oversize payloads; empty without local readers
  std::string remote_address;  // ZMQ tcp:// for readers on other nodes; empty without them
  // The remote socket accepts only CURVE clients holding the cluster key (curve.h).
  bool remote_curve = false;

  // Shared-memory slot of `rank`, or -1 if the rank reads remotely.
  int LocalIndex(int32_t rank) const;

  std::string Encode() const;
  // Rejects malformed, oversized or inconsistent handles with InvalidArgument/DataLoss.
  [[nodiscard]] static absl::StatusOr<Handle> Decode(absl::string_view bytes);
  std::string ToText() const;
  [[nodiscard]] static absl::StatusOr<Handle> FromText(absl::string_view text);

  bool operator==(const Handle&) const = default;
};

}  // namespace vllm::ipc

#endif  // VLLM_IPC_HANDLE_H_
