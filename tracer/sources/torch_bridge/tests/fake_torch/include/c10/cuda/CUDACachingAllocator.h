// A stand-in for torch's c10/cuda/CUDACachingAllocator.h with only the names the bridge
// shim uses, so that CI builds the real shim source and drives it without torch. Written
// for the tests; the layouts here are the tests' own, not torch's (the shim only ever
// touches them through these names).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

// As c10/util/ApproximateClock.h on x86-64: entries are timed with the TSC.
#if defined(__x86_64__)
#define C10_RDTSC
#endif

namespace c10 {
using DeviceIndex = int8_t;

namespace CachingAllocator {
enum struct StatType : uint64_t { AGGREGATE = 0, SMALL_POOL = 1, LARGE_POOL = 2, NUM_TYPES = 3 };
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
};
using StatArray = std::array<Stat, static_cast<size_t>(StatType::NUM_TYPES)>;
}  // namespace CachingAllocator

namespace CachingDeviceAllocator {
struct DeviceStats {
  CachingAllocator::StatArray allocated_bytes;
  CachingAllocator::StatArray reserved_bytes;
};
struct TraceEntry {
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
  Action action_ = ALLOC;
  DeviceIndex device_ = 0;
  size_t addr_ = 0;
  void* stream_ = nullptr;
  size_t size_ = 0;
  std::pair<unsigned long long, unsigned long long> mempool_{0, 0};
  union {
    int64_t t_;
    uint64_t approx_t_;
  } time_{};
};
using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;
}  // namespace CachingDeviceAllocator

namespace cuda::CUDACachingAllocator {
using c10::CachingDeviceAllocator::AllocatorTraceTracker;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::TraceEntry;

class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  virtual DeviceStats getDeviceStats(DeviceIndex device) = 0;
  virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
  virtual std::string name() = 0;
};

extern std::atomic<CUDAAllocator*> allocator;
}  // namespace cuda::CUDACachingAllocator
}  // namespace c10
