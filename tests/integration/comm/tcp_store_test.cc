// kernels/comm/tcp_store.h in one process: the StoreServer and TcpStoreClient (set/get/wait,
// deadlines and their messages, every bound, garbage from clients, CURVE admission), and the
// group API's tcp:// rendezvous (CommGroupSpec names, CommGroup::Create with a store_host,
// JoinGroup's errors). The all-reduce through a tcp:// store between processes is in
// comm_process_test.
#include "kernels/comm/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"
#include "kernels/comm/group_spec.h"

namespace vllm::kernels::comm {
namespace {

using Backend = CommGroupSpec::Backend;
using Limits = TcpStoreLimits;

std::unique_ptr<StoreServer> StartServer(const std::optional<ipc::CurveKeys>& curve = {}) {
  auto server = StoreServer::Start("127.0.0.1", curve);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<TcpStoreClient> Client(const std::string& address, absl::Duration timeout,
                                       const std::optional<ipc::CurveKeys>& curve = {}) {
  auto client = TcpStoreClient::Connect(address, curve, timeout);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::vector<char> Bytes(absl::string_view s) { return std::vector<char>(s.begin(), s.end()); }

// Runs `f`, which must throw gloo::IoException; returns its message ("" if it did not throw).
template <typename F>
std::string Thrown(F&& f) {
  try {
    f();
  } catch (const gloo::IoException& e) {
    return e.what();
  }
  ADD_FAILURE() << "no gloo::IoException";
  return "";
}

// A DEALER speaking the store's protocol frame by frame, for requests TcpStoreClient never
// sends. Request() returns the reply's frames, or {"<no reply>"} after 5 s.
class RawClient {
 public:
  explicit RawClient(const std::string& address)
      : socket_(ipc::ZmqContext(), zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(address);
  }
  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      (void)socket_.send(zmq::buffer(frames[i]),
                         i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  std::vector<std::string> Request(const std::vector<std::string>& frames) {
    Send(frames);
    std::vector<zmq::message_t> parts;
    absl::Status st =
        ipc::RecvMultipart(socket_, parts, 100, ipc::MonoDeadline(absl::Now() + absl::Seconds(5)),
                           absl::Milliseconds(50), nullptr, "store reply");
    if (!st.ok()) return {"<no reply>"};
    std::vector<std::string> out;
    for (const zmq::message_t& p : parts) out.push_back(p.to_string());
    return out;
  }
  // [seq "s"] [op] [args...]: the reply after its seq frame.
  std::vector<std::string> Op(std::vector<std::string> frames) {
    frames.insert(frames.begin(), "s");
    std::vector<std::string> reply = Request(frames);
    EXPECT_FALSE(reply.empty());
    if (!reply.empty()) {
      EXPECT_EQ(reply[0], "s");
      reply.erase(reply.begin());
    }
    return reply;
  }

 private:
  zmq::socket_t socket_;
};

bool IsError(const std::vector<std::string>& reply, absl::string_view text) {
  return reply.size() == 2 && reply[0] == "error" && absl::StrContains(reply[1], text);
}

TEST(TcpStoreTest, SetGetWait) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(absl::StartsWith(server->address(), "tcp://127.0.0.1:")) << server->address();
  auto a = Client(server->address(), absl::Seconds(10));
  auto b = Client(server->address(), absl::Seconds(10));
  ASSERT_TRUE(a && b);
  a->set("k", Bytes("v1"));
  EXPECT_EQ(b->get("k"), Bytes("v1"));
  a->set("k", Bytes("v2"));  // overwrites
  EXPECT_EQ(b->get("k"), Bytes("v2"));
  a->set("empty", {});
  EXPECT_EQ(b->get("empty"), std::vector<char>());
  std::string binary("\0\xff\n;x", 5);
  a->set(binary, Bytes(binary));
  EXPECT_EQ(b->get(binary), Bytes(binary));
  b->wait({"k", "empty", binary});
  b->wait({"k"}, std::chrono::milliseconds(1000));
  // More keys than one CHECK carries: the client splits them.
  std::vector<std::string> many;
  for (int i = 0; i < 150; ++i) many.push_back(absl::StrCat("key", i));
  for (const std::string& k : many) a->set(k, Bytes(k));
  b->wait(many);
}

// A host name is bound at the address it resolves to (IPv4 preferred); wildcards are refused.
TEST(TcpStoreTest, BindsTheAddressOfAHostName) {
  auto server = StoreServer::Start("localhost");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(absl::StartsWith((*server)->address(), "tcp://127.0.0.1:")) << (*server)->address();
  for (const char* wildcard : {"", "*", "0.0.0.0", "::"}) {
    EXPECT_EQ(StoreServer::Start(wildcard).status().code(), absl::StatusCode::kInvalidArgument)
        << wildcard;
  }
}

// get() and wait() return once another client sets the keys.
TEST(TcpStoreTest, GetAndWaitReturnOnceSet) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto setter = Client(server->address(), absl::Seconds(10));
  auto waiter = Client(server->address(), absl::Seconds(10));
  ASSERT_TRUE(setter && waiter);
  std::vector<char> got;
  std::string error;
  std::thread t([&] {
    try {
      waiter->wait({"x", "y"});
      got = waiter->get("y");
    } catch (const gloo::IoException& e) {
      error = e.what();
    }
  });
  setter->set("x", Bytes("1"));
  setter->set("y", Bytes("2"));
  t.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, Bytes("2"));
}

TEST(TcpStoreTest, TimeoutNamesTheStoreAndTheKeys) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = Client(server->address(), absl::Milliseconds(300));
  ASSERT_NE(client, nullptr);
  client->set("there", Bytes("1"));
  const absl::Time start = absl::Now();
  std::string what = Thrown([&] { client->wait({"there", "absent-1", "absent-2"}); });
  EXPECT_TRUE(absl::StartsWith(what, "timed out")) << what;
  EXPECT_TRUE(absl::StrContains(what, server->address())) << what;
  EXPECT_TRUE(absl::StrContains(what, "'absent-1', 'absent-2'")) << what;
  EXPECT_FALSE(absl::StrContains(what, "'there'")) << what;
  EXPECT_FALSE(absl::StrContains(what, "did not answer")) << what;
  what = Thrown([&] { client->get("absent-3"); });
  EXPECT_TRUE(absl::StartsWith(what, "timed out")) << what;
  EXPECT_TRUE(absl::StrContains(what, "'absent-3'")) << what;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));

  // wait()'s own timeout, shorter than the client's deadline.
  auto patient = Client(server->address(), absl::Seconds(60));
  ASSERT_NE(patient, nullptr);
  const absl::Time before = absl::Now();
  what = Thrown([&] { patient->wait({"absent-4"}, std::chrono::milliseconds(100)); });
  EXPECT_TRUE(absl::StartsWith(what, "timed out")) << what;
  EXPECT_LT(absl::Now() - before, absl::Seconds(3));
  EXPECT_GE(absl::Now() - before, absl::Milliseconds(100));
}

