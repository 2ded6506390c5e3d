// The PyTorch bridge cache with fabricated torch trees and a stand-in compiler (a script that
// counts its runs): the folder a torch gets, one build for processes that start together,
// a failure said once and remembered, and no build without a compiler or headers.
#include "collector/cli/torch_bridge_cache.h"

#include <gtest/gtest.h>

#include CUMEMTRACE_BRIDGE_ABI_HEADER
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cumemtrace {
namespace {

namespace fs = std::filesystem;

TEST(TorchBridgeCacheKey, NamesTheTorchVersionItsAbiAndCumemtracesVersion) {
  const TorchInstall a{"2.11.0+cu130", true, "/a/torch"};
  EXPECT_EQ(TorchBridgeCacheKey(a, "0.1.0"), "torch-2.11.0+cu130-cxx11abi-cumemtrace-0.1.0");
  TorchInstall other = a;
  other.cxx11_abi = false;
  EXPECT_EQ(TorchBridgeCacheKey(other, "0.1.0"), "torch-2.11.0+cu130-oldabi-cumemtrace-0.1.0");
  other = a;
  other.version = "2.11.0+cu128";  // another build of the same release: other headers
  EXPECT_NE(TorchBridgeCacheKey(other, "0.1.0"), TorchBridgeCacheKey(a, "0.1.0"));
  EXPECT_NE(TorchBridgeCacheKey(a, "0.2.0"), TorchBridgeCacheKey(a, "0.1.0"));
  other.dir = "/elsewhere/torch";  // where it is installed does not matter
  other.version = a.version;
  EXPECT_EQ(TorchBridgeCacheKey(other, "0.1.0"), TorchBridgeCacheKey(a, "0.1.0"));
  other.version = "../../x y";  // never a path out of the cache
  EXPECT_EQ(TorchBridgeCacheKey(other, "0.1.0"), "torch-.._.._x_y-cxx11abi-cumemtrace-0.1.0");
  EXPECT_EQ(TorchBridgeLibraryName("2.11.0+cu130"), "libcumemtrace-torch-bridge-2.11.0.so");
}

// Which programs are asked for their torch: Python interpreters and scripts they run.
TEST(PythonOf, InterpretersAndTheirScriptsOnly) {
  EXPECT_EQ(PythonOf("/venv/bin/python3.12"), "/venv/bin/python3.12");
  EXPECT_EQ(PythonOf("/usr/bin/python"), "/usr/bin/python");
  EXPECT_EQ(PythonOf("/usr/bin/python-config"), "");
  char pattern[] = "/tmp/cumemtrace-python-of-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  auto script = [&dir](const std::string& name, const std::string& content) {
    std::ofstream(dir + "/" + name, std::ios::binary) << content;
    return dir + "/" + name;
  };
  EXPECT_EQ(PythonOf(script("torchrun", "#!/venv/bin/python3 -u\nimport sys\n")),
            "/venv/bin/python3");
  EXPECT_EQ(PythonOf(script("accelerate", "#!/usr/bin/env -S python3 -X dev\n")), "python3");
  EXPECT_EQ(PythonOf(script("train.sh", "#!/bin/sh\nexec python3 train.py\n")), "");
  EXPECT_EQ(PythonOf(script("binary", std::string("\x7f"
                                                  "ELF") +
                                          std::string(1 << 16, 'x'))),
            "");
  fs::remove_all(dir);
}

class TorchBridgeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cumemtrace-bridge-cache-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    tmp_ = pattern;
    torch_ = {"2.11.0+cu130", true, tmp_ + "/site-packages/torch"};
    fs::create_directories(torch_.dir + "/include/c10/cuda");
    std::ofstream(torch_.dir + "/include/c10/cuda/CUDACachingAllocator.h") << "#pragma once\n";
    settings_.cache_root = tmp_ + "/cache/cumemtrace/bridges";
    settings_.key_version = "0.1.0";
    settings_.source_root = tmp_ + "/src";
    settings_.shim_source = "shim.cc";
    settings_.compiler = Compiler("");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(tmp_, ignored);
  }
  // A compiler that counts its runs, takes a second, and writes what follows -o (after
  // `extra`, shell lines that may fail it).
  std::string Compiler(const std::string& extra) {
    const std::string path = tmp_ + "/cxx";
    std::ofstream(path) << "#!/bin/sh\n"
                        << "echo run >> " << tmp_ << "/runs\n"
                        << extra << "sleep 1\n"
                        << "prev=; for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; "
                           "done\n"
                        << "echo \"$@\" > \"$out\"\n";
    chmod(path.c_str(), 0755);
    return path;
  }
  int Runs() {
    std::ifstream in(tmp_ + "/runs");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
  std::string tmp_;
  TorchInstall torch_;
  BridgeBuildSettings settings_;
};

