// Private ipc:// endpoints: Unix socket files in a directory of this process that only its user
// can enter, removed as soon as the peers have connected.
//
// Why not abstract sockets ("ipc://@name")? The abstract namespace has no permissions: every
// process on the host (any user, listed in /proc/net/unix) can connect, and one forged frame on
// an engine's output socket used to make the API server answer 503 for ever. A socket file in a
// 0700 directory can be reached only by its owner (and root).
//
// Lifecycle, per process:
//  - UniqueIpcAddress() makes the directory on first use:
//      <base>/vllm-ipc-<pid>-XXXXXX   (mkdtemp, then chmod 0700)
//    <base> is $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp — the first that is an absolute path
//    short enough for the 107-byte sun_path limit — and returns
//      ipc://<base>/vllm-ipc-<pid>-XXXXXX/<tag>-<n>
//  - The owner binds a ZMQ socket there, hands the address to its peers and, once every peer
//    has connected (proved by a message or an accept event, never assumed), calls
//    ReleaseIpcAddress(): the file is unlinked; established connections are unaffected.
//    When the last address of the directory is released the directory is removed, so a
//    running server leaves no file behind and a kill -9 after start-up leaves nothing.
//  - At normal exit (atexit) whatever is left is removed.
//  - A kill -9 during start-up (before the peers connected) leaves the directory and its
//    socket files; the next process of the same user that makes an endpoint directory in the
//    same <base> removes it (RemoveStaleIpcDirs: its pid is gone and nobody listens).
//
// Nothing may connect to a released address. ZMQ reconnects by itself only after a connection
// drops; a Unix socket connection between two live local processes does not drop (there is no
// network in between, and we set no heartbeat timeout on ipc:// sockets), and when a peer
// process dies we fail over to an error path, never to a reconnect. So unlinking after the
// connection is established never strands a live peer.
//
// Thread-safety: all functions are thread-safe. A forked child that does not exec gets its own
// directory on its first UniqueIpcAddress() and never touches its parent's.
#ifndef VLLM_IPC_IPC_ADDRESS_H_
#define VLLM_IPC_IPC_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vllm::ipc {

// A new "ipc://<private dir>/<tag>-<n>" address for a socket this process will bind. `tag`
// ([A-Za-z0-9_-], at most 16 characters are used) names its role. Unavailable when the
// directory cannot be made (no writable base directory).
[[nodiscard]] absl::StatusOr<std::string> UniqueIpcAddress(absl::string_view tag);

// Unlinks the socket file of `address` (from UniqueIpcAddress of this process) and, when it was
// the directory's last, the directory. Connections already made stay up; nothing new can
// connect. Idempotent; addresses this process did not make are ignored.
void ReleaseIpcAddress(absl::string_view address);

// Owns one UniqueIpcAddress: releases it on Release() or destruction. Movable.
class ScopedIpcAddress {
 public:
  ScopedIpcAddress() = default;
  [[nodiscard]] static absl::StatusOr<ScopedIpcAddress> Create(absl::string_view tag);
  ScopedIpcAddress(ScopedIpcAddress&& other) noexcept;
  ScopedIpcAddress& operator=(ScopedIpcAddress&& other) noexcept;
  ScopedIpcAddress(const ScopedIpcAddress&) = delete;
  ScopedIpcAddress& operator=(const ScopedIpcAddress&) = delete;
  ~ScopedIpcAddress() { Release(); }

  // The address; still readable after Release().
  const std::string& address() const { return address_; }
  // ReleaseIpcAddress(address()). Idempotent.
  void Release();

 private:
  explicit ScopedIpcAddress(std::string address) : address_(std::move(address)) {}
  std::string address_;
  bool owned_ = false;
};

// The base directory this process puts its endpoint directory in (see above), from the
// environment at the time of the call.
std::string IpcEndpointBaseDir();

// Removes endpoint directories in `base` left by processes of this user that died before their
// peers connected: named vllm-ipc-<pid>-*, owned by us, <pid> not alive, and every entry a
// socket nobody listens on (an empty one only when older than a minute). Best effort.
void RemoveStaleIpcDirs(const std::string& base);

}  // namespace vllm::ipc

#endif  // VLLM_IPC_IPC_ADDRESS_H_
