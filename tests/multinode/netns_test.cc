// The multi-node test rig itself (tests/support/netns.h): two namespaces reach each other over
// their veth link and nothing else reaches them; a downed link is a partition; nothing is left
// behind (`ip netns list` shows neither). Skips, saying why, when not root.
#include "tests/support/netns.h"

#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace vllm::testing {
namespace {

// A one-shot TCP server on host:port that prints "ready" and then greets its first client.
std::vector<std::string> Greeter(const std::string& host, int port) {
  return {"/usr/bin/python3", "-c",
          absl::StrCat("import socket\n", "s = socket.socket()\n",
                       "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n", "s.bind(('",
                       host, "', ", port, "))\n", "s.listen(1)\n", "print('ready', flush=True)\n",
                       "c, _ = s.accept()\n", "c.sendall(b'hello from a\\n')\n", "c.close()\n")};
}

// Connects to host:port within `timeout_s` and prints the first line received; exits 1 when
// it cannot connect.
std::vector<std::string> Client(const std::string& host, int port, double timeout_s) {
  return {"/usr/bin/python3", "-c",
          absl::StrCat("import socket, sys\n", "try:\n", "  c = socket.create_connection(('", host,
                       "', ", port, "), timeout=", timeout_s, ")\n", "except OSError:\n",
                       "  sys.exit(1)\n", "print(c.makefile().readline().strip(), flush=True)\n")};
}

std::string NetnsList() {
  auto p = Subprocess::Spawn({"/usr/sbin/ip", "netns", "list"});
  std::string out;
  if (!p.ok()) return out;
  while (true) {
    auto line = p->ReadLine(absl::Seconds(5));
    if (!line.ok()) break;
    absl::StrAppend(&out, *line, "\n");
  }
  (void)p->Wait(absl::Seconds(5));
  return out;
}

TEST(NetnsTest, TwoNodesTalkOverTheirLinkOnly) {
  std::string a_name, b_name;
  {
    auto pair = NetnsPair::Create();
    if (absl::IsFailedPrecondition(pair.status())) GTEST_SKIP() << pair.status().message();
    ASSERT_TRUE(pair.ok()) << pair.status();
    NetnsPair& p = **pair;
    a_name = p.name_a();
    b_name = p.name_b();

    auto server = Subprocess::Spawn(p.InA(Greeter(p.address_a(), 5555)));
    ASSERT_TRUE(server.ok()) << server.status();
    auto ready = server->ReadLine(absl::Seconds(20));
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_EQ(*ready, "ready");

    // The test's own namespace has no route to the nodes' network.
    EXPECT_EQ(RunQuietly(Client(p.address_a(), 5555, 1.0)).value_or(-1), 1);

    // Node B reaches node A over the link.
    auto client = Subprocess::Spawn(p.InB(Client(p.address_a(), 5555, 10.0)));
    ASSERT_TRUE(client.ok()) << client.status();
    auto greeting = client->ReadLine(absl::Seconds(20));
    ASSERT_TRUE(greeting.ok()) << greeting.status();
    EXPECT_EQ(*greeting, "hello from a");
    EXPECT_TRUE(server->Wait(absl::Seconds(10)).ok());
    EXPECT_TRUE(client->Wait(absl::Seconds(10)).ok());

    // A downed link is a partition: B cannot connect to A.
    ASSERT_TRUE(p.SetLinkUp(false).ok());
    EXPECT_EQ(RunQuietly(p.InB(Client(p.address_a(), 5555, 1.0))).value_or(-1), 1);
    ASSERT_TRUE(p.SetLinkUp(true).ok());
    EXPECT_NE(NetnsList().find(a_name), std::string::npos);
  }
  // Both namespaces are gone with the pair.
  const std::string left = NetnsList();
  EXPECT_EQ(left.find(a_name), std::string::npos) << left;
  EXPECT_EQ(left.find(b_name), std::string::npos) << left;
}

}  // namespace
}  // namespace vllm::testing