// A server that is gone: the client's deadline ends every call, saying the store did not answer.
TEST(TcpStoreTest, UnreachableStoreSaysSo) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  const absl::Time stopping = absl::Now();
  server.reset();
  EXPECT_LT(absl::Now() - stopping, absl::Milliseconds(500)) << "destructor is slow";
  auto client = Client(address, absl::Milliseconds(200));
  ASSERT_NE(client, nullptr);
  std::string what = Thrown([&] { client->set("k", Bytes("v")); });
  EXPECT_TRUE(absl::StartsWith(what, "timed out")) << what;
  EXPECT_TRUE(absl::StrContains(what, address)) << what;
  EXPECT_TRUE(absl::StrContains(what, "did not answer")) << what;
  EXPECT_TRUE(absl::StrContains(what, "'k'")) << what;
  what = Thrown([&] { client->get("k"); });
  EXPECT_TRUE(absl::StrContains(what, "did not answer")) << what;
  EXPECT_FALSE(TcpStoreClient::Connect("/tmp/dir", std::nullopt, absl::Seconds(1)).ok());
}

TEST(TcpStoreTest, EveryBoundIsRefused) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  RawClient raw(server->address());
  const std::string max_key(Limits::kMaxKeyBytes, 'k');
  const std::string long_key(Limits::kMaxKeyBytes + 1, 'k');
  const std::string max_value(Limits::kMaxValueBytes, 'v');
  const std::string long_value(Limits::kMaxValueBytes + 1, 'v');
  EXPECT_EQ(raw.Op({"SET", max_key, max_value}), std::vector<std::string>{"ok"});
  EXPECT_EQ(raw.Op({"GET", max_key}), (std::vector<std::string>{"value", max_value}));
  EXPECT_TRUE(IsError(raw.Op({"SET", long_key, "v"}), "key of 257 bytes"));
  EXPECT_TRUE(IsError(raw.Op({"SET", "k", long_value}), "value of 65537 bytes"));
  EXPECT_TRUE(IsError(raw.Op({"SET", "", "v"}), "empty key"));
  EXPECT_TRUE(IsError(raw.Op({"GET", long_key}), "key of 257"));
  EXPECT_TRUE(IsError(raw.Op({"CHECK", "a", long_key}), "key of 257"));
  EXPECT_TRUE(IsError(raw.Op({"SET", "k"}), "SET takes"));
  EXPECT_TRUE(IsError(raw.Op({"SET", "k", "v", "w"}), "SET takes"));
  EXPECT_TRUE(IsError(raw.Op({"GET"}), "GET takes"));
  EXPECT_TRUE(IsError(raw.Op({"GET", "a", "b"}), "GET takes"));
  EXPECT_TRUE(IsError(raw.Op({"CHECK"}), "CHECK takes"));
  std::vector<std::string> check = {"CHECK"};
  for (size_t i = 0; i < Limits::kMaxCheckKeys; ++i) check.push_back(absl::StrCat("c", i));
  EXPECT_EQ(raw.Op(check).size(), 1 + Limits::kMaxCheckKeys);  // "missing" and every key
  check.push_back("one-too-many");
  EXPECT_TRUE(IsError(raw.Op(check), "more than"));
  EXPECT_TRUE(IsError(raw.Op({"DELETE", "k"}), "unknown op"));
  EXPECT_TRUE(IsError(raw.Op({""}), "unknown op"));
  // A seq over 8 bytes, a lone seq, an empty request: an error with an empty seq.
  EXPECT_EQ(raw.Request({"123456789", "GET", "k"})[0], "");
  EXPECT_EQ(raw.Request({"123456789", "GET", "k"})[1], "error");
  EXPECT_EQ(raw.Request({"s"}),
            (std::vector<std::string>{
                "s", "error", "malformed request: expected [seq (<= 8 bytes)] [op] [args...]"}));
  EXPECT_EQ(raw.Request({""})[1], "error");

  // The key count: up to kMaxKeys (one is there already), then only overwrites.
  for (size_t i = 1; i < Limits::kMaxKeys; ++i) {
    ASSERT_EQ(raw.Op({"SET", absl::StrCat("n", i), "v"}), std::vector<std::string>{"ok"}) << i;
  }
  EXPECT_TRUE(IsError(raw.Op({"SET", "one-more", "v"}), "store full (4096 keys)"));
  EXPECT_EQ(raw.Op({"SET", "n1", "again"}), std::vector<std::string>{"ok"});
  EXPECT_EQ(raw.Op({"GET", "n1"}), (std::vector<std::string>{"value", "again"}));

  // The client refuses the same bounds itself, and reports the server's refusals.
  auto client = Client(server->address(), absl::Seconds(10));
  ASSERT_NE(client, nullptr);
  std::string what = Thrown([&] { client->set(long_key, Bytes("v")); });
  EXPECT_TRUE(absl::StrContains(what, "refused SET")) << what;
  EXPECT_TRUE(absl::StrContains(what, server->address())) << what;
  what = Thrown([&] { client->set("k", Bytes(long_value)); });
  EXPECT_TRUE(absl::StrContains(what, "value of 65537 bytes")) << what;
  what = Thrown([&] { client->set("another-key", Bytes("v")); });
  EXPECT_TRUE(absl::StrContains(what, "store full")) << what;
  EXPECT_TRUE(absl::StrContains(what, "'another-key'")) << what;
  EXPECT_FALSE(absl::StartsWith(what, "timed out")) << what;
  what = Thrown([&] { client->get(""); });
  EXPECT_TRUE(absl::StrContains(what, "empty key")) << what;
}

