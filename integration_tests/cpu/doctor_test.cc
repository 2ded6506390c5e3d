// `cumemtrace doctor` end to end: the real binary, with a fake python3 on PATH standing in for
// an interpreter that has (or lacks) torch, and a fabricated torch tree.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include CUMEMTRACE_BRIDGE_ABI_HEADER  // the bridge interface: part of the cache key
#include "integration_tests/cpu/cli_test_support.h"

namespace cumemtrace {
namespace {

namespace fs = std::filesystem;

class Doctor : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::MakeTempDir("cumemtrace-doctor");
    ASSERT_FALSE(tmp_.empty());
    fs::create_directories(tmp_ + "/bin");
    fs::create_directories(tmp_ + "/cache");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  // A python3 that prints what the doctor's probe prints for `line` (tab-separated).
  void FakePython(const std::string& line) {
    const std::string path = tmp_ + "/bin/python3";
    std::ofstream(path) << "#!/bin/sh\nprintf '" << line << "\\n'\n";
    chmod(path.c_str(), 0755);
  }
  // A torch package as a wheel lays it out: its headers, nothing else.
  std::string FakeTorchTree() {
    const std::string dir = tmp_ + "/site-packages/torch";
    fs::create_directories(dir + "/include/c10/cuda");
    std::ofstream(dir + "/include/c10/cuda/CUDACachingAllocator.h") << "#pragma once\n";
    return dir;
  }
  Result RunDoctor(const EnvOverrides& extra = {}) {
    EnvOverrides env = {{"PATH", tmp_ + "/bin:/usr/bin:/bin"},
                        {"XDG_CACHE_HOME", tmp_ + "/cache"},
                        {"CUMEMTRACE_TORCH_BRIDGE_DIR", std::nullopt},
                        {"CXX", std::nullopt}};
    env.insert(env.end(), extra.begin(), extra.end());
    return RunCli({"doctor"}, tmp_, env);
  }
  std::string tmp_;
};

// The line of the check `name`, "" when there is none.
std::string CheckLine(const std::string& out, const std::string& name) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string state, check;
    words >> state >> check;
    if (check == name) return line;
  }
  return "";
}

