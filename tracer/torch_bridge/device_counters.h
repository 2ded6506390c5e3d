// The device's counters as the shim reads them for an event. Needs torch's headers: used by
// the shim (torch_bridge_shim.cc) and by benchmarks/gpu/tracker_cost_probe.cc, which
// measures what this very read costs in a program.
#pragma once

#include <cstdint>

#include <c10/cuda/CUDACachingAllocator.h>

#include "tracer/torch_bridge/bridge_core.h"

namespace cumemtrace::torch_bridge {

// torch.cuda.memory_stats' aggregate counters of `device`; false when there is no allocator
// or it refuses the device.
inline bool ReadDeviceCounters(c10::cuda::CUDACachingAllocator::CUDAAllocator* allocator,
                               uint32_t device, DeviceCounters* out) noexcept {
  try {
    if (allocator == nullptr) return false;
    const auto stats = allocator->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out->allocated_total = static_cast<uint64_t>(stats.allocated_bytes[kAll].allocated);
    out->allocated_current = static_cast<uint64_t>(stats.allocated_bytes[kAll].current);
    out->reserved_current = static_cast<uint64_t>(stats.reserved_bytes[kAll].current);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace cumemtrace::torch_bridge