TEST_F(TorchBridgeCache, ProcessesStartingTogetherBuildItOnceThenAllUseIt) {
  constexpr int kProcesses = 4;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const BridgeResult r = EnsureCachedBridge(torch_, settings_, [](const std::string&) {});
      // 0: ready, built here; 1: ready, built by another; 2: not ready.
      _exit(!r.ready ? 2 : r.built ? 0 : 1);
    }
    children.push_back(pid);
  }
  int built = 0;
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 2);
    built += WEXITSTATUS(status) == 0 ? 1 : 0;
  }
  EXPECT_EQ(built, 1);
  EXPECT_EQ(Runs(), 1);
  const std::string dir = settings_.cache_root + "/torch-2.11.0+cu130-cxx11abi-cumemtrace-0.1.0";
  std::ifstream args(dir + "/libcumemtrace-torch-bridge-2.11.0.so");
  std::string command;
  std::getline(args, command);
  EXPECT_NE(command.find("-D_GLIBCXX_USE_CXX11_ABI=1"), std::string::npos) << command;
  EXPECT_NE(command.find("-isystem " + torch_.dir + "/include"), std::string::npos) << command;
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);

  // A later run finds it without building; another ABI of the same version gets its own.
  std::vector<std::string> lines;
  auto log = [&lines](const std::string& line) { lines.push_back(line); };
  BridgeResult again = EnsureCachedBridge(torch_, settings_, log);
  EXPECT_TRUE(again.ready);
  EXPECT_FALSE(again.built);
  EXPECT_TRUE(lines.empty());
  torch_.cxx11_abi = false;
  again = EnsureCachedBridge(torch_, settings_, log);
  EXPECT_TRUE(again.built);
  EXPECT_EQ(Runs(), 2);
  EXPECT_EQ(again.dir, settings_.cache_root + "/torch-2.11.0+cu130-oldabi-cumemtrace-0.1.0");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("building the PyTorch bridge for torch 2.11.0+cu130", 0), 0u);
}

TEST_F(TorchBridgeCache, AFailedBuildIsSaidAndNotRetriedUntilItsFolderIsRemoved) {
  settings_.compiler = Compiler("echo 'shim.cc:12: error: c10 has no Foo' >&2; exit 1\n");
  BridgeResult r = EnsureCachedBridge(torch_, settings_, [](const std::string&) {});
  EXPECT_FALSE(r.ready);
  EXPECT_NE(r.reason.find("the build failed: shim.cc:12: error: c10 has no Foo"), std::string::npos)
      << r.reason;
  EXPECT_FALSE(fs::exists(r.library));
  r = EnsureCachedBridge(torch_, settings_, [](const std::string&) {});
  EXPECT_FALSE(r.ready);
  EXPECT_NE(r.reason.find("an earlier build failed: shim.cc:12"), std::string::npos) << r.reason;
  EXPECT_EQ(Runs(), 1);
  fs::remove_all(r.dir);
  settings_.compiler = Compiler("");
  r = EnsureCachedBridge(torch_, settings_, [](const std::string&) {});
  EXPECT_TRUE(r.ready);
  EXPECT_EQ(Runs(), 2);
}

TEST_F(TorchBridgeCache, NoCompilerOrNoHeadersBuildsNothing) {
  settings_.compiler = "";
  BridgeResult r = EnsureCachedBridge(torch_, settings_, [](const std::string&) {});
  EXPECT_FALSE(r.ready);
  EXPECT_NE(r.reason.find("no C++ compiler"), std::string::npos) << r.reason;
  settings_.compiler = Compiler("");
  fs::remove_all(torch_.dir + "/include");
  r = EnsureCachedBridge(torch_, settings_, [](const std::string&) {});
  EXPECT_FALSE(r.ready);
  EXPECT_NE(r.reason.find("ships no C++ headers"), std::string::npos) << r.reason;
  EXPECT_EQ(Runs(), 0);
  EXPECT_FALSE(fs::exists(settings_.cache_root));
}

// The real shim source, built by the real compiler with the command `run` uses, against the
// stand-in torch headers the tracer's own tests build it with: a bridge the tracer accepts.
TEST_F(TorchBridgeCache, TheCompileCommandBuildsTheShimIntoABridgeTheTracerAccepts) {
  settings_.compiler = FindCxxCompiler();
  if (settings_.compiler.empty()) GTEST_SKIP() << "no C++ compiler";
  settings_.source_root = CUMEMTRACE_SOURCE_ROOT;
  settings_.shim_source = CUMEMTRACE_BRIDGE_SHIM_SOURCE;
  const TorchInstall fake{"0.0.1+fake", true, CUMEMTRACE_FAKE_TORCH_DIR};
  const BridgeResult r = EnsureCachedBridge(fake, settings_, [](const std::string&) {});
  ASSERT_TRUE(r.ready) << r.reason;
  EXPECT_TRUE(r.built);
  EXPECT_EQ(r.library, r.dir + "/libcumemtrace-torch-bridge-0.0.1.so");
  void* shim = dlopen(r.library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(shim, nullptr) << dlerror();
  auto entry = reinterpret_cast<cumemtrace_torch_bridge_entry_fn>(
      dlsym(shim, CUMEMTRACE_TORCH_BRIDGE_ENTRY));
  ASSERT_NE(entry, nullptr);
  const cumemtrace_torch_bridge* bridge = entry();
  ASSERT_NE(bridge, nullptr);
  EXPECT_EQ(bridge->abi_version, static_cast<uint32_t>(CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION));
  EXPECT_STREQ(bridge->torch_version, "0.0.1+fake");
}

}  // namespace
}  // namespace cumemtrace
