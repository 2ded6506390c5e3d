#include "tracer/sending/collector_connection.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>

namespace cumemtrace::tracer {
namespace {

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cmt-conn-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/c.sock";
    listener_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    snprintf(address.sun_path, sizeof(address.sun_path), "%s", path_.c_str());
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(listener_, 1), 0);
  }
  void TearDown() override {
    close(listener_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
  int listener_ = -1;
};

TEST_F(ConnectionTest, PeerGoneIsReportedWithoutSigpipe) {
  // With SIGPIPE at its default action a plain send() to a closed peer would kill us.
  signal(SIGPIPE, SIG_DFL);
  CollectorConnection connection;
  std::string error;
  ASSERT_TRUE(connection.Connect(path_, &error)) << error;
  close(accept(listener_, nullptr, nullptr));
  std::string outbox(1 << 20, 'x');
  CollectorConnection::SendResult result = CollectorConnection::SendResult::kAllSent;
  for (int i = 0; i < 10 && result != CollectorConnection::SendResult::kClosed; ++i) {
    outbox.assign(1 << 20, 'x');
    result = connection.Send(&outbox, 100);
  }
  EXPECT_EQ(result, CollectorConnection::SendResult::kClosed);
  EXPECT_FALSE(connection.connected());
}

TEST_F(ConnectionTest, StalledPeerCostsAtMostTheTimeout) {
  CollectorConnection connection;
  std::string error;
  ASSERT_TRUE(connection.Connect(path_, &error)) << error;
  const int peer = accept(listener_, nullptr, nullptr);  // accepts, never reads
  std::string outbox(64 << 20, 'x');
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(connection.Send(&outbox, 200), CollectorConnection::SendResult::kPending);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(2));
  EXPECT_LT(outbox.size(), size_t{64} << 20);  // what was sent is gone from the outbox
  EXPECT_GT(outbox.size(), 0u);
  close(peer);
}

TEST_F(ConnectionTest, SitsAtAHighCloseOnExecDescriptor) {
  CollectorConnection connection;
  std::string error;
  ASSERT_TRUE(connection.Connect(path_, &error)) << error;
  EXPECT_GE(connection.fd(), 100);
  EXPECT_NE(fcntl(connection.fd(), F_GETFD) & FD_CLOEXEC, 0);
  close(accept(listener_, nullptr, nullptr));
}

TEST_F(ConnectionTest, ADescriptorTheProgramReusedIsNeitherWrittenNorClosed) {
  CollectorConnection connection;
  std::string error;
  ASSERT_TRUE(connection.Connect(path_, &error)) << error;
  const int peer = accept(listener_, nullptr, nullptr);
  // The program closes the number and its own file lands there.
  const std::string file = dir_ + "/program.txt";
  const int program_fd = open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(program_fd, 0);
  const int number = connection.fd();
  ASSERT_EQ(dup2(program_fd, number), number);
  std::string outbox = "frame bytes";
  EXPECT_EQ(connection.Send(&outbox, 100), CollectorConnection::SendResult::kTaken);
  EXPECT_FALSE(connection.connected());
  connection.Close();
  struct stat st {};
  ASSERT_EQ(fstat(number, &st), 0) << "the tracer closed the program's descriptor";
  EXPECT_EQ(st.st_size, 0) << "the tracer wrote into the program's file";
  close(number);
  close(program_fd);
  close(peer);
  unlink(file.c_str());
}

TEST_F(ConnectionTest, ConnectFailureExplainsItself) {
  CollectorConnection connection;
  std::string error;
  EXPECT_FALSE(connection.Connect(dir_ + "/missing.sock", &error));
  EXPECT_NE(error.find("missing.sock"), std::string::npos);
}

}  // namespace
}  // namespace cumemtrace::tracer
