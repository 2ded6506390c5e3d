// End-to-end tests of the `cumemtrace` executable without a GPU: the real binary is spawned,
// with a fake tracer client (fake_tracer) in place of the traced program, and what it writes
// is read back with the engine's TraceFileReader.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include CUMEMTRACE_BRIDGE_ABI_HEADER  // the bridge interface: part of the cache key
#include "collector/format/trace_file.h"
#include "integration_tests/cpu/child_process.h"
#include "integration_tests/cpu/cli_test_support.h"
#include "cumemtrace/v1/trace.pb.h"

extern char** environ;

namespace cumemtrace {
namespace {

namespace fs = std::filesystem;

class CliEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::MakeTempDir("cumemtrace-e2e");
    ASSERT_FALSE(tmp_.empty());
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  std::string tmp_;
};

// --- run --------------------------------------------------------------------------------

TEST_F(CliEndToEnd, RunRecordsTheStreamAndReturnsTheExitCode) {
  const std::string out = tmp_ + "/out";
  const Result r = RunCli({"run", "-o", out, "--", kFake, "--batches=5", "--events=7", "--exit=3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const std::string trace = out + "/trace.cmtrace";
  EXPECT_EQ(FileMode(trace), 0600u);
  TraceContents t = ReadTrace(trace);
  EXPECT_EQ(t.end, TraceFileReader::Result::kEnd) << t.error;
  EXPECT_TRUE(t.has_file_header);
  ASSERT_EQ(t.handshakes.size(), 1u);
  EXPECT_EQ(t.handshakes.begin()->first, 1u);
  EXPECT_EQ(t.opened.count(1), 1u);
  EXPECT_EQ(t.batches.at(1), 5);
  EXPECT_EQ(t.events.at(1), 35);
  ASSERT_EQ(t.closed.count(1), 1u);
  EXPECT_EQ(t.closed.at(1).reason(), v1::CLOSE_REASON_EOF);
  ASSERT_EQ(t.launcher_exits.size(), 1u);
  EXPECT_EQ(t.launcher_exits[0].first, 1u);  // the child's own stream
  EXPECT_EQ(t.launcher_exits[0].second.pid(), t.handshakes.at(1).pid());
  EXPECT_EQ(t.launcher_exits[0].second.exit_code(), 3);
  EXPECT_EQ(t.launcher_exits[0].second.signal(), 0);
  EXPECT_TRUE(fs::exists(out + "/summary.json"));
  EXPECT_NE(r.err.find("cumemtrace: trace written to " + out + "/"), std::string::npos) << r.err;
}

// The analysis of a small trace takes milliseconds: no progress, however long the program ran.
TEST_F(CliEndToEnd, ASlowProgramWithASmallTraceGetsNoAnalysisProgress) {
  const std::string out = tmp_ + "/out";
  const Result r = RunCli({"run", "-o", out, "--", "/bin/sh", "-c",
                           "sleep 2; exec \"$0\" --batches=3 --events=5", kFake});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(out + "/summary.json"));
  EXPECT_EQ(r.err.find("analysis pass"), std::string::npos) << r.err;
}

TEST_F(CliEndToEnd, RunReportsDeathBySignalAsShellDoes) {
  const std::pair<std::string, int> cases[] = {{"kill", 128 + SIGKILL}, {"segv", 128 + SIGSEGV}};
  for (const auto& [how, expected] : cases) {
    const std::string out = tmp_ + "/" + how;
    const Result r = RunCli({"run", "-o", out, "--", kFake, "--batches=4", "--die=" + how});
    EXPECT_EQ(r.exit_code, expected) << how << ": " << r.err;
    TraceContents t = ReadTrace(out + "/trace.cmtrace");
    // Everything sent before the crash is in the file.
    EXPECT_EQ(t.batches[1], 4) << how;
    ASSERT_EQ(t.launcher_exits.size(), 1u) << how;
    EXPECT_EQ(t.launcher_exits[0].second.signal(), expected - 128) << how;
  }
}

TEST_F(CliEndToEnd, RunWithoutAHandshakeRecordsLauncherExitOnStreamZero) {
  const std::string out = tmp_ + "/out";
  const Result r = RunCli({"run", "-o", out, "--", kFake, "--no-connect", "--exit=5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  TraceContents t = ReadTrace(out + "/trace.cmtrace");
  ASSERT_EQ(t.launcher_exits.size(), 1u);
  EXPECT_EQ(t.launcher_exits[0].first, 0u);
  EXPECT_EQ(t.launcher_exits[0].second.exit_code(), 5);
}

TEST_F(CliEndToEnd, MalformedConnectionIsRefusedWhileAConcurrentOneIsRecorded) {
  const std::string out = tmp_ + "/out";
  const Result r = RunCli(
      {"run", "-o", out, "--", kFake, "--also-bad-connection", "--batches=6", "--events=3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  TraceContents t = ReadTrace(out + "/trace.cmtrace");
  ASSERT_EQ(t.closed.size(), 2u);
  EXPECT_EQ(t.closed.at(1).reason(), v1::CLOSE_REASON_EOF);
  EXPECT_EQ(t.events.at(1), 18);
  EXPECT_EQ(t.closed.at(2).reason(), v1::CLOSE_REASON_PROTOCOL_ERROR);
  EXPECT_FALSE(t.closed.at(2).error().empty());
  EXPECT_EQ(t.handshakes.count(2), 0u);
  EXPECT_NE(r.err.find("stream 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("protocol error"), std::string::npos) << r.err;
}

TEST_F(CliEndToEnd, ProtocolViolationsCloseTheConnectionWithAReason) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--first-frame=garbage"}, "not a StreamMessage"},
      {{"--first-frame=bad-magic"}, "magic"},
      {{"--first-frame=bad-version"}, "protocol version 999"},
      {{"--first-frame=batch"}, "not a handshake"},
      {{"--oversized"}, "exceeds the limit"},
      {{"--garbage-after-handshake"}, "not a StreamMessage"},
  };
  int n = 0;
  for (const auto& [flags, expected_error] : cases) {
    const std::string out = tmp_ + "/case" + std::to_string(n++);
    std::vector<std::string> args = {"run", "-o", out, "--", kFake};
    args.insert(args.end(), flags.begin(), flags.end());
    const Result r = RunCli(args);
    EXPECT_EQ(r.exit_code, 0) << flags[0] << ": " << r.err;
    TraceContents t = ReadTrace(out + "/trace.cmtrace");
    ASSERT_EQ(t.closed.count(1), 1u) << flags[0];
    EXPECT_EQ(t.closed.at(1).reason(), v1::CLOSE_REASON_PROTOCOL_ERROR) << flags[0];
    EXPECT_NE(t.closed.at(1).error().find(expected_error), std::string::npos)
        << flags[0] << ": " << t.closed.at(1).error();
    EXPECT_EQ(t.batches[1], 0) << flags[0];
  }
}

// The shared ring's descriptor comes from the traced process: a collector must refuse one it
// could not read safely (a memfd that may shrink would SIGBUS it), and read a lying one
// without crashing, keeping the stream either way.
TEST_F(CliEndToEnd, AHostileSharedRingNeverHarmsTheCollector) {
  const std::pair<std::string, std::string> cases[] = {
      {"unsealed", "not sealed against shrinking"},
      {"pipe", "not a memory file"},
      {"lying", ""},
      {"three", ""},
  };
  for (const auto& [kind, expected_log] : cases) {
    const std::string out = tmp_ + "/ring-" + kind;
    const Result r = RunCli({"run", "-o", out, "--", kFake, "--batches=3", "--ring=" + kind});
    EXPECT_EQ(r.exit_code, 0) << kind << ": " << r.err;
    if (!expected_log.empty()) {
      EXPECT_NE(r.err.find("shared ring ignored: " + expected_log), std::string::npos)
          << kind << ": " << r.err;
    }
    TraceContents t = ReadTrace(out + "/trace.cmtrace");
    EXPECT_EQ(t.batches.at(1), kind == "lying" || kind == "three" ? 4 : 3) << kind;
    ASSERT_EQ(t.closed.count(1), 1u) << kind;
    EXPECT_EQ(t.closed.at(1).reason(), v1::CLOSE_REASON_EOF) << kind;
    // The lying ring: its one whole record and its drop count, nothing past the damage.
    EXPECT_EQ(t.closed.at(1).ring_records_recovered(), kind == "lying" || kind == "three" ? 1u : 0u)
        << kind;
    EXPECT_EQ(t.closed.at(1).ring_drops_recovered(), kind == "lying" || kind == "three" ? 7u : 0u)
        << kind;
    const Result report = RunCli({"report", out});
    EXPECT_EQ(report.exit_code, 0) << kind << ": " << report.err;
  }
}

// A program that dies leaves its PyTorch allocator events in the ring: the collector reads
// them in the current layout's short record and in layout 1's form alike, every field intact.
TEST_F(CliEndToEnd, TorchEventsLeftInTheSharedRingAreRecoveredInEitherLayout) {
  for (const std::string kind : {"torch", "torch-v1"}) {
    const std::string out = tmp_ + "/ring-" + kind;
    const Result r = RunCli({"run", "-o", out, "--", kFake, "--batches=1", "--ring=" + kind});
    EXPECT_EQ(r.exit_code, 0) << kind << ": " << r.err;
    EXPECT_EQ(r.err.find("shared ring ignored"), std::string::npos) << kind << ": " << r.err;
    const TraceContents t = ReadTrace(out + "/trace.cmtrace");
    ASSERT_EQ(t.closed.count(1), 1u) << kind;
    EXPECT_EQ(t.closed.at(1).ring_records_recovered(), 2u) << kind;
    ASSERT_EQ(t.torch_events.size(), 2u) << kind;
    for (uint64_t n = 1; n <= 2; ++n) {
      const v1::TorchAllocatorEvent& e = t.torch_events[n - 1];
      EXPECT_EQ(t.torch_event_times[n - 1], 1000 * n) << kind;
      EXPECT_EQ(e.action(), static_cast<v1::TorchAllocatorAction>(n)) << kind;
      EXPECT_EQ(e.thread_id(), 100 + n) << kind;
      EXPECT_EQ(e.device(), 2 + n) << kind;
      EXPECT_EQ(e.address(), 0x7f0000000000ull) << kind;
      EXPECT_EQ(e.requested_bytes(), 4000 + n) << kind;
      EXPECT_EQ(e.stream(), 5 + n) << kind;
      EXPECT_EQ(e.sequence(), 50 + n) << kind;
      EXPECT_EQ(e.allocated_bytes_total(), n == 1 ? 4096u : 0u) << kind;
      EXPECT_EQ(e.allocated_bytes_current(), n == 1 ? 8192u : 0u) << kind;
      EXPECT_EQ(e.reserved_bytes_current(), n == 1 ? 2u << 20 : 0u) << kind;
      EXPECT_EQ(e.pool_id_first(), 10 + n) << kind;
      EXPECT_EQ(e.pool_id_second(), 20 + n) << kind;
    }
  }
}

// Tensor events left in the per-thread buffers after the ring (fake_tracer.cc's
// --ring=thread-buffers): each slot is read from the later of its freed position and the
// position the received batches reach, up to its commit, with the stream in effect.
TEST_F(CliEndToEnd, TensorEventsLeftInThreadBuffersAreRecoveredPastWhatWasSent) {
  const std::string out = tmp_ + "/thread-buffers";
  const Result r =
      RunCli({"run", "-o", out, "--", kFake, "--batches=1", "--ring=thread-buffers"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("shared ring ignored"), std::string::npos) << r.err;
  const TraceContents t = ReadTrace(out + "/trace.cmtrace");
  ASSERT_EQ(t.closed.count(1), 1u);
  EXPECT_EQ(t.closed.at(1).ring_records_recovered(), 5u);
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t, uint32_t, uint64_t>> seen;
  for (size_t i = 0; i < t.torch_events.size(); ++i) {
    const v1::TorchAllocatorEvent& e = t.torch_events[i];
    EXPECT_EQ(e.address(), 0x7e0000000000ull + e.device() * 0x1000 + e.sequence());
    EXPECT_EQ(e.requested_bytes(), 512 * e.sequence());
    EXPECT_EQ(e.action(), v1::TORCH_ALLOCATOR_ACTION_ALLOC);
    seen.emplace_back(e.device(), e.sequence(), e.stream(), e.thread_id(), t.torch_event_times[i]);
  }
  std::sort(seen.begin(), seen.end());
  const std::vector<std::tuple<uint32_t, uint64_t, uint64_t, uint32_t, uint64_t>> expected = {
      {1, 3, 9, 301, 3000}, {1, 4, 9, 301, 4000}, {1, 5, 9, 301, 5000},
      {2, 2, 8, 302, 4000}, {2, 3, 8, 302, 6000}};
  EXPECT_EQ(seen, expected);
}

TEST_F(CliEndToEnd, ConnectionEndingInsideAFrameKeepsTheWholeFrames) {
  const std::string out = tmp_ + "/out";
  const Result r = RunCli({"run", "-o", out, "--", kFake, "--batches=3", "--partial-frame"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  TraceContents t = ReadTrace(out + "/trace.cmtrace");
  EXPECT_EQ(t.batches.at(1), 3);
  EXPECT_EQ(t.closed.at(1).reason(), v1::CLOSE_REASON_EOF);
  EXPECT_NE(t.closed.at(1).error().find("inside a frame"), std::string::npos);
}

TEST_F(CliEndToEnd, MissingProgramExits127AndLeavesNoFolder) {
  const Result r = RunCli({"run", "--", "cumemtrace-no-such-program"}, tmp_);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.err,
            "cumemtrace: cannot run 'cumemtrace-no-such-program': No such file or directory\n");
  EXPECT_TRUE(fs::is_empty(tmp_));
}

TEST_F(CliEndToEnd, NonExecutableProgramExits126AndLeavesNoFolder) {
  const std::string script = tmp_ + "/not-executable";
  { std::ofstream(script) << "#!/bin/sh\n"; }
  chmod(script.c_str(), 0644);
  const std::string out = tmp_ + "/out";
  const Result r = RunCli({"run", "-o", out, "--", script}, tmp_);
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CliEndToEnd, OutputOntoAnExistingTraceIsRefusedAndLeftUntouched) {
  const std::string out = tmp_ + "/out";
  fs::create_directory(out);
  const std::string previous = "CMTRACE\x01 an earlier trace";
  { std::ofstream(out + "/trace.cmtrace", std::ios::binary) << previous; }
  const Result r = RunCli({"run", "-o", out, "--", kFake, "--print-lines=1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");  // the program never ran
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_EQ(ReadFile(out + "/trace.cmtrace"), previous);
  EXPECT_FALSE(fs::exists(out + "/summary.json"));
}

TEST_F(CliEndToEnd, DefaultOutputFoldersAreNumbered) {
  for (int i = 0; i < 2; ++i) {
    const Result r = RunCli({"run", kFake, "--batches=1"}, tmp_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string base = tmp_ + "/cumemtrace-" + fs::path(kFake).filename().string();
  EXPECT_TRUE(fs::exists(base + "-1/trace.cmtrace"));
  EXPECT_TRUE(fs::exists(base + "-2/trace.cmtrace"));
}

TEST_F(CliEndToEnd, PythonRunsAreNamedAfterTheScriptAndRunSaysWhereThePageIs) {
  // An interpreter named python3.12 (the fake client under that name): the folder is named
  // after the script or module, not the interpreter; run ends by saying what to open.
  const std::string python = tmp_ + "/python3.12";
  fs::create_symlink(kFake, python);
  const Result script = RunCli({"run", "--quiet", "--", python, "-X", "dev", "train.py"}, tmp_);
  EXPECT_TRUE(fs::exists(tmp_ + "/cumemtrace-train-1/trace.cmtrace")) << script.err;
  EXPECT_NE(script.err.find("open cumemtrace-train-1/report.html"), std::string::npos)
      << script.err;
  EXPECT_TRUE(fs::exists(tmp_ + "/cumemtrace-train-1/report.html"));
  const Result module = RunCli({"run", "--quiet", "--", python, "-m", "pkg.train_ep"}, tmp_);
  EXPECT_TRUE(fs::exists(tmp_ + "/cumemtrace-train_ep-1/trace.cmtrace")) << module.err;
}

TEST_F(CliEndToEnd, MissingTracerIsAUsageError) {
  const Result r = RunCli({"run", kFake}, tmp_, {{"CUMEMTRACE_TRACER_LIB", "/nonexistent.so"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tracer library"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(tmp_));
}

TEST_F(CliEndToEnd, ProgramStdoutIsByteIdenticalUnderRun) {
  const Result direct = Finish(Spawn({kFake, "--no-connect", "--print-lines=3000"}, tmp_, {}));
  ASSERT_EQ(direct.exit_code, 0);
  const Result traced =
      RunCli({"run", "-o", tmp_ + "/out", "--", kFake, "--print-lines=3000"}, tmp_);
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, direct.out);
  EXPECT_GT(direct.out.size(), 3000u);
}

TEST_F(CliEndToEnd, ChildEnvironmentCarriesTheInjection) {
  const std::vector<std::string> vars = {
      "--print-env=LD_PRELOAD", "--print-env=CUDA_INJECTION64_PATH",
      "--print-env=NVTX_INJECTION64_PATH", "--print-env=PYTORCH_CUDA_ALLOC_CONF",
      "--print-env=CUMEMTRACE_ALLOCATOR_MODE", "--print-env=CUMEMTRACE_KERNELS",
      "--print-env=CUMEMTRACE_QUIET"};
  const std::string stub = fs::canonical(kStub).string();
  {
    // The default leaves PyTorch's allocator as the program has it.
    std::vector<std::string> args = {"run", "-o", tmp_ + "/a", "--", kFake, "--no-connect"};
    args.insert(args.end(), vars.begin(), vars.end());
    const Result r = RunCli(args, "", {{"LD_PRELOAD", "libother.so"}});
    EXPECT_EQ(r.out, "LD_PRELOAD=" + stub + ":libother.so\nCUDA_INJECTION64_PATH=" + stub +
                         "\nNVTX_INJECTION64_PATH=" + stub +
                         "\nPYTORCH_CUDA_ALLOC_CONF unset\n"
                         "CUMEMTRACE_ALLOCATOR_MODE=native\nCUMEMTRACE_KERNELS unset\n"
                         "CUMEMTRACE_QUIET unset\n");
  }
  {
    std::vector<std::string> args = {"run", "-o", tmp_ + "/a2", "--allocator=async", "--",
                                     kFake, "--no-connect"};
    args.insert(args.end(), vars.begin(), vars.end());
    const Result r = RunCli(args);
    EXPECT_NE(r.out.find("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync\n"
                         "CUMEMTRACE_ALLOCATOR_MODE=async\n"),
              std::string::npos)
        << r.out;
  }
  {
    std::vector<std::string> args = {"run", "-o", tmp_ + "/b", "--allocator=native",
                                      "--no-kernels", "--quiet", "--", kFake, "--no-connect"};
    args.insert(args.end(), vars.begin(), vars.end());
    const Result r = RunCli(args, "", {{"CUDA_INJECTION64_PATH", "/other/inject.so"}});
    EXPECT_EQ(r.out, "LD_PRELOAD=" + stub + "\nCUDA_INJECTION64_PATH=/other/inject.so\n"
                         "NVTX_INJECTION64_PATH=" + stub +
                         "\nPYTORCH_CUDA_ALLOC_CONF unset\nCUMEMTRACE_ALLOCATOR_MODE=native\n"
                         "CUMEMTRACE_KERNELS=0\nCUMEMTRACE_QUIET=1\n");
  }
  {
    // --modules and --ops each set their own variable only.
    std::vector<std::string> args = {"run", "-o", tmp_ + "/m", "--ops", "--", kFake};
    for (const char* arg :
         {"--no-connect", "--print-env=CUMEMTRACE_MODULES", "--print-env=CUMEMTRACE_OPS"}) {
      args.push_back(arg);
    }
    EXPECT_EQ(RunCli(args, "", {}).out, "CUMEMTRACE_MODULES unset\nCUMEMTRACE_OPS=1\n");
    args[2] = tmp_ + "/m2";
    args[3] = "--modules";
    EXPECT_EQ(RunCli(args, "", {}).out, "CUMEMTRACE_MODULES=1\nCUMEMTRACE_OPS unset\n");
    args[2] = tmp_ + "/m3";
    args.insert(args.begin() + 4, "--ops");
    EXPECT_EQ(RunCli(args, "", {}).out, "CUMEMTRACE_MODULES=1\nCUMEMTRACE_OPS=1\n");
  }
  {
    // --kernels turns CUPTI's per-kernel GPU records on.
    std::vector<std::string> args = {"run", "-o", tmp_ + "/k", "--kernels", "--", kFake,
                                     "--no-connect", "--print-env=CUMEMTRACE_KERNELS"};
    const Result r = RunCli(args, "", {});
    EXPECT_EQ(r.out, "CUMEMTRACE_KERNELS=1\n");
  }
  {
    // --kernels=launches counts launches without GPU records; anything else is refused.
    std::vector<std::string> args = {"run", "-o", tmp_ + "/l", "--kernels=launches", "--", kFake,
                                     "--no-connect", "--print-env=CUMEMTRACE_KERNELS"};
    EXPECT_EQ(RunCli(args, "", {}).out, "CUMEMTRACE_KERNELS=launches\n");
    args[3] = "--kernels=records";
    args[2] = tmp_ + "/r";
    EXPECT_EQ(RunCli(args, "", {}).out, "CUMEMTRACE_KERNELS=1\n");
    args[3] = "--kernels=all";
    args[2] = tmp_ + "/x";
    const Result bad = RunCli(args, "", {});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("--kernels must be 'records' or 'launches', not 'all'"),
              std::string::npos)
        << bad.err;
  }
  {
    std::vector<std::string> args = {"run", "-o", tmp_ + "/c", "--", kFake, "--no-connect",
                                     "--print-env=PYTORCH_CUDA_ALLOC_CONF",
                                     "--print-env=CUMEMTRACE_ALLOCATOR_MODE"};
    const Result r = RunCli(args, "", {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}});
    EXPECT_EQ(r.out,
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nCUMEMTRACE_ALLOCATOR_MODE=user\n");
  }
}

// A Python program whose torch has no bridge beside the tracer: `run` builds one into the
// per-user cache before the program starts (once: the next run reuses it) and points the
// tracer at it; without a compiler it says why and the run goes on without one.
TEST_F(CliEndToEnd, RunBuildsTheBridgeForThePythonProgramsTorchOnceIntoTheCache) {
  const std::string torch = tmp_ + "/site-packages/torch";
  fs::create_directories(torch + "/include/c10/cuda");
  std::ofstream(torch + "/include/c10/cuda/CUDACachingAllocator.h") << "#pragma once\n";
  fs::create_directories(tmp_ + "/bin");
  // python3: answers the probe with that torch, else runs the program (the fake tracer).
  const std::string python = tmp_ + "/bin/python3";
  std::ofstream(python) << "#!/bin/sh\n"
                        << "if [ \"$1\" = -c ]; then printf 'cumemtrace-torch\\t2.11.0+cu130\\t1\\t"
                        << torch << "\\n'; exit 0; fi\n"
                        << "exec " << kFake << " --print-env=CUMEMTRACE_TORCH_BRIDGE_DIR\n";
  // A compiler that counts its runs and writes the library it is asked for.
  const std::string cxx = tmp_ + "/bin/cxx";
  std::ofstream(cxx) << "#!/bin/sh\necho run >> " << tmp_ << "/compiles\n"
                     << "prev=; for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
                     << ": > \"$out\"\n";
  chmod(python.c_str(), 0755);
  chmod(cxx.c_str(), 0755);
  const EnvOverrides env = {{"XDG_CACHE_HOME", tmp_ + "/cache"},
                            {"CXX", cxx},
                            {"CUMEMTRACE_TORCH_BRIDGE_DIR", std::nullopt},
                            {"PYTORCH_CUDA_ALLOC_CONF", std::nullopt}};
  const std::string dir =
      tmp_ + "/cache/cumemtrace/bridges/torch-2.11.0+cu130-cxx11abi-cumemtrace-" +
      CUMEMTRACE_VERSION + "-bridge" + std::to_string(CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION);
  auto compiles = [this] {
    std::ifstream in(tmp_ + "/compiles");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  Result r = RunCli({"run", "-o", tmp_ + "/a", "--", python, "train.py"}, tmp_, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("CUMEMTRACE_TORCH_BRIDGE_DIR=" + dir + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("cumemtrace: building the PyTorch bridge for torch 2.11.0+cu130"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cumemtrace: PyTorch bridge for torch 2.11.0+cu130 built in "),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::exists(dir + "/libcumemtrace-torch-bridge-2.11.0.so"));
  EXPECT_EQ(compiles(), 1);

  r = RunCli({"run", "-o", tmp_ + "/b", "--", python, "train.py"}, tmp_, env);
  EXPECT_NE(r.out.find("CUMEMTRACE_TORCH_BRIDGE_DIR=" + dir + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("PyTorch bridge"), std::string::npos) << r.err;
  EXPECT_EQ(compiles(), 1);

  r = RunCli({"run", "--no-bridge-build", "-o", tmp_ + "/c", "--", python, "t.py"}, tmp_, env);
  EXPECT_NE(r.out.find("CUMEMTRACE_TORCH_BRIDGE_DIR unset"), std::string::npos) << r.out;
  EnvOverrides bridge_off = env;
  bridge_off.emplace_back("CUMEMTRACE_TORCH_BRIDGE", "0");
  r = RunCli({"run", "-o", tmp_ + "/c2", "--", python, "t.py"}, tmp_, bridge_off);
  EXPECT_NE(r.out.find("CUMEMTRACE_TORCH_BRIDGE_DIR unset"), std::string::npos) << r.out;

  fs::remove_all(tmp_ + "/cache");
  EnvOverrides no_compiler = env;
  no_compiler[1].second = tmp_ + "/bin/no-such-cxx";
  r = RunCli({"run", "-o", tmp_ + "/d", "--", python, "train.py"}, tmp_, no_compiler);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("CUMEMTRACE_TORCH_BRIDGE_DIR unset"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("cumemtrace: no PyTorch bridge for torch 2.11.0+cu130: no C++ compiler"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::exists(tmp_ + "/d/summary.json"));
  EXPECT_EQ(compiles(), 1);
}

TEST_F(CliEndToEnd, UsageErrorsExit2WithOneMessage) {
  const std::vector<std::vector<std::string>> cases = {
      {}, {"frobnicate"}, {"run"}, {"run", "--bogus", kFake}, {"run", "--allocator=fast", kFake},
      {"report"}, {"daemon", "extra"}};
  for (const auto& args : cases) {
    const Result r = RunCli(args, tmp_);
    EXPECT_EQ(r.exit_code, 2) << (args.empty() ? "(none)" : args[0]);
    EXPECT_EQ(r.out, "");
  }
  const Result unknown = RunCli({"frobnicate"});
  EXPECT_EQ(unknown.err.rfind("cumemtrace: ", 0), 0u) << unknown.err;
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1);
  EXPECT_TRUE(fs::is_empty(tmp_));
}

TEST_F(CliEndToEnd, HelpAndVersion) {
  for (const char* command : {"run", "report", "daemon"}) {
    const Result r = RunCli({command, "--help"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find(std::string("Usage: cumemtrace ") + command), std::string::npos);
  }
  const Result help = RunCli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Commands:"), std::string::npos);
  const Result version = RunCli({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("cumemtrace ", 0), 0u);
}

// --- report -----------------------------------------------------------------------------

TEST_F(CliEndToEnd, ReportReadsAFolderAFileAndATruncatedCopy) {
  const std::string out = tmp_ + "/out";
  ASSERT_EQ(RunCli({"run", "-o", out, "--", kFake, "--batches=8", "--events=20"}).exit_code, 0);
  const std::string trace = out + "/trace.cmtrace";

  const Result from_folder = RunCli({"report", out});
  EXPECT_EQ(from_folder.exit_code, 0) << from_folder.err;
  EXPECT_FALSE(from_folder.out.empty());
  const Result json = RunCli({"report", "--json", trace});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out, ReadFile(out + "/summary.json") +
                          (ReadFile(out + "/summary.json").back() == '\n' ? "" : "\n"));

  const std::string whole = ReadFile(trace);
  const std::string cut = tmp_ + "/cut.cmtrace";
  { std::ofstream(cut, std::ios::binary) << whole.substr(0, whole.size() * 2 / 3); }
  const Result truncated = RunCli({"report", cut});
  EXPECT_EQ(truncated.exit_code, 0) << truncated.err;
  EXPECT_NE(truncated.err.find("cumemtrace: warning: "), std::string::npos) << truncated.err;
  EXPECT_NE(truncated.err.find("cut short"), std::string::npos) << truncated.err;
  EXPECT_FALSE(truncated.out.empty());
}

TEST_F(CliEndToEnd, ReportWritesSummaryJsonOnlyWhereAllowed) {
  const std::string out = tmp_ + "/out";
  ASSERT_EQ(RunCli({"run", "-o", out, "--", kFake}).exit_code, 0);
  const std::string dest = tmp_ + "/dest";
  EXPECT_EQ(RunCli({"report", "-o", dest, out}).exit_code, 0);
  EXPECT_EQ(ReadFile(dest + "/summary.json"), ReadFile(out + "/summary.json"));
  { std::ofstream(dest + "/summary.json") << "mine"; }
  const Result refused = RunCli({"report", "-o", dest, out});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(ReadFile(dest + "/summary.json"), "mine");
  EXPECT_EQ(RunCli({"report", "--force", "-o", dest, out}).exit_code, 0);
  EXPECT_EQ(ReadFile(dest + "/summary.json"), ReadFile(out + "/summary.json"));
}

TEST_F(CliEndToEnd, ReportOnANonTraceFailsWithOneMessage) {
  const std::string text = tmp_ + "/notes.txt";
  { std::ofstream(text) << "hello, not a trace\n"; }
  for (const std::string& path : {text, tmp_ + "/missing.cmtrace", tmp_}) {
    const Result r = RunCli({"report", path});
    EXPECT_EQ(r.exit_code, 1) << path;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("cumemtrace: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// --- daemon -----------------------------------------------------------------------------

// Reads stderr of a running daemon line by line, with a deadline so a broken daemon fails
// the test instead of hanging it.
TEST_F(CliEndToEnd, DaemonServesManyConcurrentClientsIntoOneFileEach) {
  const std::string socket = tmp_ + "/sock/collector.sock";
  const std::string traces = tmp_ + "/traces";
  Child daemon =
      Spawn({kCli, "daemon", "--socket", socket, "--output-dir", traces}, tmp_, {});
  LineReader daemon_log(daemon.err_fd);
  const std::optional<std::string> ready = daemon_log.Next();
  ASSERT_TRUE(ready.has_value());
  ASSERT_NE(ready->find("listening on " + socket), std::string::npos) << *ready;
  EXPECT_EQ(FileMode(tmp_ + "/sock"), 0700u);

  // Every client handshakes, then waits on a shared pipe until all of them are connected,
  // so the daemon really holds kClients open streams at once.
  constexpr int kClients = 10;
  int barrier[2];
  ASSERT_EQ(pipe2(barrier, O_CLOEXEC), 0);
  std::vector<Child> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(Spawn({kFake, "--socket=" + socket, "--batches=" + std::to_string(i + 1),
                             "--events=5", "--wait-fd=3"},
                            tmp_, {}, barrier[0]));
  }
  close(barrier[0]);
  for (int opened = 0; opened < kClients;) {
    const std::optional<std::string> line = daemon_log.Next();
    ASSERT_TRUE(line.has_value()) << "daemon went quiet after " << opened << " opened streams";
    if (line->find(" opened -> ") != std::string::npos) ++opened;
  }
  close(barrier[1]);  // go
  std::map<uint32_t, int> expected_events;  // by pid
  for (int i = 0; i < kClients; ++i) {
    const Result r = Finish(clients[i]);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    expected_events[static_cast<uint32_t>(clients[i].pid)] = (i + 1) * 5;
  }
  int closed = 0;
  while (closed < kClients) {
    const std::optional<std::string> line = daemon_log.Next();
    ASSERT_TRUE(line.has_value()) << "daemon went quiet after " << closed << " closed streams";
    if (line->find(" closed: end of stream") != std::string::npos) ++closed;
  }
  kill(daemon.pid, SIGTERM);
  const Result stopped = Finish(daemon);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_FALSE(fs::exists(socket));

  std::map<uint32_t, int> seen_events;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(traces)) {
    ++files;
    const std::string path = entry.path().string();
    EXPECT_EQ(entry.path().extension(), ".cmtrace");
    EXPECT_EQ(FileMode(path), 0600u) << path;
    TraceContents t = ReadTrace(path);
    EXPECT_EQ(t.end, TraceFileReader::Result::kEnd) << path << ": " << t.error;
    ASSERT_EQ(t.handshakes.size(), 1u) << path;
    const uint32_t stream = t.handshakes.begin()->first;
    const uint32_t pid = t.handshakes.begin()->second.pid();
    EXPECT_NE(path.find("-" + std::to_string(pid) + "-"), std::string::npos) << path;
    EXPECT_EQ(t.opened.count(stream), 1u);
    EXPECT_EQ(t.closed.at(stream).reason(), v1::CLOSE_REASON_EOF);
    seen_events[pid] = t.events[stream];
  }
  EXPECT_EQ(files, kClients);
  EXPECT_EQ(seen_events, expected_events);
}

TEST_F(CliEndToEnd, DaemonClosesStreamsStillOpenAtShutdown) {
  const std::string socket = tmp_ + "/sock/collector.sock";
  const std::string traces = tmp_ + "/traces";
  Child daemon = Spawn({kCli, "daemon", "--socket", socket, "--output-dir", traces}, tmp_, {});
  LineReader daemon_log(daemon.err_fd);
  ASSERT_TRUE(daemon_log.Next().has_value());
  // This client sends its batches and then keeps the connection open until killed.
  Child client = Spawn({kFake, "--socket=" + socket, "--batches=2", "--hold"}, tmp_, {});
  LineReader client_out(client.out_fd);
  ASSERT_EQ(client_out.Next(), std::optional<std::string>("holding"));
  // The batches may still sit in the socket buffer: shutdown must take them in first.
  kill(daemon.pid, SIGINT);
  const Result stopped = Finish(daemon);
  kill(client.pid, SIGKILL);
  Finish(client);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_NE(stopped.err.find("closed: collector shutdown"), std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("daemon stopped"), std::string::npos) << stopped.err;
  EXPECT_FALSE(fs::exists(socket));
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(traces)) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);
  TraceContents t = ReadTrace(files[0].string());
  EXPECT_EQ(t.closed.at(1).reason(), v1::CLOSE_REASON_COLLECTOR_SHUTDOWN);
  EXPECT_EQ(t.batches.at(1), 2);  // what had arrived before the stop was kept
}

TEST_F(CliEndToEnd, DaemonRefusesASocketDirectoryOthersCanReach) {
  const std::string dir = tmp_ + "/open";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  const Result r = RunCli({"daemon", "--socket", dir + "/collector.sock", "--output-dir",
                           tmp_ + "/traces"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("0755"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/collector.sock"));
  EXPECT_FALSE(fs::exists(tmp_ + "/traces"));
}

TEST_F(CliEndToEnd, DaemonPrintEnvNamesTheTracerAndSocket) {
  const Result r = RunCli({"daemon", "--print-env", "--socket", tmp_ + "/s/c.sock"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string stub = fs::canonical(kStub).string();
  EXPECT_NE(r.out.find("export LD_PRELOAD=" + stub), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("export CUDA_INJECTION64_PATH=" + stub), std::string::npos);
  EXPECT_NE(r.out.find("export NVTX_INJECTION64_PATH=" + stub), std::string::npos);
  EXPECT_NE(r.out.find("export CUMEMTRACE_SOCKET=" + tmp_ + "/s/c.sock"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp_ + "/s"));
}

// --- compare and sweep -------------------------------------------------------------------

constexpr int kExitUsageCode = 2;

TEST_F(CliEndToEnd, SweepRunsEveryValueOfEveryCommandAndTabulatesThePeaks) {
  // The fake client allocates --events MiB per batch and never frees: peak = batches x events.
  const std::string out = tmp_ + "/sweep";
  const Result r = RunCli({"sweep", "-o", out, "--param", "n=1,3", "--run",
                           "A=" + kFake + " --events={n}", "--run",
                           "B=" + kFake + " --events={n} --batches=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream table(r.out);
  std::string header, row1, row3;
  std::getline(table, header);
  std::getline(table, row1);
  std::getline(table, row3);
  EXPECT_NE(header.find("A peak"), std::string::npos) << r.out;
  EXPECT_NE(header.find("B activation"), std::string::npos) << r.out;
  EXPECT_EQ(row3.rfind("3 ", 0), 0u) << r.out;
  EXPECT_NE(row3.find("9.0 MiB"), std::string::npos) << r.out;  // A: 3 batches x 3 MiB
  EXPECT_NE(row3.find("6.0 MiB"), std::string::npos) << r.out;  // B: 2 batches x 3 MiB
  std::ifstream csv(out + "/sweep.csv");
  std::string line;
  std::map<std::string, std::string> peak;  // "label,n" -> peak_bytes
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("label,n,exit_status,peak_bytes,", 0), 0u) << line;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_GE(f.size(), 4u) << line;
    peak[f[0] + "," + f[1]] = f[3];
  }
  EXPECT_EQ(peak, (std::map<std::string, std::string>{{"A,1", "3145728"}, {"A,3", "9437184"},
                                                       {"B,1", "2097152"}, {"B,3", "6291456"}}));
  EXPECT_TRUE(fs::exists(out + "/A-n=3/trace.cmtrace"));
  // One progress line per step before and after it, and where the page is.
  EXPECT_NE(r.err.find("sweep 1/4: A n=1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sweep 4/4: B n=3 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("open " + out + "/sweep.html"), std::string::npos) << r.err;
  // --json: the same points as JSON, each with its run's page.
  const Result json = RunCli({"sweep", "--json", "-o", tmp_ + "/sweep-json", "--param", "n=2",
                              "--", kFake, "--events={n}"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"schema\": \"cumemtrace.sweep/1\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"peak_bytes\": 6291456"), std::string::npos) << json.out;  // 3 x 2 MiB
  EXPECT_NE(json.out.find("\"page\": \"run-n=2/report.html\""), std::string::npos) << json.out;
  EXPECT_TRUE(fs::exists(tmp_ + "/sweep-json/run-n=2/report.html"));
  // The sweep fails (status 1) when a run fails, and says so in the table.
  const Result failing = RunCli({"sweep", "-o", tmp_ + "/failing", "--param", "code=0,5", "--",
                                 kFake, "--exit={code}"});
  EXPECT_EQ(failing.exit_code, 1) << failing.err;
  EXPECT_NE(failing.out.find("(exit 5)"), std::string::npos) << failing.out;
}

TEST_F(CliEndToEnd, SweepUsageErrors) {
  EXPECT_EQ(RunCli({"sweep", "--", kFake}).exit_code, kExitUsageCode);
  EXPECT_EQ(RunCli({"sweep", "--param", "n=", "--", kFake}).exit_code, kExitUsageCode);
  EXPECT_EQ(RunCli({"sweep", "--param", "n=1", "--run", "nolabel"}).exit_code, kExitUsageCode);
  EXPECT_EQ(RunCli({"sweep", "--param", "n=1", "--run", "A=$(rm -rf /)"}).exit_code,
            kExitUsageCode);  // no command substitution, ever
}

TEST_F(CliEndToEnd, CompareGoldenRunsWithDifferencesAndCsv) {
  const std::string golden = GOLDEN_DIR;
  const std::string csv = tmp_ + "/compare.csv";
  const Result r = RunCli({"compare", "--csv", csv, "async=" + golden + "/torch_async.cmtrace",
                           "native=" + golden + "/torch_native.cmtrace"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("vs async"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer: peak"), std::string::npos) << r.out;
  std::ifstream in(csv);
  std::string line;
  std::string async_peak, native_peak;
  while (std::getline(in, line)) {
    if (line.find(",peak,") == std::string::npos) continue;
    if (line.rfind("async,", 0) == 0) async_peak = line;
    if (line.rfind("native,", 0) == 0) native_peak = line;
  }
  // The device peaks of the golden traces, and native's difference from async.
  EXPECT_NE(async_peak.find(",876564684,0\r"), std::string::npos) << async_peak;
  EXPECT_NE(native_peak.find(",883165184,6600500\r"), std::string::npos) << native_peak;
  // --json and --html: the figures as JSON with differences, and the compare page.
  const std::string html = tmp_ + "/compare.html";
  const Result j = RunCli({"compare", "--json", "--html", html,
                           "async=" + golden + "/torch_async.cmtrace",
                           "native=" + golden + "/torch_native.cmtrace"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_NE(j.out.find("\"schema\": \"cumemtrace.compare/1\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"peak_bytes\": 876564684"), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"peak_bytes\": 6600500"), std::string::npos) << j.out;  // the difference
  EXPECT_NE(ReadFile(html).find("\"mode\":\"compare\""), std::string::npos);
  EXPECT_NE(j.err.find("open " + html), std::string::npos) << j.err;
  EXPECT_EQ(RunCli({"compare", "--html", html, golden + "/torch_async.cmtrace",
                    golden + "/torch_native.cmtrace"})
                .exit_code,
            kExitUsageCode);  // never overwrites
  EXPECT_EQ(RunCli({"compare", golden + "/torch_async.cmtrace"}).exit_code, kExitUsageCode);
  EXPECT_EQ(RunCli({"compare", "--csv", csv, golden + "/torch_async.cmtrace",
                    golden + "/torch_native.cmtrace"})
                .exit_code,
            kExitUsageCode);  // never overwrites
}

TEST_F(CliEndToEnd, ReportTakesPhaseRulesAndAnIterationRange) {
  const std::string rules = tmp_ + "/rules.txt";
  std::ofstream(rules) << "# the golden trace's ranges, renamed\nforward = fwd_renamed\n";
  const Result r = RunCli({"report", "--json", "--phase-rules", rules, "--iteration", "fwd_renamed",
                           std::string(GOLDEN_DIR) + "/torch_async.cmtrace"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"name\": \"fwd_renamed\""), std::string::npos);
  EXPECT_NE(r.out.find("\"range\": \"fwd_renamed\""), std::string::npos);
  std::ofstream(tmp_ + "/bad.txt") << "/(/ = x\n";
  const Result bad = RunCli({"report", "--phase-rules", tmp_ + "/bad.txt",
                             std::string(GOLDEN_DIR) + "/torch_async.cmtrace"});
  EXPECT_EQ(bad.exit_code, kExitUsageCode);
  EXPECT_NE(bad.err.find("bad.txt:1: bad regular expression"), std::string::npos) << bad.err;
}

TEST_F(CliEndToEnd, MergeCombinesHostsTracesIntoOneAndNeverOverwrites) {
  // Two "hosts": two separate runs, each with its own collector and trace.
  ASSERT_EQ(RunCli({"run", "-o", tmp_ + "/host-a", "--", kFake, "--batches=2", "--events=3"})
                .exit_code,
            0);
  ASSERT_EQ(RunCli({"run", "-o", tmp_ + "/host-b", "--", kFake, "--batches=4", "--events=5"})
                .exit_code,
            0);
  const std::string merged = tmp_ + "/job.cmtrace";
  const Result r = RunCli({"merge", "-o", merged, tmp_ + "/host-a", tmp_ + "/host-b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FileMode(merged), 0600u);
  TraceContents t = ReadTrace(merged);
  EXPECT_EQ(t.end, TraceFileReader::Result::kEnd) << t.error;
  ASSERT_EQ(t.handshakes.size(), 2u);  // renumbered apart, not folded into one stream
  std::vector<int> events;
  for (const auto& [stream, n] : t.events) events.push_back(n);
  std::sort(events.begin(), events.end());
  EXPECT_EQ(events, (std::vector<int>{6, 20}));  // every event of both hosts, byte for byte
  EXPECT_EQ(t.launcher_exits.size(), 2u);
  const Result report = RunCli({"report", "--json", merged});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  const std::string before = ReadFile(merged);
  EXPECT_EQ(RunCli({"merge", "-o", merged, tmp_ + "/host-a"}).exit_code, kExitUsageCode);
  EXPECT_EQ(ReadFile(merged), before);
  EXPECT_EQ(RunCli({"merge", "-o", tmp_ + "/x.cmtrace", tmp_ + "/missing"}).exit_code, 1);
}

}  // namespace
}  // namespace cumemtrace
