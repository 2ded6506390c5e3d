// The device's counters as the shim reads them for an event, and the rounded blocks that
// need no read. Needs torch's headers: used by the shim (torch_bridge_shim.cc) and by
// benchmarks/gpu/tracker_cost_probe.cc, which measures what this very work costs in a
// program.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>

#include "tracer/sources/torch_bridge/bridge_core.h"

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

// torch's roundup_power2_divisions(size), the config its round_size reads for each request.
using DivisionsFn = size_t (*)(size_t);

// The CUDA allocator's own config where libc10_cuda exports it (torch up to 2.8), else the
// config shared by torch's device allocators in libc10 (2.9 on, where the CUDA one is an
// inline that defers to it); nullptr where `c10_cuda` (a dlopen handle) and its libraries
// export neither. Looked up, not linked: the shim links no torch library.
inline DivisionsFn FindDivisions(void* c10_cuda) {
  if (c10_cuda == nullptr) return nullptr;
  constexpr const char* kNames[] = {
      "_ZN3c104cuda20CUDACachingAllocator19CUDAAllocatorConfig24roundup_power2_divisionsEm",
      "_ZN3c1016CachingAllocator26AcceleratorAllocatorConfig24roundup_power2_divisionsEm"};
  for (const char* name : kNames) {
    if (void* symbol = dlsym(c10_cuda, name)) return reinterpret_cast<DivisionsFn>(symbol);
  }
  return nullptr;
}

// A small-pool block that needs no counter read (bridge_core.h); none without `divisions`.
struct SmallPoolBlock {
  DivisionsFn divisions = nullptr;
  uint64_t operator()(uint64_t requested) const noexcept {
    if (divisions == nullptr) return 0;
    const uint64_t block = RoundedSmallBlock(requested, 0);
    // Divisions (2 or more) round only above kTorchMinBlockSize times their number: torch is
    // not asked up to twice that, nor for a request the small pool does not hold.
    if (block == 0 || requested <= 2 * kTorchMinBlockSize) return block;
    try {
      return RoundedSmallBlock(requested, divisions(requested));
    } catch (...) {
      return 0;
    }
  }
};

}  // namespace cumemtrace::torch_bridge