TEST_F(Doctor, WithoutAGpuItSaysSoAndARunStillWorks) {
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has a CUDA driver";
  }
  FakePython("cumemtrace-no-torch\\tModuleNotFoundError: No module named torch");
  const Result r = RunDoctor();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(CheckLine(r.out, "GPU").rfind("  missing  GPU      no GPU: no CUDA driver", 0), 0u)
      << r.out;
  EXPECT_NE(r.out.find("a run records the program's NVTX phases"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\na run works here, and records less"), std::string::npos) << r.out;
}

// A driver (here a stand-in) is asked for its CUDA version and its GPUs.
TEST_F(Doctor, ADriverWithoutGpusIsNotAGpuAndOneWithGpusNamesThem) {
  FakePython("cumemtrace-no-torch\\tModuleNotFoundError");
  Result r = RunDoctor({{"LD_LIBRARY_PATH", FAKE_DRIVER_DIR}, {"FAKE_CUDA_GPUS", std::nullopt}});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // (a machine with a real driver adds its version, from NVML, after "driver")
  EXPECT_EQ(CheckLine(r.out, "GPU").rfind("  missing  GPU      no GPU: driver", 0), 0u) << r.out;
  EXPECT_NE(CheckLine(r.out, "GPU").find(" (CUDA 13.0), "), std::string::npos) << r.out;
  EXPECT_NE(CheckLine(r.out, "GPU").find("sees none (cuInit: 100)"), std::string::npos) << r.out;
  r = RunDoctor({{"LD_LIBRARY_PATH", FAKE_DRIVER_DIR}, {"FAKE_CUDA_GPUS", "2"}});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(CheckLine(r.out, "GPU").rfind("  ok       GPU      driver", 0), 0u) << r.out;
  EXPECT_NE(CheckLine(r.out, "GPU").find(" (CUDA 13.0), "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU 0: Fake GPU 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU 1: Fake GPU 1\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("no GPU"), std::string::npos) << r.out;
}

TEST_F(Doctor, AMissingTracerMeansARunCannotWork) {
  FakePython("cumemtrace-no-torch\\tModuleNotFoundError");
  const Result r = RunDoctor({{"CUMEMTRACE_TRACER_LIB", tmp_ + "/none.so"}});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(CheckLine(r.out, "tracer").find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a run cannot work here"), std::string::npos) << r.out;
}

TEST_F(Doctor, TorchWithoutPythonOrWithoutTorchIsSaid) {
  Result r = RunDoctor({{"PATH", tmp_ + "/bin"}});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(CheckLine(r.out, "torch").find("no python3 on PATH"), std::string::npos) << r.out;
  FakePython("cumemtrace-no-torch\\tModuleNotFoundError: No module named torch");
  r = RunDoctor();
  EXPECT_NE(CheckLine(r.out, "torch").find("python3 has no torch (ModuleNotFoundError"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(CheckLine(r.out, "bridge"), "") << r.out;
}

// The bridge, in the order a run looks for it: beside the tracer, in the cache, buildable.
TEST_F(Doctor, TheBridgeIsFoundBuiltCachedOrBuildable) {
  const std::string torch = FakeTorchTree();
  FakePython("noise from site\\ncumemtrace-torch\\t2.11.0+cu130\\t0\\t" + torch);
  Result r = RunDoctor();
  EXPECT_NE(CheckLine(r.out, "torch").find("2.11.0+cu130 (pre-C++11 ABI), " + torch),
            std::string::npos)
      << r.out;
  EXPECT_NE(CheckLine(r.out, "bridge").find("buildable with /"), std::string::npos) << r.out;

  r = RunDoctor({{"CXX", "no-such-compiler"}});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(CheckLine(r.out, "bridge").find("no C++ compiler"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-> a run sees PyTorch's segments"), std::string::npos) << r.out;

  fs::remove_all(torch + "/include");
  r = RunDoctor();
  EXPECT_NE(CheckLine(r.out, "bridge").find("ships no C++ headers"), std::string::npos) << r.out;

  // The cache is keyed by the full version and the ABI: another ABI's bridge is not this one.
  const std::string cached = tmp_ + "/cache/cumemtrace/bridges/";
  const std::string key = std::string("-cumemtrace-") + CUMEMTRACE_VERSION + "-bridge" +
                          std::to_string(CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION);
  fs::create_directories(cached + "torch-2.11.0+cu130-cxx11abi" + key);
  std::ofstream(cached + "torch-2.11.0+cu130-cxx11abi" + key +
                "/libcumemtrace-torch-bridge-2.11.0.so");
  r = RunDoctor();
  EXPECT_EQ(CheckLine(r.out, "bridge").find("in the cache"), std::string::npos) << r.out;
  fs::create_directories(cached + "torch-2.11.0+cu130-oldabi" + key);
  std::ofstream(cached + "torch-2.11.0+cu130-oldabi" + key +
                "/libcumemtrace-torch-bridge-2.11.0.so");
  r = RunDoctor();
  EXPECT_NE(CheckLine(r.out, "bridge").find("in the cache: " + cached), std::string::npos) << r.out;

  fs::create_directories(tmp_ + "/beside");
  std::ofstream(tmp_ + "/beside/libcumemtrace-torch-bridge-2.11.0.so");
  r = RunDoctor({{"CUMEMTRACE_TORCH_BRIDGE_DIR", tmp_ + "/beside"}});
  EXPECT_NE(CheckLine(r.out, "bridge").find("built: " + tmp_ + "/beside/"), std::string::npos)
      << r.out;
}

TEST_F(Doctor, HelpAndUsage) {
  Result r = RunCli({"doctor", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Usage: cumemtrace doctor"), std::string::npos);
  r = RunCli({"doctor", "extra"});
  EXPECT_EQ(r.exit_code, 2);
  r = RunCli({"--help"});
  EXPECT_NE(r.out.find("  doctor "), std::string::npos);
}

}  // namespace
}  // namespace cumemtrace
