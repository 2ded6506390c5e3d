// A stand-in for the PyTorch bridge's shim (bridge_abi.h), built under a shim's name for the
// fake torch 9.9.0: attach keeps the tracer's emit function, and fake_torch_bridge_emit
// plays the caching allocator on several threads, each its own device (so each device's
// events come from one thread, in sequence, as under torch's device lock). Every field is a
// function of the device and the sequence, so that the test can check each event whole.
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "tracer/sources/torch_bridge/bridge_abi.h"

namespace {

cumemtrace_torch_emit_fn g_emit = nullptr;
void* g_context = nullptr;

int Attach(const char* /*c10_cuda_path*/, cumemtrace_torch_emit_fn emit, void* context,
           char* allocator_name, size_t allocator_name_size, char* message, size_t message_size) {
  g_emit = emit;
  g_context = context;
  snprintf(allocator_name, allocator_name_size, "native");
  snprintf(message, message_size, "attached");
  return CUMEMTRACE_TORCH_ATTACHED;
}
void Probe() {}
void Stop() { g_emit = nullptr; }

const cumemtrace_torch_bridge kBridge = {CUMEMTRACE_TORCH_BRIDGE_ABI_VERSION, "9.9.0", Attach,
                                         Probe, Stop};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) const cumemtrace_torch_bridge* cumemtrace_torch_bridge_v1() {
  return &kBridge;
}

// Emits `events` events on each of `threads` threads; returns how many the tracer refused.
__attribute__((visibility("default"))) int fake_torch_bridge_emit(int threads, int events) {
  std::vector<std::thread> workers;
  std::vector<int> refused(static_cast<size_t>(threads), 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([t, events, &refused] {
      for (int n = 1; n <= events; ++n) {
        cumemtrace_torch_event e{};
        const auto seq = static_cast<uint64_t>(n);
        e.action = n % 2 == 1 ? CUMEMTRACE_TORCH_ALLOC : CUMEMTRACE_TORCH_FREE_REQUESTED;
        e.device = static_cast<uint32_t>(t);
        e.sequence = seq;
        e.address = 0x7f0000000000ull + (uint64_t(t) << 32) + seq * 512;
        e.requested_bytes = seq * 3 + uint64_t(t);
        e.stream = uint64_t(t) * 100 + seq / 7;
        if (n % 4 == 1) {
          e.allocated_bytes_total = seq * 5;
          e.allocated_bytes_current = seq * 7;
          e.reserved_bytes_current = seq * 11;
        }
#if defined(__x86_64__)
        e.tsc = __rdtsc();
#endif
        if (g_emit == nullptr || g_emit(&e, g_context) == 0) ++refused[static_cast<size_t>(t)];
      }
    });
  }
  int total = 0;
  for (size_t t = 0; t < workers.size(); ++t) {
    workers[t].join();
    total += refused[t];
  }
  return total;
}
}
