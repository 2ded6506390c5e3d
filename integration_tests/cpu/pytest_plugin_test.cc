// The pytest plugin (integration/pytest/cumemtrace_pytest.py) under `cumemtrace run` with the
// real tracer, without a GPU: every test is its own range (a phase row of the summary), a
// gpu_memory_limit marker becomes a budget of the run, a malformed one stops pytest, and
// without cumemtrace the plugin only registers its marker.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "integration_tests/cpu/child_process.h"

namespace {

namespace fs = std::filesystem;

using cumemtrace::testing::ReadFile;
using cumemtrace::testing::Shell;

class PytestPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = cumemtrace::testing::MakeTempDir("cumemtrace-pytest");
    ASSERT_FALSE(tmp_.empty());
    // The first python3 on PATH that has pytest, by its real path (a version manager's shim
    // would run, and be traced as, a dozen shell processes first).
    Shell(
        "for p in $(which -a python3); do \"$p\" -c 'import pytest, sys; print(sys.executable)'"
        " 2>/dev/null && break; done > " +
        tmp_ + "/python");
    python_ = ReadFile(tmp_ + "/python");
    while (!python_.empty() && python_.back() == '\n') python_.pop_back();
    ASSERT_FALSE(python_.empty()) << "no python3 with pytest (tools/setup.sh installs it)";
    std::ofstream(tmp_ + "/test_sample.py") << R"(import os
import pytest

def test_plain():
    assert True

@pytest.mark.gpu_memory_limit("2 GiB")
def test_limited(tmp_path):
    os.chdir(tmp_path)  # the budget file is found by an absolute path all the same

@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n > 0
)";
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  // `cumemtrace run -o out -- python3 -m pytest ARGS` in tmp_; stdout and stderr to files.
  int Run(const std::string& pytest_args) {
    return Shell("cd " + tmp_ +
                 " && env -u CUMEMTRACE_TRACER_LIB -u CUMEMTRACE_SOCKET -u "
                 "PYTEST_PLUGINS -u PYTEST_ADDOPTS " CUMEMTRACE_BIN " run -o out -- " +
                 python_ + " -m pytest -q -p no:cacheprovider " + pytest_args + " > " + tmp_ +
                 "/stdout 2> " + tmp_ + "/stderr");
  }
  std::string tmp_;
  std::string python_;
};

