// Finding, checking and attaching the bridge shim, against a fake torch installation: the real
// shim source built against the tests' stand-in headers (as torch "0.0.1+fake") and a fake
// libc10_cuda.so. Covers the fallback paths: unknown torch version, no shim for the version,
// a shim built for another version, an allocator that is not the native one, and one whose
// attach throws.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tracer/sources/torch_bridge/torch_bridge.h"

namespace cumemtrace::tracer {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cumemtrace-bridge-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// <root>/torch/lib/libc10_cuda.so (the fake) with <root>/torch/version.py.
std::string FakeWheel(const std::string& root, const std::string& version_py) {
  const std::string lib = root + "/torch/lib/libc10_cuda.so";
  fs::create_directories(root + "/torch/lib");
  fs::copy_file(CUMEMTRACE_FAKE_C10_CUDA, lib);
  if (!version_py.empty()) Write(root + "/torch/version.py", version_py);
  return lib;
}

std::string ShimDir() { return fs::path(CUMEMTRACE_FAKE_BRIDGE).parent_path().string(); }

TEST(TorchBridgeVersion, ReadsWheelAndLibTorchVersionFiles) {
  TempDir dir;
  Write(dir.path() + "/wheel/torch/version.py",
        "from typing import Optional\n__version__ = '2.11.0+cu130'\ncuda = '13.0'\n");
  EXPECT_EQ(TorchVersionNextTo(dir.path() + "/wheel/torch/lib/libc10_cuda.so"), "2.11.0+cu130");
  Write(dir.path() + "/dq/torch/version.py", "__version__ = \"2.9.1\"\n");
  EXPECT_EQ(TorchVersionNextTo(dir.path() + "/dq/torch/lib/libc10_cuda.so"), "2.9.1");
  Write(dir.path() + "/libtorch/build-version", "2.11.0+cu130\n");
  EXPECT_EQ(TorchVersionNextTo(dir.path() + "/libtorch/lib/libc10_cuda.so"), "2.11.0+cu130");
  EXPECT_EQ(TorchVersionNextTo(dir.path() + "/none/lib/libc10_cuda.so"), "");
}

TEST(TorchBridgeVersion, NamesTheShimByRelease) {
  EXPECT_EQ(TorchReleaseOf("2.11.0+cu130"), "2.11.0");
  EXPECT_EQ(TorchReleaseOf("2.11.0"), "2.11.0");
  EXPECT_EQ(TorchBridgeFileName("2.11.0+cu130"), "libcumemtrace-torch-bridge-2.11.0.so");
  EXPECT_TRUE(IsTorchAllocatorModule("libc10_cuda.so"));
  EXPECT_FALSE(IsTorchAllocatorModule("libc10.so"));
  EXPECT_FALSE(IsTorchAllocatorModule("libcublasLt.so.13"));
}

TEST(TorchBridgeFallback, UnknownTorchVersion) {
  TempDir dir;
  const std::string lib = FakeWheel(dir.path(), "");
  const TorchBridgeLookup lookup = LoadTorchBridge(lib, ShimDir());
  EXPECT_EQ(lookup.bridge, nullptr);
  EXPECT_NE(lookup.reason.find("torch version of " + lib + " is unknown"), std::string::npos)
      << lookup.reason;
}

TEST(TorchBridgeFallback, NoShimForThatVersion) {
  TempDir dir;
  const std::string lib = FakeWheel(dir.path(), "__version__ = '0.0.2+cu130'\n");
  const TorchBridgeLookup lookup = LoadTorchBridge(lib, ShimDir());
  EXPECT_EQ(lookup.bridge, nullptr);
  EXPECT_EQ(lookup.torch_version, "0.0.2+cu130");
  EXPECT_NE(lookup.reason.find("no bridge for torch 0.0.2+cu130"), std::string::npos)
      << lookup.reason;
  EXPECT_NE(lookup.reason.find("libcumemtrace-torch-bridge-0.0.2.so"), std::string::npos)
      << lookup.reason;
}

TEST(TorchBridgeFallback, ShimBuiltForAnotherVersion) {
  TempDir dir;
  const std::string lib = FakeWheel(dir.path(), "__version__ = '0.0.3'\n");
  // A shim under the expected name that was built for another torch (a renamed file).
  fs::create_directories(dir.path() + "/bridges");
  fs::copy_file(CUMEMTRACE_FAKE_BRIDGE, dir.path() + "/bridges/libcumemtrace-torch-bridge-0.0.3.so");
  const TorchBridgeLookup lookup = LoadTorchBridge(lib, dir.path() + "/bridges");
  EXPECT_EQ(lookup.bridge, nullptr);
  EXPECT_EQ(lookup.bridge_torch_version, "0.0.1+fake");
  EXPECT_NE(lookup.reason.find("was built for torch 0.0.1+fake, the program runs torch 0.0.3"),
            std::string::npos)
      << lookup.reason;
}

int Collect(const cumemtrace_torch_event* event, void* context) {
  static_cast<std::vector<cumemtrace_torch_event>*>(context)->push_back(*event);
  return 1;
}

TEST(TorchBridgeAttach, AttachesToTheNativeAllocatorOnly) {
  TempDir dir;
  const std::string lib = FakeWheel(dir.path(), "__version__ = '0.0.1+cu999'\n");
  void* c10 = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(c10, nullptr) << dlerror();
  auto install = reinterpret_cast<void (*)(const char*)>(dlsym(c10, "fake_torch_install"));
  auto alloc = reinterpret_cast<void (*)(size_t, size_t, size_t)>(dlsym(c10, "fake_torch_alloc"));
  auto free_block = reinterpret_cast<void (*)(size_t, size_t, size_t)>(dlsym(c10, "fake_torch_free"));
  auto segment = reinterpret_cast<void (*)(size_t, size_t)>(dlsym(c10, "fake_torch_segment"));
  auto set_divisions = reinterpret_cast<void (*)(size_t)>(dlsym(c10, "fake_torch_set_divisions"));
  ASSERT_TRUE(install && alloc && free_block && segment && set_divisions);

  const TorchBridgeLookup lookup = LoadTorchBridge(lib, ShimDir());
  ASSERT_NE(lookup.bridge, nullptr) << lookup.reason;
  EXPECT_EQ(lookup.bridge_torch_version, "0.0.1+fake");  // the release matches, not the build
  std::vector<cumemtrace_torch_event> events;
  char name[64];
  char message[256];
  auto attach = [&] {
    return lookup.bridge->attach(lib.c_str(), Collect, &events, name, sizeof(name), message,
                                 sizeof(message));
  };

  EXPECT_EQ(attach(), CUMEMTRACE_TORCH_NO_ALLOCATOR);  // libc10_cuda loaded, allocator unset
  EXPECT_NE(std::string(message).find("not set yet"), std::string::npos) << message;
  install("cudaMallocAsync");
  EXPECT_EQ(attach(), CUMEMTRACE_TORCH_NOT_NATIVE);
  EXPECT_STREQ(name, "cudaMallocAsync");
  install("native-throwing");
  EXPECT_EQ(attach(), CUMEMTRACE_TORCH_ATTACH_FAILED);
  EXPECT_NE(std::string(message).find("no trackers here"), std::string::npos) << message;

  install("native");
  ASSERT_EQ(attach(), CUMEMTRACE_TORCH_ATTACHED) << message;
  EXPECT_STREQ(name, "native");
  segment(0x7f0000000000, 2097152);
  alloc(0x7f0000000000, 1000, 1024);        // a 1000-byte tensor in a 1024-byte block: rounded
  alloc(0x7f0000200000, 3000000, 3145728);  // larger than the small pool: counted
  lookup.bridge->probe();
  set_divisions(4);  // torch rounds requests above 2048 bytes to quarters of a power of 2
  alloc(0x7f0000000400, 3000, 3072);       // so this one is counted,
  alloc(0x7f0000001000, 2000, 2048);       // and this one still rounded
  free_block(0x7f0000000000, 1000, 1024);  // FREE_REQUESTED sent, FREE_COMPLETED not
  ASSERT_EQ(events.size(), 7u);
  const uint32_t expected[] = {CUMEMTRACE_TORCH_SEGMENT_ALLOC, CUMEMTRACE_TORCH_ALLOC_ROUNDED,
                               CUMEMTRACE_TORCH_ALLOC,         CUMEMTRACE_TORCH_STATS_PROBE,
                               CUMEMTRACE_TORCH_ALLOC,         CUMEMTRACE_TORCH_ALLOC_ROUNDED,
                               CUMEMTRACE_TORCH_FREE_REQUESTED};
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].action, expected[i]) << i;
  EXPECT_EQ(events[0].reserved_bytes_current, 2097152u);
  EXPECT_EQ(events[1].requested_bytes, 1000u);
  EXPECT_EQ(events[1].allocated_bytes_total, 0u);  // a rounded ALLOC reads no counters
  EXPECT_EQ(events[1].allocated_bytes_current, 0u);
  EXPECT_EQ(events[2].allocated_bytes_total, 1024u);  // the rounded block is in it
  EXPECT_EQ(events[3].sequence, events[2].sequence);
  EXPECT_EQ(events[3].allocated_bytes_total - events[2].allocated_bytes_total, 3145728u);
  EXPECT_EQ(events[4].allocated_bytes_current, 1024u + 3145728u);
  EXPECT_EQ(events[5].allocated_bytes_total, 0u);
  EXPECT_EQ(events[6].allocated_bytes_total, 0u);  // a free reads no counters
  EXPECT_EQ(events[6].allocated_bytes_current, 0u);
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].action != CUMEMTRACE_TORCH_STATS_PROBE) {
      EXPECT_EQ(events[i].sequence, i < 3 ? i + 1 : i) << i;
    }
  }
  // Each entry's own time, where torch takes it with the TSC (the stand-in headers say so on
  // x86-64, as torch's do): the fake counts its entries 1001, 1002, ...; a probe has none.
#if defined(__x86_64__)
  const uint64_t times[] = {1001, 1002, 1003, 0, 1004, 1005, 1006};
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].tsc, times[i]) << i;
#else
  for (const cumemtrace_torch_event& event : events) EXPECT_EQ(event.tsc, 0u);
#endif
  lookup.bridge->stop();
  alloc(0x7f0000002000, 10, 512);
  EXPECT_EQ(events.size(), 7u);
}

}  // namespace
}  // namespace cumemtrace::tracer
