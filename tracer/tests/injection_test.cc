// End to end for the injected library alone: a real process, preloaded with the real .so,
// talking to a socket this test serves. No GPU needed: NVTX and process lifetime only.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {
namespace {

class ProbeRun : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/cmt-inject-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    socket_path_ = dir_ + "/s.sock";
  }
  void TearDown() override {
    unlink(socket_path_.c_str());
    unlink((dir_ + "/stderr").c_str());
    rmdir(dir_.c_str());
  }

  int Listen() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path_.c_str());
    unlink(socket_path_.c_str());  // a probe's earlier run in the same test
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(fd, 8), 0);
    return fd;
  }

  enum class Load { kPreload, kByNvtx };

  // Starts the probe with the tracer preloaded, or only named in NVTX_INJECTION64_PATH (NVTX
  // loads it at the first NVTX call); stderr goes to a file. With `pipes`, the probe's stdin
  // and stdout are pipes: pipes[0] writes to its stdin, pipes[1] reads its stdout.
  pid_t Spawn(const std::string& exit_code, Load load = Load::kPreload,
              const char* probe_mode = nullptr, int* pipes = nullptr) {
    int to_child[2] = {-1, -1};
    int from_child[2] = {-1, -1};
    if (pipes != nullptr && (pipe(to_child) != 0 || pipe(from_child) != 0)) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      unsetenv("LD_PRELOAD");
      unsetenv("NVTX_INJECTION64_PATH");
      unsetenv("CUDA_INJECTION64_PATH");
      if (load == Load::kPreload) {
        setenv("LD_PRELOAD", CUMEMTRACE_TRACER_LIB, 1);
      } else {
        setenv("NVTX_INJECTION64_PATH", CUMEMTRACE_TRACER_LIB, 1);
      }
      setenv("CUMEMTRACE_SOCKET", socket_path_.c_str(), 1);
      unsetenv("CUMEMTRACE_SHARED_RING");
      for (const auto& [name, value] : extra_env_) setenv(name.c_str(), value.c_str(), 1);
      const int err = open((dir_ + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(err, 2);
      if (pipes != nullptr) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
      }
      execl(CUMEMTRACE_NVTX_PROBE, CUMEMTRACE_NVTX_PROBE, exit_code.c_str(), probe_mode,
            nullptr);
      _exit(127);
    }
    if (pipes != nullptr) {
      close(to_child[0]);
      close(from_child[1]);
      pipes[0] = to_child[1];
      pipes[1] = from_child[0];
    }
    return pid;
  }

  static int WaitStatus(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  }

  std::string Stderr() const {
    std::string out;
    FILE* f = fopen((dir_ + "/stderr").c_str(), "r");
    if (f == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    fclose(f);
    return out;
  }

  static std::string ReadAll(int fd) {
    std::string bytes;
    char buf[65536];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 10000) <= 0) break;  // a hung tracer fails the test, not the suite
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      bytes.append(buf, static_cast<size_t>(n));
    }
    return bytes;
  }

  static std::vector<v1::StreamMessage> Decode(const std::string& bytes) {
    std::vector<v1::StreamMessage> messages;
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                              static_cast<int>(bytes.size()));
    uint32_t size = 0;
    while (in.ReadVarint32(&size)) {
      std::string body;
      if (!in.ReadString(&body, static_cast<int>(size))) break;
      v1::StreamMessage message;
      EXPECT_TRUE(message.ParseFromString(body));
      messages.push_back(std::move(message));
    }
    return messages;
  }

  // Runs the probe preloaded, with exit code 5, and checks its whole stream.
  // `thread_buffer_bytes`: what the handshake must announce after the ring, when given (the
  // other runs inherit the environment's CUMEMTRACE_PER_THREAD).
  void RunThePreloadedProbe(bool shared_ring, int64_t thread_buffer_bytes = -1);

  std::string dir_;
  std::string socket_path_;
  std::vector<std::pair<std::string, std::string>> extra_env_;
};

