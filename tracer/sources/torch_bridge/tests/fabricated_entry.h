// An entry shaped like torch's c10::CachingDeviceAllocator::TraceEntry (the members
// bridge_core.h reads), for driving the bridge's code without torch: its tests and the
// tracer's benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace cumemtrace::torch_bridge {

struct FabricatedEntry {
  enum Action {
    ALLOC,
    FREE_REQUESTED,
    FREE_COMPLETED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    SNAPSHOT,
    OOM
  };
  Action action_;
  int8_t device_;
  size_t addr_;
  void* stream_;
  size_t size_;
  std::pair<unsigned long long, unsigned long long> mempool_;
  union {
    int64_t t_;
    uint64_t approx_t_;  // getApproximateTime(): the TSC where torch has C10_RDTSC
  } time_;
};

inline FabricatedEntry Entry(FabricatedEntry::Action action, int8_t device, size_t address,
                             size_t size, uint64_t tsc = 0) {
  FabricatedEntry entry{action, device, address, reinterpret_cast<void*>(0x5000), size, {0, 0}, {}};
  entry.time_.approx_t_ = tsc;
  return entry;
}

}  // namespace cumemtrace::torch_bridge