TEST_F(PytestPlugin, EachTestIsItsOwnPhaseAndALimitIsABudget) {
  ASSERT_EQ(Run("--strict-markers test_sample.py"), 0)
      << ReadFile(tmp_ + "/stderr") << ReadFile(tmp_ + "/stdout");
  EXPECT_NE(ReadFile(tmp_ + "/stdout").find("4 passed"), std::string::npos)
      << ReadFile(tmp_ + "/stdout");
  const nlohmann::json summary = nlohmann::json::parse(ReadFile(tmp_ + "/out/summary.json"));
  std::vector<std::string> tests;
  for (const auto& process : summary["processes"]) {
    for (const auto& phase : process["phases"]) {
      EXPECT_EQ(phase["occurrences"], 1) << phase["name"];
      tests.push_back(phase["name"]);
    }
  }
  EXPECT_EQ(tests,
            (std::vector<std::string>{
                "pytest: test_sample.py::test_plain", "pytest: test_sample.py::test_limited",
                "pytest: test_sample.py::test_param[1]", "pytest: test_sample.py::test_param[2]"}));
  const nlohmann::json budget = nlohmann::json::parse(ReadFile(tmp_ + "/out/pytest-budgets.jsonl"));
  EXPECT_EQ(budget["key"], "rise:pytest: test_sample.py::test_limited");
  EXPECT_EQ(budget["limit"], "2 GiB");
  // No GPU here: the test used none of its 2 GiB. The verdict is the run's last line.
  const std::string err = ReadFile(tmp_ + "/stderr");
  EXPECT_NE(err.find("gpu_memory_limit(\"2 GiB\") of test_sample.py::test_limited"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("0 B  no GPU memory, pid "), std::string::npos) << err;
  EXPECT_NE(err.find("cumemtrace: budgets met: gpu_memory_limit(\"2 GiB\") of "
                     "test_sample.py::test_limited\n"),
            std::string::npos)
      << err;
  // `check` reads the run folder's budgets again, offline.
  EXPECT_EQ(Shell(CUMEMTRACE_BIN " check -q -b peak=0 " + tmp_ + "/out > /dev/null"), 0);
}

// Each test's own verdict inside pytest, from a memory source a conftest.py gives (no GPU
// here): a fake allocator the tests allocate from, whose figures the plugin reads as it reads
// PyTorch's.
TEST_F(PytestPlugin, EachLimitedTestGetsItsOwnVerdictFromTheMemorySource) {
  std::ofstream(tmp_ + "/conftest.py") << R"(import pytest

class FakeMemory:
    name = "fake allocator"
    def __init__(self):
        self.in_use = 0
        self.high = 0
    def alloc(self, n):
        self.in_use += n
        self.high = max(self.high, self.in_use)
    def free(self, n):
        self.in_use -= n
    def start(self, item):
        self.high = self.in_use
        return self.in_use
    def peak(self, item):
        return self.high

MEMORY = FakeMemory()

def pytest_cumemtrace_memory_source(config):
    return MEMORY

@pytest.fixture
def gpu():
    return MEMORY
)";
  std::ofstream(tmp_ + "/test_memory.py") << R"(import pytest
GiB = 1 << 30
MiB = 1 << 20

@pytest.mark.gpu_memory_limit("2 GiB")
def test_small(gpu):
    gpu.alloc(1 * GiB)
    gpu.free(1 * GiB)

@pytest.mark.gpu_memory_limit("2 GiB")
def test_big(gpu):
    gpu.alloc(3 * GiB)
    gpu.free(3 * GiB)

def test_keeps(gpu):
    gpu.alloc(512 * MiB)  # still in use when the next test starts

@pytest.mark.gpu_memory_limit("1 GiB")
def test_after(gpu):
    gpu.alloc(768 * MiB)  # peak 1.25 GiB, but 768 MiB above its entry
    gpu.free(768 * MiB)

@pytest.mark.gpu_memory_limit("1 MiB")
def test_exact(gpu):
    gpu.alloc(1 * MiB)  # exactly its limit: met
    gpu.free(1 * MiB)
)";
  EXPECT_EQ(Run("test_memory.py"), 1) << ReadFile(tmp_ + "/stderr");  // pytest's: a test failed
  const std::string out = ReadFile(tmp_ + "/stdout");
  EXPECT_NE(out.find("1 failed, 4 passed"), std::string::npos) << out;
  EXPECT_NE(out.find("FAILED test_memory.py::test_big"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED test_memory.py::test_small"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED test_memory.py::test_after"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED test_memory.py::test_exact"), std::string::npos) << out;
  EXPECT_NE(out.find("test_memory.py::test_big: GPU memory rose 3.00 GiB (3,221,225,472 B) "
                     "above what was in use when it started, over its "
                     "gpu_memory_limit(\"2 GiB\") (2,147,483,648 B); peak 3.00 GiB "
                     "(fake allocator)"),
            std::string::npos)
      << out;
  // The figures of every test, in the terminal summary.
  EXPECT_NE(out.find("GPU memory per test (fake allocator)"), std::string::npos) << out;
  EXPECT_NE(out.find("test_memory.py::test_small  1.00 GiB     +1.00 GiB  2 GiB  met\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("test_memory.py::test_big    3.00 GiB     +3.00 GiB  2 GiB  EXCEEDED\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("test_memory.py::test_keeps   512 MiB      +512 MiB\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("test_memory.py::test_after  1.25 GiB      +768 MiB  1 GiB  met\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("test_memory.py::test_exact   513 MiB     +1.00 MiB  1 MiB  met\n"),
            std::string::npos)
      << out;
}

TEST_F(PytestPlugin, AMalformedLimitStopsPytestBeforeAnyTestRuns) {
  std::ofstream(tmp_ + "/test_bad.py") << R"(import pytest
@pytest.mark.gpu_memory_limit("two gigs")
def test_bad():
    pass
)";
  EXPECT_EQ(Run("test_bad.py"), 4);  // pytest's usage error, passed on by run
  EXPECT_NE(ReadFile(tmp_ + "/stderr").find("gpu_memory_limit(\"two gigs\") is not a size"),
            std::string::npos)
      << ReadFile(tmp_ + "/stderr");
  EXPECT_FALSE(fs::exists(tmp_ + "/out/pytest-budgets.jsonl"));
}

// A size whose unit the budget reader refuses ("Gi") is refused here too, not accepted and
// then checked against nothing while the summary says "met".
TEST_F(PytestPlugin, ALimitInAUnitTheBudgetsRefuseStopsPytestToo) {
  std::ofstream(tmp_ + "/test_bad_unit.py") << R"(import pytest
@pytest.mark.gpu_memory_limit("2 Gi")
def test_bad_unit():
    pass
)";
  EXPECT_EQ(Run("test_bad_unit.py"), 4);
  EXPECT_NE(ReadFile(tmp_ + "/stderr").find("gpu_memory_limit(\"2 Gi\") is not a size"),
            std::string::npos)
      << ReadFile(tmp_ + "/stderr");
}

TEST_F(PytestPlugin, WithoutCumemtraceTheMarkerIsOnlyRegistered) {
  const int status =
      Shell("cd " + tmp_ + " && env -u CUMEMTRACE_BUDGET_FILE PYTHONPATH=" + PYTEST_PLUGIN_DIR +
            " " + python_ +
            " -m pytest -q -p no:cacheprovider "
            "-p cumemtrace_pytest --strict-markers test_sample.py > " +
            tmp_ + "/stdout 2>&1");
  EXPECT_EQ(status, 0) << ReadFile(tmp_ + "/stdout");
  EXPECT_NE(ReadFile(tmp_ + "/stdout").find("4 passed"), std::string::npos);
}

}  // namespace
