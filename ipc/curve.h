// CURVE authentication and encryption for the ZMQ TCP sockets between the nodes of one cluster.
//
// Model: one cluster secret key, in a file that every node of the cluster has (mode 0600, like
// an ssh private key). Every process derives the same keypair from it. A TCP server socket
// (MakeCurveServer) uses that keypair and accepts only clients that prove they hold the same
// secret, i.e. whose CURVE public key is the cluster public key; a client (MakeCurveClient)
// uses the same keypair and expects the server to have it too. So the key both encrypts the
// traffic and keeps out every peer that does not have the file.
//
// Authentication, not just encryption: libzmq's CURVE server on its own accepts any client
// that knows the server's *public* key. The client's key is checked by a ZAP handler, which
// MakeCurveServer starts once per process (a thread serving inproc://zeromq.zap.01 on
// ZmqContext(), named "vllm-zap", stopped and joined at exit). It accepts a CURVE client exactly
// when its public key is the one named in the server socket's ZAP domain ("vllm-curve/<server
// public key>"), and refuses everything else. Without a ZAP handler libzmq would let everyone in,
// so the handler is running before any CURVE server socket is configured.
//
// Key file format: text; lines starting with '#' are comments; exactly one other non-empty
// line, the 32-byte secret key in Z85 (40 characters). At most 4 KiB. CreateCurveKeyFile writes
// one. The secret key is never logged and never put in a handle.
//
// Requires libzmq built with CURVE (libsodium): Debian's is. Every function fails with
// FailedPrecondition naming the problem when it is not (zmq_has("curve")).
//
// Thread-safety: all functions are thread-safe; a socket is configured by the thread that
// owns it, before bind()/connect().
#ifndef VLLM_IPC_CURVE_H_
#define VLLM_IPC_CURVE_H_

#include <string>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vllm::ipc {

// A CURVE keypair in Z85 (40 characters each).
struct CurveKeys {
  std::string public_key;
  std::string secret_key;  // keep out of logs, handles and argv

  bool operator==(const CurveKeys&) const = default;
};

// OK when this libzmq supports CURVE; FailedPrecondition otherwise.
[[nodiscard]] absl::Status CheckCurveSupported();

// A fresh random keypair.
[[nodiscard]] absl::StatusOr<CurveKeys> GenerateCurveKeys();

// The keypair of a Z85 secret key. InvalidArgument (without echoing the key) when it is not 40
// Z85 characters.
[[nodiscard]] absl::StatusOr<CurveKeys> CurveKeysFromSecret(absl::string_view z85_secret);

// Reads the cluster key file at `path` (format above). Errors name the file and never echo its
// content: NotFound / PermissionDenied when it cannot be opened; PermissionDenied when group or
// others may access it ("chmod 600"); FailedPrecondition when it is not a regular file or is
// owned by another user (root excepted); InvalidArgument when it is larger than 4 KiB or holds
// no, or more than one, or a malformed key.
[[nodiscard]] absl::StatusOr<CurveKeys> LoadCurveKeyFile(const std::string& path);

// Generates a cluster key and writes it to a new file `path`, mode 0600 (never overwrites:
// AlreadyExists). Returns the keys.
[[nodiscard]] absl::StatusOr<CurveKeys> CreateCurveKeyFile(const std::string& path);

// Makes `socket` a CURVE server with `keys` that accepts only clients holding the same keys
// (starts the process's ZAP handler first). Call before bind().
[[nodiscard]] absl::Status MakeCurveServer(zmq::socket_t& socket, const CurveKeys& keys);

// Makes `socket` a CURVE client with `keys`, expecting a server with the same keys. Call before
// connect().
[[nodiscard]] absl::Status MakeCurveClient(zmq::socket_t& socket, const CurveKeys& keys);

}  // namespace vllm::ipc

#endif  // VLLM_IPC_CURVE_H_
