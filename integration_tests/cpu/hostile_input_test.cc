// Hostile input and hostile conditions for the `cumemtrace` executable, without a GPU: a
// daemon out of descriptors, strangers that never finish a handshake, names made to break
// regular expressions and pages, a full disk, and paths and numbers given to trick it.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "collector/format/framing.h"
#include "integration_tests/cpu/child_process.h"
#include "integration_tests/cpu/cli_test_support.h"

namespace cumemtrace {
namespace {

namespace fs = std::filesystem;

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::MakeTempDir("cumemtrace-hostile");
    ASSERT_FALSE(tmp_.empty());
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  std::string tmp_;
};

// A connected Unix stream socket to `path`, -1 on failure.
int ConnectTo(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `bytes`, false when the peer closed the connection first.
bool SendAllOrClosed(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The peak resident memory of `pid` (VmHWM), in bytes; 0 when unknown.
uint64_t PeakRss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// A daemon on tmp/sock, its log read line by line; the first line says it listens.
struct Daemon {
  Child child;
  std::unique_ptr<LineReader> log;
  std::string socket;
  std::string traces;
};

Daemon StartDaemon(const std::string& tmp) {
  Daemon d;
  d.socket = tmp + "/sock/collector.sock";
  d.traces = tmp + "/traces";
  d.child = Spawn({kCli, "daemon", "--socket", d.socket, "--output-dir", d.traces}, tmp, {});
  d.log = std::make_unique<LineReader>(d.child.err_fd);
  const std::optional<std::string> ready = d.log->Next();
  EXPECT_TRUE(ready.has_value() && ready->find("listening on") != std::string::npos);
  return d;
}

// Events recorded for `pid` in the daemon's folder.
int EventsRecordedFor(const std::string& traces, pid_t pid) {
  int events = 0;
  for (const auto& entry : fs::directory_iterator(traces)) {
    TraceContents t = ReadTrace(entry.path().string());
    for (const auto& [stream, handshake] : t.handshakes) {
      if (handshake.pid() == static_cast<uint32_t>(pid)) events += t.events[stream];
    }
  }
  return events;
}

// Out of descriptors, accept() fails while the listening socket stays readable. The daemon
// once busy-looped there, a million "accept failed" lines in 3 s; it must pause, log the
// episode once, keep its streams, and accept again when descriptors are free.
TEST_F(HostileInput, DaemonOutOfDescriptorsBacksOffLogsOnceAndKeepsServing) {
  // The daemon inherits a soft limit of 32 descriptors.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 32;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  Daemon daemon = StartDaemon(tmp_);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);

  // 60 silent connections: the daemon accepts until it has no descriptor left; the rest wait
  // in the backlog.
  std::vector<int> silent;
  for (int i = 0; i < 60; ++i) {
    const int fd = ConnectTo(daemon.socket);
    ASSERT_GE(fd, 0) << "connection " << i;
    silent.push_back(fd);
  }
  std::vector<std::string> lines;
  while (std::optional<std::string> line = daemon.log->Next(/*timeout_ms=*/1500)) {
    lines.push_back(*line);
    ASSERT_LT(lines.size(), 1000u) << "the daemon floods its log: " << *line;
  }
  int shortage_lines = 0;
  for (const std::string& line : lines) {
    if (line.find("accept") != std::string::npos) ++shortage_lines;
  }
  EXPECT_EQ(shortage_lines, 1) << "one line for the whole episode";
  ASSERT_FALSE(lines.empty());
  std::string all;
  for (const std::string& line : lines) all += line + "\n";
  EXPECT_NE(all.find("cannot accept connections: Too many open files"), std::string::npos) << all;

  // Descriptors come back: a real client is recorded in full.
  for (int fd : silent) close(fd);
  Child client = Spawn({kFake, "--socket=" + daemon.socket, "--batches=3", "--events=5"}, tmp_, {});
  const Result r = Finish(client);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  bool resumed = false;
  bool recorded = false;
  while (std::optional<std::string> line = daemon.log->Next(/*timeout_ms=*/5000)) {
    if (line->find("accepting connections again") != std::string::npos) resumed = true;
    if (line->find("pid " + std::to_string(client.pid)) != std::string::npos &&
        line->find("closed: end of stream") != std::string::npos) {
      recorded = true;
      break;
    }
  }
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(recorded);
  kill(daemon.child.pid, SIGTERM);
  const Result stopped = Finish(daemon.child);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_EQ(EventsRecordedFor(daemon.traces, client.pid), 15);
}

// Before its handshake a connection is a stranger: its first frame may announce at most
// MAX_HANDSHAKE_FRAME_BYTES, and all strangers together may hold at most 16 MiB. Before,
// each could hold 16 MiB: 40 of them took the daemon to 692 MB.
TEST_F(HostileInput, DaemonBoundsWhatConnectionsWithoutAHandshakeHold) {
  Daemon daemon = StartDaemon(tmp_);
  auto frame_start = [](uint32_t length, size_t body_bytes) {
    std::string bytes;
    uint32_t n = length;
    while (n >= 0x80) {
      bytes.push_back(static_cast<char>((n & 0x7f) | 0x80));
      n >>= 7;
    }
    bytes.push_back(static_cast<char>(n));
    bytes.append(body_bytes, 'x');
    return bytes;
  };
  std::vector<int> strangers;
  // 40 that announce a 15 MiB first frame and send all but its last byte.
  const std::string huge = frame_start(15u << 20, (15u << 20) - 1);
  int huge_sent = 0;
  for (int i = 0; i < 40; ++i) {
    const int fd = ConnectTo(daemon.socket);
    ASSERT_GE(fd, 0);
    strangers.push_back(fd);
    if (SendAllOrClosed(fd, huge)) ++huge_sent;
  }
  // 40 that announce a frame just under 1 MiB and send all but its last kilobyte.
  const std::string big = frame_start(1000000, 999000);
  std::vector<int> big_strangers;
  for (int i = 0; i < 40; ++i) {
    const int fd = ConnectTo(daemon.socket);
    ASSERT_GE(fd, 0);
    big_strangers.push_back(fd);
    SendAllOrClosed(fd, big);
  }
  // A real client among them is recorded.
  Child client = Spawn({kFake, "--socket=" + daemon.socket, "--batches=3", "--events=5"}, tmp_, {});
  const Result r = Finish(client);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  bool recorded = false;
  while (std::optional<std::string> line = daemon.log->Next(/*timeout_ms=*/5000)) {
    if (line->find("pid " + std::to_string(client.pid)) != std::string::npos &&
        line->find("closed: end of stream") != std::string::npos) {
      recorded = true;
      break;
    }
  }
  EXPECT_TRUE(recorded);
  const uint64_t peak = PeakRss(daemon.child.pid);
  // 16 of them fit in 16 MiB; the daemon closed the others (the largest holder first).
  int big_closed = 0;
  for (int fd : big_strangers) {
    char byte;
    if (recv(fd, &byte, 1, MSG_DONTWAIT) == 0) ++big_closed;
    close(fd);
  }
  for (int fd : strangers) close(fd);
  kill(daemon.child.pid, SIGTERM);
  const Result stopped = Finish(daemon.child);
  EXPECT_EQ(stopped.exit_code, 0);
  EXPECT_EQ(EventsRecordedFor(daemon.traces, client.pid), 15);
  // 16 MiB of strangers' bytes, the decoders' slack, the binary: far below 692 MB.
  EXPECT_GT(peak, 0u);
  EXPECT_LT(peak, 120ull << 20) << "peak RSS " << (peak >> 20) << " MiB";
  EXPECT_EQ(huge_sent, 0) << "a 15 MiB first frame is refused at its length prefix";
  EXPECT_GE(big_closed, 40 - 16) << "strangers together are bounded";
  std::cout << "daemon peak RSS " << (peak >> 20) << " MiB; " << big_closed
            << " of 40 one-megabyte strangers closed\n";
}

// A catch-all user rule and a 40,000-character range name overflowed the stack inside
// std::regex: `run` exited 139 although the program exited 0, and wrote no summary.
TEST_F(HostileInput, LongRangeNamesUnderACatchAllRuleNeverCrashACommand) {
  const std::string rules = tmp_ + "/rules.txt";
  {
    std::ofstream out(rules);
    out << "/.*/ = y\n";
  }
  const std::string run_dir = tmp_ + "/run";
  const Result run = RunCli({"run", "-o", run_dir, "--phase-rules", rules, "--", kFake,
                             "--long-range=40000", "--range=short", "--batches=4", "--exit=3"},
                            tmp_);
  EXPECT_EQ(run.exit_code, 3) << run.err;
  ASSERT_TRUE(fs::exists(run_dir + "/summary.json")) << run.err;
  ASSERT_TRUE(fs::exists(run_dir + "/report.html")) << run.err;
  const std::string trace = run_dir + "/trace.cmtrace";
  const Result report = RunCli({"report", "--phase-rules", rules, trace}, tmp_);
  EXPECT_EQ(report.exit_code, 0) << report.err;
  // The short name went to y; the long one keeps its own name.
  EXPECT_NE(report.out.find(" y "), std::string::npos) << report.out;
  const Result json = RunCli({"report", "--json", "--phase-rules", rules, trace}, tmp_);
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find(std::string(40000, 'a')), std::string::npos);
  const Result html = RunCli({"export", "--format", "html", "--phase-rules", rules, "-o",
                              tmp_ + "/r.html", trace}, tmp_);
  EXPECT_EQ(html.exit_code, 0) << html.err;
  const Result chrome = RunCli({"export", "--format", "chrome", "--phase-rules", rules, "-o",
                                tmp_ + "/r.json", trace}, tmp_);
  EXPECT_EQ(chrome.exit_code, 0) << chrome.err;
  const Result compare = RunCli({"compare", "--phase-rules", rules, trace, trace}, tmp_);
  EXPECT_EQ(compare.exit_code, 0) << compare.err;
}

}  // namespace
}  // namespace cumemtrace