// Checks the stream of the probe's usual calls (nvtx_probe.cc), run with exit code 5.
void ExpectTheProbesStream(const std::vector<v1::StreamMessage>& messages, pid_t pid,
                           v1::InjectionMode injection_mode, bool shared_ring = true) {
  ASSERT_GE(messages.size(), 2u);
  ASSERT_TRUE(messages[0].has_handshake());
  const v1::Handshake& hello = messages[0].handshake();
  EXPECT_EQ(hello.magic(), static_cast<uint32_t>(v1::HANDSHAKE_MAGIC));
  EXPECT_EQ(hello.protocol_version(), static_cast<uint32_t>(v1::PROTOCOL_VERSION));
  EXPECT_EQ(hello.pid(), static_cast<uint32_t>(pid));
  ASSERT_GE(hello.command_line_size(), 2);
  EXPECT_EQ(hello.command_line(1), "5");
  EXPECT_EQ(hello.timestamp_clock(), v1::TIMESTAMP_CLOCK_MONOTONIC);
  EXPECT_EQ(hello.injection_mode(), injection_mode);
  EXPECT_EQ(hello.has_shared_ring(), shared_ring);

  std::map<uint32_t, std::string> strings;
  std::vector<v1::Event> nvtx;
  int exits = 0;
  int32_t exit_code = -1;
  uint64_t expected_sequence = 0;
  for (size_t i = 1; i < messages.size(); ++i) {
    ASSERT_TRUE(messages[i].has_batch());
    EXPECT_EQ(messages[i].batch().sequence(), expected_sequence++);
    for (const v1::Event& event : messages[i].batch().events()) {
      if (event.has_interned_string()) {
        strings[event.interned_string().id()] = event.interned_string().value();
      } else if (event.has_nvtx()) {
        // A definition always precedes its first use.
        if (event.nvtx().message_id() != 0) {
          EXPECT_TRUE(strings.count(event.nvtx().message_id()));
        }
        if (event.nvtx().domain_id() != 0) {
          EXPECT_TRUE(strings.count(event.nvtx().domain_id()));
        }
        // Nothing recorded before the trace's start (the first event may start it).
        EXPECT_GE(event.timestamp_ns(), hello.trace_start_ns());
        nvtx.push_back(event);
      } else if (event.has_process_exit()) {
        ++exits;
        exit_code = event.process_exit().exit_code();
      }
    }
  }
  EXPECT_EQ(exits, 1);
  EXPECT_EQ(exit_code, 5);

  std::stable_sort(nvtx.begin(), nvtx.end(), [](const v1::Event& a, const v1::Event& b) {
    return a.timestamp_ns() < b.timestamp_ns();
  });
  auto describe = [&](const v1::Event& e) {
    std::string text = v1::NvtxOperation_Name(e.nvtx().operation());
    if (e.nvtx().domain_id() != 0) text += " " + strings[e.nvtx().domain_id()] + ":";
    if (e.nvtx().message_id() != 0) text += " " + strings[e.nvtx().message_id()];
    return text;
  };
  std::vector<std::string> seen;
  for (const v1::Event& e : nvtx) seen.push_back(describe(e));
  const std::vector<std::string> expected = {
      "NVTX_OPERATION_PUSH forward",  "NVTX_OPERATION_PUSH layer1",
      "NVTX_OPERATION_POP",           "NVTX_OPERATION_POP",
      "NVTX_OPERATION_START epoch",   "NVTX_OPERATION_PUSH backward",
      "NVTX_OPERATION_POP",           "NVTX_OPERATION_END",
      "NVTX_OPERATION_PUSH ep: settling", "NVTX_OPERATION_POP ep:",
      "NVTX_OPERATION_MARK checkpoint"};
  EXPECT_EQ(seen, expected);
  ASSERT_EQ(nvtx.size(), expected.size());
  // The range started on the main thread ends on the worker, and the ids pair them.
  EXPECT_NE(nvtx[4].nvtx().range_id(), 0u);
  EXPECT_EQ(nvtx[4].nvtx().range_id(), nvtx[7].nvtx().range_id());
  EXPECT_NE(nvtx[4].nvtx().thread_id(), nvtx[7].nvtx().thread_id());
  EXPECT_EQ(nvtx[0].nvtx().thread_id(), static_cast<uint32_t>(pid));  // main thread: tid == pid
  EXPECT_EQ(nvtx[8].nvtx().color(), 0xff00ff00u);
}

