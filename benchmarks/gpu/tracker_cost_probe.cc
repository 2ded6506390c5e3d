// What each part of the PyTorch bridge costs inside the program, without the tracer: loaded
// by workloads.py --tracker-probe (ctypes), it attaches a trace tracker of its own to the
// caching allocator, doing as much of the bridge's work per entry as the mode says. The
// ratio of each mode to the untraced run, next to the default's, splits the bridge's cost
// per tensor into torch's (building and handing over each TraceEntry), the counter read and
// the shim's own code, and leaves the rest to the tracer (record, clock, ring).
//
// Built against the torch headers the program runs (tracker_costs.sh), like the shim; it
// resolves torch's symbols from the libc10_cuda already loaded.
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tracer/sources/torch_bridge/bridge_core.h"
#include "tracer/sources/torch_bridge/device_counters.h"

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using cumemtrace::torch_bridge::BridgeCore;
using cumemtrace::torch_bridge::DeviceCounters;

std::atomic<uint64_t> g_sink{0};  // keeps the work of each mode from being optimized away

// The shim's own read (device_counters.h).
struct CounterReader {
  bool operator()(uint32_t device, DeviceCounters* out) const noexcept {
    return cumemtrace::torch_bridge::ReadDeviceCounters(cca::allocator.load(), device, out);
  }
};

int EmitNothing(const cumemtrace_torch_event* event, void*) {
  g_sink.fetch_add(event->sequence, std::memory_order_relaxed);
  return 1;
}

int EmitWithClock(const cumemtrace_torch_event* event, void*) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  g_sink.fetch_add(event->sequence + static_cast<uint64_t>(ts.tv_nsec), std::memory_order_relaxed);
  return 1;
}

// "MODE@alt": the mode's work in the even windows of CUMEMTRACE_BENCH_ALTERNATE_MS of
// CLOCK_MONOTONIC only; in the odd ones the tracker returns once it has read the clock (as
// it does in the even ones). One process then times its work with the mode's work on and
// off at the same CPU speed (workloads.py splits the settling iterations by window).
uint64_t g_window_ns = 0;

bool InOffWindow() {
  if (g_window_ns == 0) return false;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  return (ns / g_window_ns) % 2 == 1;
}

}  // namespace

// mode: "noop" (torch builds and hands over each entry; the tracker returns), "counters"
// (the tracker reads the device's counters, as the shim does per entry), "core" (the shim's
// code, bridge_core.h, handing each event to a function that drops it), "core+clock" (the
// same, reading CLOCK_MONOTONIC per event as the tracer's record does); each of them with
// "@alt" (above). 0 when attached.
extern "C" __attribute__((visibility("default"))) int cumemtrace_tracker_probe_attach(
    const char* mode) {
  cca::CUDAAllocator* allocator = cca::allocator.load();
  std::string m = mode;
  if (const size_t at = m.rfind("@alt"); at != std::string::npos && at + 4 == m.size()) {
    const char* window = getenv("CUMEMTRACE_BENCH_ALTERNATE_MS");
    if (window == nullptr || atoi(window) <= 0) {
      fprintf(stderr, "tracker_cost_probe: %s needs CUMEMTRACE_BENCH_ALTERNATE_MS\n", mode);
      return 1;
    }
    g_window_ns = uint64_t(atoi(window)) * 1'000'000;
    m.resize(at);
  }
  if (m == "noop") {
    allocator->attachAllocatorTraceTracker([](const cca::TraceEntry&) {
      if (InOffWindow()) return;
    });
  } else if (m == "counters") {
    allocator->attachAllocatorTraceTracker([](const cca::TraceEntry& entry) {
      if (InOffWindow()) return;
      DeviceCounters counters;
      CounterReader{}(static_cast<uint32_t>(entry.device_), &counters);
      g_sink.fetch_add(counters.allocated_total, std::memory_order_relaxed);
    });
  } else if (m == "core" || m == "core+clock") {
    // As the shim's (leaked as it is), rounded blocks included.
    using cumemtrace::torch_bridge::SmallPoolBlock;
    auto* core = new BridgeCore<CounterReader, false, SmallPoolBlock>(
        m == "core" ? EmitNothing : EmitWithClock, nullptr, CounterReader{},
        SmallPoolBlock{cumemtrace::torch_bridge::FindDivisions(
            dlopen("libc10_cuda.so", RTLD_LAZY | RTLD_NOLOAD))});
    allocator->attachAllocatorTraceTracker([core](const cca::TraceEntry& entry) {
      if (!InOffWindow()) core->OnEntry(entry);
    });
  } else {
    fprintf(stderr, "tracker_cost_probe: unknown mode %s\n", mode);
    return 1;
  }
  return 0;
}

// Nanoseconds per clock_gettime(CLOCK_MONOTONIC), the clock every record reads: a vDSO read
// of the TSC takes about 20 ns; a clock source the vDSO cannot read makes it a system call.
extern "C" __attribute__((visibility("default"))) double cumemtrace_tracker_probe_clock_ns() {
  constexpr int kCalls = 1000000;
  timespec start, ts, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  uint64_t sum = 0;
  for (int i = 0; i < kCalls; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sum += static_cast<uint64_t>(ts.tv_nsec);
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  g_sink.fetch_add(sum, std::memory_order_relaxed);
  return ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / kCalls;
}