// Bytes that are not ZMTP, and frames over the size limit, cost their sender its connection;
// the server keeps serving everyone else.
TEST(TcpStoreTest, GarbageDoesNotStopTheServer) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(server->address().substr(server->address().rfind(':') + 1), &port));
  for (const std::string& junk :
       {std::string("GET k\r\n\r\n"), std::string(100000, '\xff'),
        std::string("\xff\0\0\0\0\0\0\0\x01\x7f", 10) + std::string(64, '\x03')}) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    (void)send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    close(fd);
  }
  RawClient big(server->address());  // no reply comes: the server drops the connection
  big.Send({"s", "SET", "k", std::string(Limits::kMaxFrameBytes + 1, 'v')});
  auto client = Client(server->address(), absl::Seconds(10));
  ASSERT_NE(client, nullptr);
  client->set("still", Bytes("serving"));
  EXPECT_EQ(client->get("still"), Bytes("serving"));
}

// With the cluster key the server admits only clients holding it.
TEST(TcpStoreTest, CurveAdmitsOnlyTheClusterKey) {
  auto cluster = ipc::GenerateCurveKeys();
  auto stranger = ipc::GenerateCurveKeys();
  ASSERT_TRUE(cluster.ok() && stranger.ok());
  auto server = StartServer(*cluster);
  ASSERT_NE(server, nullptr);
  auto member = Client(server->address(), absl::Seconds(10), *cluster);
  ASSERT_NE(member, nullptr);
  member->set("k", Bytes("secret"));
  EXPECT_EQ(member->get("k"), Bytes("secret"));
  for (const std::optional<ipc::CurveKeys>& keys :
       {std::optional<ipc::CurveKeys>(*stranger), std::optional<ipc::CurveKeys>()}) {
    auto outsider = Client(server->address(), absl::Milliseconds(300), keys);
    ASSERT_NE(outsider, nullptr);
    const std::string what = Thrown([&] { (void)outsider->get("k"); });
    EXPECT_TRUE(absl::StartsWith(what, "timed out")) << what;
    EXPECT_TRUE(absl::StrContains(what, "did not answer")) << what;
    EXPECT_FALSE(absl::StrContains(what, "secret")) << what;
  }
}