void ProbeRun::RunThePreloadedProbe(bool shared_ring, int64_t thread_buffer_bytes) {
  const int listener = Listen();
  const pid_t pid = Spawn("5");
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  const std::vector<v1::StreamMessage> messages = Decode(ReadAll(conn));
  const int status = WaitStatus(pid);
  close(conn);
  close(listener);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 5);
  EXPECT_EQ(Stderr(), "");  // nothing printed when all is well
  ExpectTheProbesStream(messages, pid, v1::INJECTION_MODE_LD_PRELOAD, shared_ring);
  ASSERT_FALSE(messages.empty());
  if (thread_buffer_bytes >= 0) {
    EXPECT_EQ(messages[0].handshake().shared_ring().thread_buffer_bytes(),
              static_cast<uint64_t>(thread_buffer_bytes));
  }
}

TEST_F(ProbeRun, SendsHandshakeNvtxRangesAndExitCode) { RunThePreloadedProbe(true); }

// The allocations a thread's first NVTX call makes (nvtx_alloc_probe.cc), with the tracer
// preloaded by `preload` (from the root folder, so a path without its leading '/' is a
// relative spelling) and NVTX_INJECTION64_PATH set to `nvtx_path` (unset when null).
std::string AllocationsInNvtxInit(const std::string& preload, const char* nvtx_path) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir("/") != 0) _exit(126);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    if (nvtx_path != nullptr) {
      setenv("NVTX_INJECTION64_PATH", nvtx_path, 1);
    } else {
      unsetenv("NVTX_INJECTION64_PATH");
    }
    unsetenv("CUDA_INJECTION64_PATH");
    setenv("CUMEMTRACE_SOCKET", "/nonexistent/cumemtrace.sock", 1);
    setenv("CUMEMTRACE_QUIET", "1", 1);
    dup2(out[1], 1);
    execl(CUMEMTRACE_NVTX_ALLOC_PROBE, CUMEMTRACE_NVTX_ALLOC_PROBE, nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return text;
}

// NVTX's init is the window of the NVTX header's fork race, and glibc's fork holds malloc's
// locks: an allocation there keeps the thread inside the window for a whole concurrent fork
// (docs/reliability.md). The header's first dlopen of the preloaded tracer made one (and
// opened the file when LD_PRELOAD spelled the path differently); the constructor now makes
// that dlopen itself, before the program has threads.
TEST(NvtxInit, AllocatesNothingWithTheTracerPreloaded) {
  const std::string absolute = CUMEMTRACE_TRACER_LIB;
  ASSERT_EQ(absolute[0], '/');
  EXPECT_EQ(AllocationsInNvtxInit(absolute, absolute.c_str()), "0\n") << "as run sets it";
  EXPECT_EQ(AllocationsInNvtxInit(absolute.substr(1), nullptr), "0\n")
      << "LD_PRELOAD by a relative path";
}

// CUMEMTRACE_SHARED_RING=0 (the socket-only configuration of the overhead benchmarks): no
// ring is offered to the collector, and every record still arrives through the socket.
TEST_F(ProbeRun, WithTheSharedRingOffEverythingArrivesThroughTheSocket) {
  extra_env_ = {{"CUMEMTRACE_SHARED_RING", "0"}};
  RunThePreloadedProbe(/*shared_ring=*/false);
}

