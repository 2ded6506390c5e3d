// Internal: per-device memory accounting over a process's time-ordered events. Keeps every
// allocation with its birth and death positions so that the live set at any instant (the
// peak, or points of a future downsampled timeline) is a filter over one table, not a copy
// of the live set taken at every new maximum.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "collector/engine/decoded_stream.h"

namespace cumemtrace::internal {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr int kMemoryKinds = 8;  // v1::MemoryKind values 0..7

// Program-own device memory (design.md "What counts where").
inline bool IsDeviceMemory(uint8_t kind) { return kind == 3 || kind == 4; }  // DEVICE, ARRAY
inline bool IsStaticMemory(uint8_t kind) { return kind == 6 || kind == 7; }

// Live allocations by (device slot, address): open addressing with linear probing and
// backward-shift deletion, so the hot path allocates nothing per event (std::unordered_map
// allocates a node per insertion).
class AddressMap {
 public:
  static constexpr size_t kNotFound = ~size_t{0};

  size_t Find(uint64_t key) const {
    if (values_.empty()) return kNotFound;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      if (values_[i] == 0) return kNotFound;
      if (keys_[i] == key) return i;
    }
  }
  uint32_t ValueAt(size_t pos) const { return values_[pos] - 1; }
  // The key must be absent.
  void Insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > values_.size()) Grow();
    size_t i = Home(key);
    while (values_[i] != 0) i = (i + 1) & mask_;
    keys_[i] = key;
    values_[i] = value + 1;
    ++size_;
  }
  void EraseAt(size_t pos) {
    // Shift later members of the probe run back so that no lookup stops early.
    size_t hole = pos;
    for (size_t i = (pos + 1) & mask_; values_[i] != 0; i = (i + 1) & mask_) {
      const size_t home = Home(keys_[i]);
      // Move i into the hole when its home is not in the cyclic range (hole, i].
      if (((i - home) & mask_) >= ((i - hole) & mask_)) {
        keys_[hole] = keys_[i];
        values_[hole] = values_[i];
        hole = i;
      }
    }
    values_[hole] = 0;
    --size_;
  }
  template <typename F>
  void ForEachValue(F&& f) const {
    for (size_t i = 0; i < values_.size(); ++i) {
      if (values_[i] != 0) f(values_[i] - 1);
    }
  }
  void Clear() {
    keys_.clear();
    values_.clear();
    size_ = 0;
    mask_ = 0;
  }

 private:
  size_t Home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void Grow() {
    std::vector<uint64_t> old_keys;
    std::vector<uint32_t> old_values;
    old_keys.swap(keys_);
    old_values.swap(values_);
    const size_t capacity = old_values.empty() ? 1024 : old_values.size() * 2;
    keys_.assign(capacity, 0);
    values_.assign(capacity, 0);
    mask_ = capacity - 1;
    size_ = 0;
    for (size_t i = 0; i < old_values.size(); ++i) {
      if (old_values[i] != 0) Insert(old_keys[i], old_values[i] - 1);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;  // value + 1; 0 marks an empty slot
  size_t size_ = 0;
  size_t mask_ = 0;
};

struct Allocation {
  uint64_t address;
  uint64_t bytes;
  uint64_t birth_pos;  // index of the allocating event in the sorted event vector
  uint64_t death_pos;  // index of the releasing event, kNever while live
  uint64_t birth_ns;   // absolute
  uint32_t slot;       // dense device slot
  int32_t phase;       // phase of origin (innermost attributed range), -1 for none
  int32_t death_phase; // phase it was freed in, -1 for none (or never freed)
  uint32_t stream;
  uint32_t api_id;
  uint32_t caller_id;  // calling module, 0 when not looked up
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

  // One allocation's per-kind and module-global figures; device memory in use and its peak
  // are left to the caller (the in-memory and the streaming sweep keep the peak apart).
  void CountAllocation(uint8_t kind, uint64_t bytes) {
    kind_seen[kind] = true;
    KindStats& k = kinds[kind];
    ++k.allocations;
    k.allocated_bytes += bytes;
    kind_live[kind] += bytes;
    k.peak_bytes = std::max(k.peak_bytes, kind_live[kind]);
    if (IsStaticMemory(kind)) {
      static_live += bytes;
      static_peak = std::max(static_peak, static_live);
    }
  }
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
  void SetDeathPhase(int64_t index, int32_t phase) {
    allocations_[static_cast<size_t>(index)].death_phase = phase;
  }
  const DeviceCounters& device(uint32_t slot) const { return devices_[slot]; }
  const std::vector<Allocation>& allocations() const { return allocations_; }
  // Allocation indices in the order they died (ascending death_pos): the sweep visits
  // positions in order, so this costs an append per death instead of a sort afterwards.
  const std::vector<uint32_t>& death_order() const { return death_order_; }

 private:
  void Kill(uint32_t index, uint64_t pos);

  std::vector<DeviceCounters> devices_;
  std::vector<Allocation> allocations_;
  std::vector<uint32_t> death_order_;
  // (slot, address) -> live allocation index. Slot in the top bits: device addresses are
  // 49-bit virtual addresses, so the packing cannot collide in practice.
  AddressMap live_;
  static uint64_t Key(uint32_t slot, uint64_t address) {
    return address ^ (static_cast<uint64_t>(slot) << 56);
  }
};

}  // namespace cumemtrace::internal