TEST(TcpStoreGroupTest, SpecAcceptsStoreAddresses) {
  for (const std::string name :
       {"tcp://127.0.0.1:1", "tcp://10.1.2.3:65535", "tcp://node-7.cluster.local:29500",
        "tcp://[::1]:5555", "tcp://[fe80::1:2]:80"}) {
    const CommGroupSpec spec{Backend::kGloo, 4, name};
    auto back = CommGroupSpec::Decode(spec.Encode());
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(*back, spec);
  }
  for (const std::string& name : std::vector<std::string>{
           "tcp://", "tcp://127.0.0.1", "tcp://127.0.0.1:", "tcp://127.0.0.1:0",
           "tcp://127.0.0.1:65536", "tcp://127.0.0.1:0080", "tcp://127.0.0.1:+80",
           "tcp://127.0.0.1:8a", "tcp://:80", "tcp://a b:80", "tcp://a;b:80", "tcp://a/b:80",
           "tcp://::1:80", "tcp://[]:80", "tcp://[::1:80", "tcp://[::g]:80", "tcp://*:80",
           "tcp://" + std::string(254, 'a') + ":80", "udp://127.0.0.1:80"}) {
    auto spec = CommGroupSpec::Decode(absl::StrCat("vllm-comm/1;gloo;2;", name));
    EXPECT_FALSE(spec.ok()) << "accepted: " << name;
    if (!spec.ok()) {
      EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  // A shm group never has a tcp:// name.
  EXPECT_FALSE(CommGroupSpec::Decode("vllm-comm/1;shm;2;tcp://127.0.0.1:80").ok());
}

TEST(TcpStoreGroupTest, GroupRunsTheStoreUntilDestroyed) {
  CommGroupOptions options;
  options.store_host = "127.0.0.1";
  EXPECT_EQ(CommGroup::Create(Backend::kShm, 2, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.store_host = "0.0.0.0";
  EXPECT_EQ(CommGroup::Create(Backend::kGloo, 2, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.store_host = "127.0.0.1";
  auto group = CommGroup::Create(Backend::kGloo, 2, options);
  ASSERT_TRUE(group.ok()) << group.status();
  const CommGroupSpec spec = (*group)->spec();
  EXPECT_TRUE(absl::StartsWith(spec.name, "tcp://127.0.0.1:")) << spec.name;
  auto decoded = CommGroupSpec::Decode(spec.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, spec);
  {
    auto client = Client(spec.name, absl::Seconds(10));
    ASSERT_NE(client, nullptr);
    client->set("k", Bytes("v"));
  }
  group->reset();
  auto client = Client(spec.name, absl::Milliseconds(200));
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(absl::StrContains(Thrown([&] { client->set("k", Bytes("v")); }), "did not answer"));
}

// JoinGroup's errors with a tcp:// spec: a rank without the cluster key times out (and says
// the store did not answer); an unusable hostname is InvalidArgument.
TEST(TcpStoreGroupTest, JoinErrors) {
  auto cluster = ipc::GenerateCurveKeys();
  ASSERT_TRUE(cluster.ok());
  CommGroupOptions options;
  options.store_host = "127.0.0.1";
  options.curve = *cluster;
  auto group = CommGroup::Create(Backend::kGloo, 2, options);
  ASSERT_TRUE(group.ok()) << group.status();
  const CommGroupSpec spec = (*group)->spec();
  auto keyless = JoinGroup(spec, 0, absl::Milliseconds(300));
  ASSERT_FALSE(keyless.ok());
  EXPECT_EQ(keyless.status().code(), absl::StatusCode::kDeadlineExceeded) << keyless.status();
  EXPECT_TRUE(absl::StrContains(keyless.status().message(), "did not answer")) << keyless.status();
  EXPECT_TRUE(absl::StrContains(keyless.status().message(), spec.name)) << keyless.status();

  // A member that joins alone: its peer's address never comes.
  CommOptions member;
  member.curve = *cluster;
  auto alone = JoinGroup(spec, 1, absl::Milliseconds(300), member);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kDeadlineExceeded) << alone.status();
  EXPECT_FALSE(absl::StrContains(alone.status().message(), "did not answer")) << alone.status();

  member.hostname = "";
  EXPECT_EQ(JoinGroup(spec, 1, absl::Milliseconds(300), member).status().code(),
            absl::StatusCode::kInvalidArgument);
  member.hostname = "192.0.2.1";  // TEST-NET-1: not an address of this machine
  auto bad_host = JoinGroup(spec, 1, absl::Milliseconds(300), member);
  EXPECT_EQ(bad_host.status().code(), absl::StatusCode::kInvalidArgument) << bad_host.status();
}

}  // namespace
}  // namespace vllm::kernels::comm
