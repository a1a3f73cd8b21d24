// CURVE for the cross-node TCP sockets: key files, and a server that accepts only clients
// holding the cluster key (ZAP), over real TCP on 127.0.0.1.
#include "ipc/curve.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"

namespace vllm::ipc {
namespace {

class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CheckCurveSupported().ok()) << "Debian's libzmq has CURVE (libsodium)";
    std::string tmpl = "/tmp/curve-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Writes `content` to a new file of the test with `mode`; returns its path.
  std::string WriteFile(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  std::string dir_;
};

TEST_F(CurveTest, KeyFileRoundTripsAndIsOwnerOnly) {
  const std::string path = dir_ + "/cluster.key";
  const mode_t old_umask = umask(0);
  auto made = CreateCurveKeyFile(path);
  umask(old_umask);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(made->public_key.size(), 40u);
  EXPECT_EQ(made->secret_key.size(), 40u);

  auto loaded = LoadCurveKeyFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, *made);
  auto derived = CurveKeysFromSecret(made->secret_key);
  ASSERT_TRUE(derived.ok());
  EXPECT_EQ(derived->public_key, made->public_key) << "every node derives the same keypair";

  auto again = CreateCurveKeyFile(path);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  auto other = GenerateCurveKeys();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->public_key, made->public_key);
}

TEST_F(CurveTest, CommentsAndBlankLinesAreAllowed) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok());
  const std::string path =
      WriteFile("k", absl::StrCat("# cluster key\n\n  ", keys->secret_key, "  \n\n"), 0400);
  auto loaded = LoadCurveKeyFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, *keys);
}

// As ssh refuses an unprotected private key.
TEST_F(CurveTest, RefusesAKeyFileOthersCanRead) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok());
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602}) {
    const std::string path = WriteFile(absl::StrCat("k", mode), keys->secret_key + "\n", mode);
    auto loaded = LoadCurveKeyFile(path);
    ASSERT_FALSE(loaded.ok()) << std::oct << mode;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kPermissionDenied) << loaded.status();
    EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status();
    EXPECT_NE(loaded.status().message().find("chmod 600"), std::string::npos) << loaded.status();
  }
}

TEST_F(CurveTest, MalformedKeyFilesAreClearErrors) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok());
  struct Case {
    std::string name, content, expect;
  };
  std::string bad_char = keys->secret_key;
  bad_char[7] = '~';  // not in the Z85 alphabet
  const std::vector<Case> cases = {
      {"empty", "", "found 0"},
      {"only-comments", "# nothing\n", "found 0"},
      {"two-keys", keys->secret_key + "\n" + keys->secret_key + "\n", "found 2"},
      {"short", keys->secret_key.substr(0, 39) + "\n", "39 characters"},
      {"not-z85", bad_char + "\n", "not all Z85"},
      {"huge", std::string(5000, 'a'), "larger than 4096 bytes"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteFile(c.name, c.content, 0600);
    auto loaded = LoadCurveKeyFile(path);
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status();
    EXPECT_NE(loaded.status().message().find(c.expect), std::string::npos) << loaded.status();
    EXPECT_EQ(loaded.status().message().find(bad_char), std::string::npos) << "key echoed";
  }
  auto missing = LoadCurveKeyFile(dir_ + "/none");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  chmod(dir_.c_str(), 0700);
  auto directory = LoadCurveKeyFile(dir_);
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kFailedPrecondition) << directory.status();
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos);
  EXPECT_EQ(CurveKeysFromSecret("short").status().code(), absl::StatusCode::kInvalidArgument);
}

// A PULL server with the cluster key and a PUSH client configured by `setup`; true when the
// client's message arrived within `wait`.
bool Delivered(const CurveKeys& server_keys, const std::function<void(zmq::socket_t&)>& setup,
               absl::Duration wait) {
  zmq::socket_t pull(ZmqContext(), zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  EXPECT_TRUE(MakeCurveServer(pull, server_keys).ok());
  auto endpoint = BindTcp(pull, "127.0.0.1", 0);
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  if (!endpoint.ok()) return false;
  zmq::socket_t push(ZmqContext(), zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  setup(push);
  push.connect(*endpoint);
  (void)push.send(zmq::str_buffer("hello"), zmq::send_flags::dontwait);
  std::vector<zmq::message_t> parts;
  return RecvMultipart(pull, parts, 1, MonoNowNs() + absl::ToInt64Nanoseconds(wait),
                       absl::Milliseconds(10), nullptr, "message")
      .ok();
}

TEST_F(CurveTest, ServerAcceptsOnlyClientsHoldingTheClusterKey) {
  auto cluster = GenerateCurveKeys();
  auto stranger = GenerateCurveKeys();
  ASSERT_TRUE(cluster.ok() && stranger.ok());
  // The same key on both sides: in.
  EXPECT_TRUE(Delivered(
      *cluster, [&](zmq::socket_t& s) { ASSERT_TRUE(MakeCurveClient(s, *cluster).ok()); },
      absl::Seconds(10)));
  // A stranger who knows the server's public key (it is not secret) completes CURVE's
  // encryption but is refused by the ZAP handler: without it libzmq would let it in.
  EXPECT_FALSE(Delivered(
      *cluster,
      [&](zmq::socket_t& s) {
        s.set(zmq::sockopt::curve_serverkey, cluster->public_key);
        s.set(zmq::sockopt::curve_publickey, stranger->public_key);
        s.set(zmq::sockopt::curve_secretkey, stranger->secret_key);
      },
      absl::Milliseconds(800)));
  // A stranger with a keypair of its own, and a plain-text client: out.
  EXPECT_FALSE(Delivered(
      *cluster, [&](zmq::socket_t& s) { ASSERT_TRUE(MakeCurveClient(s, *stranger).ok()); },
      absl::Milliseconds(800)));
  EXPECT_FALSE(Delivered(
      *cluster, [](zmq::socket_t&) {}, absl::Milliseconds(800)));
}

}  // namespace
}  // namespace vllm::ipc