// CUMEMTRACE_PER_THREAD=1: the per-thread buffers of tensor events are carved from the ring's
// memory file and announced with it (64 slots of 16,384 32-byte units after a 16 KiB table);
// the rest of the stream is as ever.
TEST_F(ProbeRun, PerThreadBuffersAreAnnouncedAfterTheRing) {
  extra_env_ = {{"CUMEMTRACE_PER_THREAD", "1"}};
  RunThePreloadedProbe(/*shared_ring=*/true, 16384 + 64 * 16384 * 32);
  extra_env_ = {{"CUMEMTRACE_PER_THREAD", "0"}};
  RunThePreloadedProbe(/*shared_ring=*/true, 0);
}

// NVTX's init callback runs while the NVTX header's fork race is open (a child forked then
// spins in the header forever; docs/reliability.md): when NVTX loads the tracer, the
// callback only fills NVTX's tables, and the tracer starts (ring, connection, sender) at the
// first recorded event, losing none of it.
TEST_F(ProbeRun, LoadedByNvtxItStartsAtTheFirstEventNotInsideNvtxsInit) {
  const int listener = Listen();
  int pipes[2] = {-1, -1};
  const pid_t pid = Spawn("5", Load::kByNvtx, "wait", pipes);
  ASSERT_GT(pid, 0);
  char byte = 0;
  pollfd ready{pipes[1], POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 10000), 1);
  ASSERT_EQ(read(pipes[1], &byte, 1), 1);  // NVTX has initialized, nothing recorded yet
  // The tracer connects on the program's thread as it starts: no connection means the
  // init callback did not start it.
  pollfd connection{listener, POLLIN, 0};
  EXPECT_EQ(poll(&connection, 1, 0), 0) << "the tracer started inside NVTX's init callback";
  ASSERT_EQ(write(pipes[0], &byte, 1), 1);
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  const std::vector<v1::StreamMessage> messages = Decode(ReadAll(conn));
  const int status = WaitStatus(pid);
  close(conn);
  close(listener);
  close(pipes[0]);
  close(pipes[1]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 5);
  EXPECT_EQ(Stderr(), "");
  ExpectTheProbesStream(messages, pid, v1::INJECTION_MODE_NVTX_INJECTION);
}

// Loaded by NVTX, the tracer starts at the first event: threads whose first events come
// while it starts wait for it, so none of their ranges is lost.
TEST_F(ProbeRun, LoadedByNvtxFirstEventsOfManyThreadsAtOnceAreAllKept) {
  const int listener = Listen();
  const pid_t pid = Spawn("5", Load::kByNvtx, "threads");
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  const std::vector<v1::StreamMessage> messages = Decode(ReadAll(conn));
  const int status = WaitStatus(pid);
  close(conn);
  close(listener);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 5);
  int pushes = 0;
  int pops = 0;
  int exits = 0;
  for (const v1::StreamMessage& message : messages) {
    for (const v1::Event& event : message.batch().events()) {
      if (event.has_nvtx() && event.nvtx().operation() == v1::NVTX_OPERATION_PUSH) ++pushes;
      if (event.has_nvtx() && event.nvtx().operation() == v1::NVTX_OPERATION_POP) ++pops;
      if (event.has_process_exit()) ++exits;
      EXPECT_FALSE(event.has_dropped());
    }
  }
  EXPECT_EQ(pushes, 8 * 500);
  EXPECT_EQ(pops, 8 * 500);
  EXPECT_EQ(exits, 1);
}

TEST_F(ProbeRun, DeadCollectorNeitherKillsNorChangesTheProgram) {
  const int listener = Listen();
  const pid_t pid = Spawn("9");
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  close(conn);  // the collector dies right after accepting
  close(listener);
  const int status = WaitStatus(pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 9);
}

TEST_F(ProbeRun, NoCollectorGivesOneNoticeAndTheProgramRuns) {
  const pid_t pid = Spawn("3");  // nobody listens on the socket path
  const int status = WaitStatus(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  const std::string err = Stderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("cumemtrace: not tracing"), std::string::npos) << err;
}

}  // namespace
}  // namespace cumemtrace
