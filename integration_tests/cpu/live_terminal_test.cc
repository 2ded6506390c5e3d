// `run --live` under a pseudo-terminal: the view is drawn below a scroll region on stderr's
// terminal while the program runs, and taken down before the summary; the program's stdout
// never receives a byte of it; without a terminal there is no view. The program is the fake
// tracer: 6 batches of 2 MiB (never freed), 400 ms apart, in ranges forward, backward, ...
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "integration_tests/cpu/cli_test_support.h"

namespace cumemtrace {
namespace {

namespace fs = std::filesystem;

class LiveTerminalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::MakeTempDir("cumemtrace-live");
    ASSERT_FALSE(tmp_.empty());
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  std::string tmp_;
};

const std::vector<std::string> kProgram = {kFake,
                                           "--batches=6",
                                           "--events=2",
                                           "--range=forward",
                                           "--range=backward",
                                           "--category=parameter",
                                           "--category=activation",
                                           "--pause-ms=400",
                                           "--print-lines=3"};

const std::string kProgramOutput =
    "line 0 of the traced program\nline 1 of the traced program\nline 2 of the traced program\n";

// Runs cumemtrace with stdin and stderr on a 30x100 pseudo-terminal and stdout into
// `stdout_path`; returns everything the terminal received, and the exit status.
std::string RunOnTerminal(const std::vector<std::string>& args, const std::string& stdout_path,
                          int* status) {
  std::vector<std::string> env = ChildEnv({{"TERM", "xterm"}});
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  winsize size{};
  size.ws_row = 30;
  size.ws_col = 100;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &size);
  if (pid == 0) {
    const int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, STDOUT_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  std::string received;
  for (;;) {
    pollfd pfd = {master, POLLIN, 0};
    if (poll(&pfd, 1, 30000) <= 0) break;
    char chunk[4096];
    const ssize_t n = read(master, chunk, sizeof(chunk));
    if (n <= 0) break;  // EIO once the child side is closed
    received.append(chunk, static_cast<size_t>(n));
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  *status = testing::ExitCode(wstatus);
  close(master);
  return received;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST_F(LiveTerminalTest, DrawnBelowAScrollRegionAndNeverOnTheProgramsStdout) {
  std::vector<std::string> args = {kCli, "run", "-o", tmp_ + "/out", "--live", "--"};
  args.insert(args.end(), kProgram.begin(), kProgram.end());
  int status = -1;
  const std::string screen = RunOnTerminal(args, tmp_ + "/stdout", &status);
  EXPECT_EQ(status, 0) << screen;
  // The program's own output, byte for byte.
  EXPECT_EQ(ReadFile(tmp_ + "/stdout"), kProgramOutput);
  // The view takes 5 lines (title, process, GPU, phases, categories) at the bottom of 30: the
  // program scrolls in lines 1-25. It is redrawn every second (2.4 s: at least twice), and the
  // whole terminal is given back before the summary.
  EXPECT_NE(screen.find("\x1b[1;25r"), std::string::npos) << screen;
  EXPECT_GE(Count(screen, "cumemtrace --live  +"), 2u) << screen;
  EXPECT_NE(screen.find("GPU 0  now "), std::string::npos) << screen;
  // Each iteration (forward, backward) allocates 4 MiB; one drawn after the second forward.
  EXPECT_NE(screen.find("last iteration +4.00 MiB"), std::string::npos) << screen;
  EXPECT_NE(screen.find("by phase: forward "), std::string::npos) << screen;
  // The program's objects name each forward batch's memory parameters, each backward's
  // activations: by the draw at 2 s, the three forward batches (nothing is freed, so the
  // category's peak is its memory now).
  EXPECT_NE(screen.find("by category: parameter 6.00 MiB (peak 6.00 MiB), activation "),
            std::string::npos)
      << screen;
  const size_t reset = screen.rfind("\x1b[r");
  ASSERT_NE(reset, std::string::npos) << screen;
  EXPECT_LT(reset, screen.find("cumemtrace summary of")) << screen;
  EXPECT_LT(screen.rfind("cumemtrace --live"), reset);
}

TEST_F(LiveTerminalTest, OffWhenStderrIsNotATerminal) {
  std::vector<std::string> args = {"run", "-o", tmp_ + "/out", "--live", "--"};
  args.insert(args.end(), kProgram.begin(), kProgram.end());
  args[args.size() - 2] = "--pause-ms=0";
  const Result r = RunCli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cumemtrace: --live: stderr is not a terminal; no live view\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("\x1b["), std::string::npos) << r.err;
  EXPECT_EQ(r.out, kProgramOutput);
}

// `cumemtrace top` against a running daemon: the processes it is recording, then none once
// they have ended; without a daemon, exit 1.
TEST_F(LiveTerminalTest, TopShowsWhatARunningDaemonRecords) {
  const std::string socket = tmp_ + "/sock/collector.sock";
  Child daemon =
      Spawn({kCli, "daemon", "--socket", socket, "--output-dir", tmp_ + "/traces"}, tmp_, {});
  LineReader daemon_log(daemon.err_fd);
  ASSERT_TRUE(daemon_log.Next().has_value());  // listening
  Child client = Spawn({kFake, "--socket=" + socket, "--batches=4", "--events=3", "--range=forward",
                        "--range=backward", "--category=gradient", "--hold"},
                       tmp_, {});
  LineReader client_out(client.out_fd);
  ASSERT_EQ(client_out.Next(), std::optional<std::string>("holding"));
  // The batches are sent; the daemon takes them in at its own pace.
  Result top;
  for (int attempt = 0; attempt < 50; ++attempt) {
    top = RunCli({"top", "--socket", socket, "--once"});
    if (top.out.find("GPU 0") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_EQ(top.out.rfind("cumemtrace top  +", 0), 0u) << top.out;
  EXPECT_NE(top.out.find("\npid " + std::to_string(client.pid) + "  "), std::string::npos)
      << top.out;
  // 4 batches of 3 MiB, in forward, backward, forward, backward.
  EXPECT_NE(top.out.find("  GPU 0  now 12.0 MiB  peak 12.0 MiB  iteration 2 (forward), last "
                         "iteration +6.00 MiB\n    by phase: forward 6.00 MiB, backward 6.00 MiB\n"
                         "    by category: gradient 12.0 MiB (peak 12.0 MiB)"),
            std::string::npos)
      << top.out;
  EXPECT_EQ(top.out.find("\x1b"), std::string::npos);  // not a terminal: one plain snapshot
  kill(client.pid, SIGKILL);
  Finish(client);
  for (int attempt = 0; attempt < 50; ++attempt) {
    top = RunCli({"top", "--socket", socket, "--once"});
    if (top.out.find("GPU 0") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(top.out.find("pid "), std::string::npos) << top.out;
  kill(daemon.pid, SIGTERM);
  EXPECT_EQ(Finish(daemon).exit_code, 0);
  EXPECT_FALSE(fs::exists(socket + ".live"));
  top = RunCli({"top", "--socket", socket});
  EXPECT_EQ(top.exit_code, 1);
  EXPECT_NE(top.err.find("no daemon answers on " + socket + ".live"), std::string::npos) << top.err;
}

}  // namespace
}  // namespace cumemtrace
