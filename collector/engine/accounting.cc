#include "collector/engine/accounting.h"

#include <algorithm>

namespace cumemtrace::internal {

uint32_t MemoryTimeline::Allocate(const Event& event, uint32_t slot, uint64_t pos, int32_t phase) {
  const uint8_t kind = event.kind < kMemoryKinds ? event.kind : 0;
  DeviceCounters& d = devices_[slot];
  const uint64_t key = Key(slot, event.a);
  const size_t found = live_.Find(key);
  if (found != AddressMap::kNotFound) {
    // The release was lost (dropped records) or never reported: close the old one here so
    // the address is not counted twice.
    ++d.reallocated_live_address;
    Kill(live_.ValueAt(found), pos);
    live_.EraseAt(found);
  }
  const auto index = static_cast<uint32_t>(allocations_.size());
  allocations_.push_back(Allocation{event.a, event.b, pos, kNever, event.timestamp_ns, slot, phase,
                                    -1, static_cast<uint32_t>(event.c), event.name_id,
                                    event.caller_id, event.thread_id, kind});
  live_.Insert(key, index);

  d.CountAllocation(kind, event.b);
  if (IsDeviceMemory(kind)) {
    d.in_use += event.b;
    if (d.in_use > d.peak || d.peak_pos == kNever) {
      d.peak = d.in_use;
      d.peak_pos = pos;
      d.peak_ns = event.timestamp_ns;
    }
  }
  return index;
}

int64_t MemoryTimeline::Release(const Event& event, uint32_t slot, uint64_t pos) {
  const size_t found = live_.Find(Key(slot, event.a));
  DeviceCounters& d = devices_[slot];
  if (found == AddressMap::kNotFound) {
    ++d.released_unknown_count;
    d.released_unknown_bytes += event.b;
    return -1;
  }
  const uint32_t index = live_.ValueAt(found);
  live_.EraseAt(found);
  Kill(index, pos);
  const Allocation& a = allocations_[index];
  KindStats& k = d.kinds[a.kind];
  ++k.releases;
  k.released_bytes += a.bytes;
  return index;
}

void MemoryTimeline::Kill(uint32_t index, uint64_t pos) {
  Allocation& a = allocations_[index];
  a.death_pos = pos;
  death_order_.push_back(index);
  DeviceCounters& d = devices_[a.slot];
  d.kind_live[a.kind] -= a.bytes;
  if (IsStaticMemory(a.kind)) d.static_live -= a.bytes;
  if (IsDeviceMemory(a.kind)) d.in_use -= a.bytes;
}

void MemoryTimeline::CloseLive(uint64_t end_pos) {
  live_.ForEachValue([this, end_pos](uint32_t index) {
    Allocation& a = allocations_[index];
    KindStats& k = devices_[a.slot].kinds[a.kind];
    ++k.live_at_exit_count;
    k.live_at_exit_bytes += a.bytes;
    a.death_pos = end_pos;
    death_order_.push_back(index);
  });
  live_.Clear();
}

}  // namespace cumemtrace::internal
