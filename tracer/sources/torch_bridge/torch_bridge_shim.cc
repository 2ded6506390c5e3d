// The PyTorch bridge shim: built against one torch version's headers
// (CUMEMTRACE_TORCH_VERSION names it), dlopen'ed by the tracer only when that version's
// libc10_cuda is loaded. It attaches a trace tracker to the caching allocator and passes
// each entry on, converted to the plain struct of bridge_abi.h.
//
// It shares libstdc++ with torch (the tracker is a std::function torch stores and calls),
// so it is a separate library from the tracer, which links its C++ runtime statically.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <c10/cuda/CUDACachingAllocator.h>

#include "tracer/sources/torch_bridge/bridge_abi.h"
#include "tracer/sources/torch_bridge/bridge_core.h"
#include "tracer/sources/torch_bridge/device_counters.h"

#ifndef CUMEMTRACE_TORCH_VERSION
#error "CUMEMTRACE_TORCH_VERSION must name the torch version whose headers are used"
#endif

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using cumemtrace::torch_bridge::BridgeCore;
using cumemtrace::torch_bridge::DeviceCounters;

std::atomic<cca::CUDAAllocator*>* g_allocator = nullptr;

struct CounterReader {
  bool operator()(uint32_t device, DeviceCounters* out) const noexcept {
    return cumemtrace::torch_bridge::ReadDeviceCounters(g_allocator->load(), device, out);
  }
};

// Where torch times its entries with the TSC, the hook uses that time (bridge_core.h).
#if defined(C10_RDTSC)
constexpr bool kTorchTimeIsTsc = true;
#else
constexpr bool kTorchTimeIsTsc = false;
#endif
using Core = BridgeCore<CounterReader, kTorchTimeIsTsc, cumemtrace::torch_bridge::SmallPoolBlock>;
Core* g_core = nullptr;  // leaked: torch keeps calling the tracker until the process ends

void Copy(const std::string& text, char* out, size_t size) {
  if (out == nullptr || size == 0) return;
  snprintf(out, size, "%s", text.c_str());
}

int Attach(const char* c10_cuda_path, cumemtrace_torch_emit_fn emit, void* context,
           char* allocator_name, size_t allocator_name_size, char* message,
           size_t message_size) noexcept {
  try {
    Copy("", allocator_name, allocator_name_size);
    Copy("", message, message_size);
    void* library = dlopen(c10_cuda_path, RTLD_LAZY | RTLD_NOLOAD);
    if (library == nullptr) {
      Copy(std::string("libc10_cuda is not loaded: ") + c10_cuda_path, message, message_size);
      return CUMEMTRACE_TORCH_NO_ALLOCATOR;
    }
    // c10::cuda::CUDACachingAllocator::allocator, the definition libc10_cuda itself uses:
    // the global scope's comes first, as for the dynamic linker. A LibTorch program that
    // reads the allocator through an inline of CUDACachingAllocator.h holds a copy
    // relocation of it; libc10_cuda's static initializer then sets that copy, and the
    // library's own definition stays null forever.
    constexpr const char* kAllocator = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
    void* symbol = dlsym(RTLD_DEFAULT, kAllocator);
    if (symbol == nullptr) symbol = dlsym(library, kAllocator);
    if (symbol == nullptr) {
      Copy("libc10_cuda has no c10::cuda::CUDACachingAllocator::allocator", message,
           message_size);
      return CUMEMTRACE_TORCH_NO_ALLOCATOR;
    }
    g_allocator = static_cast<std::atomic<cca::CUDAAllocator*>*>(symbol);
    cca::CUDAAllocator* allocator = g_allocator->load();
    if (allocator == nullptr) {
      Copy("the CUDA caching allocator is not set yet", message, message_size);
      return CUMEMTRACE_TORCH_NO_ALLOCATOR;
    }
    const std::string name = allocator->name();
    Copy(name, allocator_name, allocator_name_size);
    if (name != "native") {
      Copy("the allocator is " + name + ", not the native caching allocator", message,
           message_size);
      return CUMEMTRACE_TORCH_NOT_NATIVE;
    }
    g_core = new Core(
        emit, context, CounterReader{},
        cumemtrace::torch_bridge::SmallPoolBlock{cumemtrace::torch_bridge::FindDivisions(library)});
    Core* core = g_core;
    allocator->attachAllocatorTraceTracker(
        [core](const cca::TraceEntry& entry) { core->OnEntry(entry); });
    return CUMEMTRACE_TORCH_ATTACHED;
  } catch (const std::exception& error) {
    Copy(std::string("attachAllocatorTraceTracker failed: ") + error.what(), message,
         message_size);
  } catch (...) {
    Copy("attachAllocatorTraceTracker failed", message, message_size);
  }
  return CUMEMTRACE_TORCH_ATTACH_FAILED;
}

void Probe() noexcept {
  if (g_core != nullptr) g_core->Probe();
}

void Stop() noexcept {
  if (g_core != nullptr) g_core->Stop();
}

const cumemtrace_torch_bridge kBridge = {
    CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION, CUMEMTRACE_TORCH_VERSION, Attach, Probe, Stop,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const cumemtrace_torch_bridge*
cumemtrace_torch_bridge_v1(void) {
  return &kBridge;
}
