// Budgets from the command line, end to end: `check` on golden traces, `run --budget` with the
// fake tracer as the program, `compare --fail-above`, and the exit statuses CI reads from them
// (0 met, 86 exceeded, 2 a budget the trace cannot answer, the program's own status first).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "integration_tests/cpu/cli_test_support.h"

namespace cumemtrace {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = GOLDEN_DIR;
const std::string kAsync = kGolden + "/torch_async.cmtrace";    // PyTorch, H100, pid 1069
const std::string kNative = kGolden + "/torch_native.cmtrace";  // the same, native allocator
constexpr int kExceeded = 86;

class BudgetCli : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::MakeTempDir("cumemtrace-budget");
    ASSERT_FALSE(tmp_.empty());
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  std::string tmp_;
};

std::string LastLine(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  const size_t newline = trimmed.rfind('\n');
  return newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
}

TEST_F(BudgetCli, CheckMetAndExceededOnAGoldenTrace) {
  Result r = RunCli({"check", "--budget", "peak=1GiB", "--budget", "forward=600MiB", "--budget",
                     "activation=300MiB", kAsync});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(LastLine(r.out),
            "cumemtrace: budgets met: peak=1GiB; forward=600MiB; activation=300MiB")
      << r.out;

  // peak 876,564,684 B = 800 MiB + 37,703,884 B; backward rose 119,674,920 B above its entry.
  r = RunCli({"check", "-b", "peak=800MiB", "-b", "forward=600MiB", "-b", "rise:backward=100MiB",
              "-b", "peak@gpu0=2GiB", kAsync});
  EXPECT_EQ(r.exit_code, kExceeded) << r.out << r.err;
  EXPECT_EQ(LastLine(r.out),
            "cumemtrace: budget exceeded: peak by 36.0 MiB (836 MiB > 800 MiB, GPU 0 of pid 1069 "
            "at +5.724 s); rise:backward by 14.1 MiB (114 MiB > 100 MiB, GPU 0 of pid 1069)")
      << r.out;
  EXPECT_NE(r.out.find("EXCEEDED by 36.0 MiB (+4.5%)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak (GPU 0)"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;

  // --quiet: nothing when met, the table and verdict when not.
  r = RunCli({"check", "-q", "-b", "peak=1GiB", kAsync});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = RunCli({"check", "-q", "-b", "optimizer=800MiB", kAsync});
  EXPECT_EQ(r.exit_code, kExceeded);
  EXPECT_NE(LastLine(r.out).find("optimizer by 36.0 MiB"), std::string::npos) << r.out;
}

TEST_F(BudgetCli, CheckJsonSaysTheSameAsTheTable) {
  const Result r =
      RunCli({"check", "--json", "-b", "peak=800MiB", "-b", "backward@gpu0=1GiB", kAsync});
  EXPECT_EQ(r.exit_code, kExceeded) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const std::string j = r.out;
  EXPECT_NE(j.find("\"schema\": \"cumemtrace.budgets/1\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"exceeded\": true"), std::string::npos) << j;
  // peak: 876,564,684 B at 5,723,936,949 ns on GPU 0 of pid 1069, over 800 MiB.
  EXPECT_NE(j.find("\"budget\": \"peak=800MiB\",\n      \"key\": \"peak\",\n      "
                   "\"figure\": \"peak\",\n      \"scope\": \"every\""),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"bytes\": 876564684,\n        \"pid\": 1069,\n        \"rank\": null,"
                   "\n        \"device\": 0,\n        \"time_ns\": 5723936949"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"outcome\": \"exceeded\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"figure\": \"phase:backward\",\n      \"scope\": \"gpu\",\n      "
                   "\"scope_value\": 0"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"outcome\": \"met\""), std::string::npos) << j;
}

TEST_F(BudgetCli, CheckUsageErrorsNameTheValidKeys) {
  Result r = RunCli({"check", "-b", "forwrd=1GiB", kAsync});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("no figure 'forwrd' in this trace; valid keys here: peak, activation, "
                       "persistent, forward-to-backward, gradient, temporary, other, parameter, "
                       "buffer, optimizer_state, category:gradient, input, category:activation, "
                       "category:temporary, workspace, autograd_other, forward, backward, "
                       "optimizer"),
            std::string::npos)
      << r.err;
  // A plain CUDA program has no lifetime classes.
  r = RunCli({"check", "-b", "activation=1GiB", kGolden + "/cuda_phases.cmtrace"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("valid keys here: peak, setup, async"), std::string::npos) << r.err;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"check", "-b", "peak@gpu1=1GiB", kAsync},
        {"check", "-b", "peak", kAsync},
        {"check", "-b", "peak=lots", kAsync},
        {"check", kAsync},
        {"check", "-b", "peak=1GiB"}}) {
    r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << args[2] << r.err;
  }
  r = RunCli({"check", "-b", "peak=1GiB", tmp_ + "/missing.cmtrace"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST_F(BudgetCli, CheckReadsTheBudgetsOfATracedPytestSession) {
  const std::string run = tmp_ + "/run";
  fs::create_directories(run);
  fs::copy_file(kAsync, run + "/trace.cmtrace");
  std::ofstream(run + "/pytest-budgets.jsonl")
      << R"({"key": "rise:backward", "limit": "100 MiB", "test": "t.py::test_backward"})"
      << "\n";
  Result r = RunCli({"check", "-b", "peak=1GiB", run});
  EXPECT_EQ(r.exit_code, kExceeded) << r.out << r.err;
  EXPECT_NE(r.out.find("test t.py::test_backward   100 MiB  114 MiB"), std::string::npos) << r.out;
  EXPECT_NE(LastLine(r.out).find("test t.py::test_backward by 14.1 MiB"), std::string::npos)
      << r.out;
  std::ofstream(run + "/pytest-budgets.jsonl") << "{\"key\": 3}\n";
  r = RunCli({"check", "-b", "peak=1GiB", run});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("pytest-budgets.jsonl:1: not a budget"), std::string::npos) << r.err;
}

TEST_F(BudgetCli, RunExitsWithTheBudgetStatusOnlyWhenTheProgramSucceeded) {
  // The fake program allocates 2 x 3 MiB and never frees it: a peak of 6 MiB.
  Result r = RunCli({"run", "-o", tmp_ + "/a", "--budget", "peak=5MiB", "--", kFake, "--batches=2",
                     "--events=3"});
  EXPECT_EQ(r.exit_code, kExceeded) << r.err;
  EXPECT_EQ(LastLine(r.err).rfind("cumemtrace: budget exceeded: peak by 1.00 MiB (6.00 MiB > "
                                  "5.00 MiB, GPU 0 of pid ",
                                  0),
            0u)
      << r.err;
  r = RunCli({"run", "-o", tmp_ + "/b", "--budget", "peak=6MiB", "--", kFake, "--batches=2",
              "--events=3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LastLine(r.err), "cumemtrace: budgets met: peak=6MiB") << r.err;
  // The program's failure comes first; the verdict is still printed.
  r = RunCli({"run", "-o", tmp_ + "/c", "--budget", "peak=5MiB", "--", kFake, "--batches=2",
              "--events=3", "--exit=3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(LastLine(r.err).find("budget exceeded: peak by 1.00 MiB"), std::string::npos) << r.err;
  // A figure the run does not have: a usage error, after the run.
  r = RunCli({"run", "-o", tmp_ + "/d", "--budget", "forward=5MiB", "--", kFake, "--batches=1",
              "--events=1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no figure 'forward' in this trace; valid keys here: peak"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::exists(tmp_ + "/d/trace.cmtrace"));
  // A malformed budget: nothing runs, nothing is created.
  r = RunCli({"run", "-o", tmp_ + "/e", "--budget", "peak=5 parsecs", "--", kFake});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(tmp_ + "/e"));
  // The budget of a phase, through the fake program's range around each batch.
  r = RunCli({"run", "-o", tmp_ + "/f", "--budget", "load=1MiB", "--budget", "rise:load=2MiB", "--",
              kFake, "--batches=2", "--events=2", "--range=load"});
  EXPECT_EQ(r.exit_code, kExceeded) << r.err;
  EXPECT_NE(LastLine(r.err).find("budget exceeded: load by 3.00 MiB (4.00 MiB > 1.00 MiB"),
            std::string::npos)
      << r.err;
}

TEST_F(BudgetCli, CompareFailAboveAGrowthAgainstTheBaseline) {
  // The same run twice: nothing grew.
  Result r = RunCli({"compare", "--fail-above", "0%", "A=" + kAsync, "B=" + kAsync});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(LastLine(r.err), "cumemtrace: no figure grew more than 0% against A") << r.err;
  // Native against async: the peak grew 0.75%, persistent memory 45%.
  r = RunCli({"compare", "--fail-above", "5%", "async=" + kAsync, "native=" + kNative});
  EXPECT_EQ(r.exit_code, kExceeded) << r.err;
  EXPECT_NE(LastLine(r.err).find("grew more than 5% against async: native: lifetime:persistent "
                                 "+263 MiB (+45.3%), 580 MiB -> 842 MiB"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(LastLine(r.err).find("native: peak"), std::string::npos) << r.err;
  r = RunCli({"compare", "--fail-above", "0.5%", "async=" + kAsync, "native=" + kNative});
  EXPECT_NE(LastLine(r.err).find("native: peak +6.29 MiB (+0.8%)"), std::string::npos) << r.err;
  // An absolute limit: nothing grew by 300 MiB.
  r = RunCli({"compare", "--fail-above", "300MiB", "async=" + kAsync, "native=" + kNative});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunCli({"compare", "--fail-above", "lots", kAsync, kNative});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace cumemtrace
