// Internal: per-device memory accounting over a process's time-ordered events. Keeps every
// allocation with its birth and death positions so that the live set at any instant (the
// peak, or points of a future downsampled timeline) is a filter over one table, not a copy
// of the live set taken at every new maximum.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <vector>

#include "collector/engine/decoded.h"

namespace cumemtrace::internal {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr int kMemoryKinds = 8;  // v1::MemoryKind values 0..7

// Program-own device memory (design.md "What counts where").
inline bool IsDeviceMemory(uint8_t kind) { return kind == 3 || kind == 4; }  // DEVICE, ARRAY
inline bool IsStaticMemory(uint8_t kind) { return kind == 6 || kind == 7; }

struct Allocation {
  uint64_t address;
  uint64_t bytes;
  uint64_t birth_pos;  // index of the allocating event in the sorted event vector
  uint64_t death_pos;  // index of the releasing event, kNever while live
  uint64_t birth_ns;   // absolute
  uint32_t slot;       // dense device slot
  int32_t phase;       // phase of origin (innermost attributed range), -1 for none
  uint32_t api_id;
  uint32_t thread_id;
  uint8_t kind;
};

struct DeviceCounters {
  uint64_t in_use = 0;  // DEVICE + ARRAY live bytes
  uint64_t peak = 0;
  uint64_t peak_pos = kNever;
  uint64_t peak_ns = 0;
  uint64_t static_live = 0;
  uint64_t static_peak = 0;
  std::array<uint64_t, kMemoryKinds> kind_live{};
  std::array<KindStats, kMemoryKinds> kinds{};
  std::array<bool, kMemoryKinds> kind_seen{};
  uint64_t released_unknown_count = 0;
  uint64_t released_unknown_bytes = 0;
  uint64_t reallocated_live_address = 0;
  uint64_t kernel_count = 0;
  uint64_t kernel_busy_ns = 0;
};

class MemoryTimeline {
 public:
  explicit MemoryTimeline(size_t device_slots) : devices_(device_slots) {}

  // Returns the new allocation's index.
  uint32_t Allocate(const Event& event, uint32_t slot, uint64_t pos, int32_t phase);
  // Returns the released allocation's index, or -1 for an address never seen allocated.
  int64_t Release(const Event& event, uint32_t slot, uint64_t pos);
  // Closes what is still live at the process's end (after the last event).
  void CloseLive(uint64_t end_pos);

  uint64_t InUse(uint32_t slot) const { return devices_[slot].in_use; }
  DeviceCounters& device(uint32_t slot) { return devices_[slot]; }
  const std::vector<Allocation>& allocations() const { return allocations_; }

 private:
  void Kill(uint32_t index, uint64_t pos);

  std::vector<DeviceCounters> devices_;
  std::vector<Allocation> allocations_;
  // (slot, address) -> live allocation index. Slot in the top bits: device addresses are
  // 49-bit virtual addresses, so the packing cannot collide in practice.
  std::unordered_map<uint64_t, uint32_t> live_;
  static uint64_t Key(uint32_t slot, uint64_t address) {
    return address ^ (static_cast<uint64_t>(slot) << 56);
  }
};

}  // namespace cumemtrace::internal
