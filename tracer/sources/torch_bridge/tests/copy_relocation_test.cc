// A LibTorch program that reads the allocator through an inline of CUDACachingAllocator.h
// holds a copy relocation of c10::cuda::CUDACachingAllocator::allocator: libc10_cuda's own
// definition then stays null, and the program's copy is the one that is set. This test is
// such a program (built without PIE, so that its reference must be a copy relocation), linked
// against the fake libc10_cuda, and attaches the real shim.
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tracer/sources/torch_bridge/bridge_abi.h"

extern "C" void fake_torch_install(const char* name);
extern "C" void fake_torch_alloc(size_t address, size_t requested, size_t block);

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

int Collect(const cumemtrace_torch_event* event, void* context) {
  static_cast<std::vector<cumemtrace_torch_event>*>(context)->push_back(*event);
  return 1;
}

TEST(TorchBridgeCopyRelocation, AttachesToTheAllocatorTheLibraryUses) {
  void* c10 = dlopen(CUMEMTRACE_FAKE_C10_CUDA, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(c10, nullptr) << dlerror();
  // The condition under test: the library's own definition is not the one in use.
  ASSERT_NE(dlsym(c10, "_ZN3c104cuda20CUDACachingAllocator9allocatorE"),
            static_cast<void*>(&cca::allocator));
  fake_torch_install("native");
  ASSERT_NE(cca::allocator.load(), nullptr);  // set through the program's copy

  void* shim = dlopen(CUMEMTRACE_FAKE_BRIDGE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(shim, nullptr) << dlerror();
  auto entry = reinterpret_cast<cumemtrace_torch_bridge_entry_fn>(
      dlsym(shim, CUMEMTRACE_TORCH_BRIDGE_ENTRY));
  ASSERT_NE(entry, nullptr);
  const cumemtrace_torch_bridge* bridge = entry();
  std::vector<cumemtrace_torch_event> events;
  char name[64];
  char message[256];
  ASSERT_EQ(bridge->attach(CUMEMTRACE_FAKE_C10_CUDA, Collect, &events, name, sizeof(name), message,
                           sizeof(message)),
            CUMEMTRACE_TORCH_ATTACHED)
      << message;
  // Larger than the small pool, so it reads the counters (of the allocator it attached to).
  fake_torch_alloc(0x7f0000000000, 2000000, 2097152);
  bridge->probe();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].action, static_cast<uint32_t>(CUMEMTRACE_TORCH_ALLOC));
  EXPECT_EQ(events[1].allocated_bytes_total - events[0].allocated_bytes_total, 2097152u);
  bridge->stop();
}

}  // namespace
