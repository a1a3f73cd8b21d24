// Two "nodes" for multi-node tests: network namespaces joined by a veth pair, with private
// addresses that exist only inside them (TOOLCHAIN.md). Needs root and iproute2's `ip`;
// Create() says why not otherwise, so a test can skip with that message.
//
// The namespaces are named vllm-<pid>-<n>-{a,b} and removed by the destructor, also when the
// test failed; processes started in them must be stopped first (a namespace with a living
// process stays until that process ends, though its name is gone). Not thread-safe.
#ifndef VLLM_TESTS_SUPPORT_NETNS_H_
#define VLLM_TESTS_SUPPORT_NETNS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vllm::testing {

class NetnsPair {
 public:
  // Creates both namespaces (loopback up in each), the veth pair between them and the
  // addresses. FailedPrecondition when not root or `ip` is missing; Internal when a step
  // fails (whatever was made is removed again).
  static absl::StatusOr<std::unique_ptr<NetnsPair>> Create();
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  const std::string& name_a() const { return a_; }
  const std::string& name_b() const { return b_; }
  // Node A's and node B's address on the link (10.213.<n>.1 and .2).
  const std::string& address_a() const { return addr_a_; }
  const std::string& address_b() const { return addr_b_; }

  // `argv` run inside node A / B: `ip netns exec NS argv...`, which execs in place, so the
  // pid of a process spawned with it is the command's.
  std::vector<std::string> InA(const std::vector<std::string>& argv) const;
  std::vector<std::string> InB(const std::vector<std::string>& argv) const;

  // Takes the link down or up (a network partition between the nodes).
  absl::Status SetLinkUp(bool up);

 private:
  NetnsPair() = default;
  std::string a_, b_, addr_a_, addr_b_;
};

// Runs `argv` to completion (stdin closed, output discarded); its exit status or an error.
absl::StatusOr<int> RunQuietly(const std::vector<std::string>& argv);

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_NETNS_H_
