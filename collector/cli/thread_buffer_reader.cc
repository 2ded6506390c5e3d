#include "collector/cli/thread_buffer_reader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/thread_buffers.h"

namespace cumemtrace {
namespace {

namespace tb = v1::thread_buffers;

constexpr int kEventsPerBatch = 4096;

uint64_t Load(const unsigned char* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

// The tracer's TscMap::ToMonotonic (tracer/recording/tsc_clock.h), on the map it wrote.
uint64_t ToMonotonic(const tb::ClockMap& m, uint64_t tsc) {
  __extension__ typedef __int128 Int128;
  auto scale = [](int64_t ticks, uint64_t mult) {
    return static_cast<uint64_t>(static_cast<int64_t>((Int128{ticks} * mult) >> 32));
  };
  const int64_t delta = static_cast<int64_t>(tsc - m.base_tsc);
  const int64_t slewed = static_cast<int64_t>(m.slew_end_tsc - m.base_tsc);
  if (delta <= slewed) return m.base_ns + scale(delta, m.slew_mult);
  return m.base_ns + scale(slewed, m.slew_mult) + scale(delta - slewed, m.mult);
}

}  // namespace

ThreadBufferRead ReadThreadBuffers(const unsigned char* area, uint64_t bytes,
                                   const std::unordered_map<uint32_t, uint64_t>& received) {
  ThreadBufferRead read;
  if (bytes < tb::kSlotTableOffset) return read;
  tb::Header header;
  memcpy(&header, area, sizeof(header));
  if (header.magic != tb::kMagic || header.layout_version != tb::kLayoutVersion ||
      header.slot_count == 0 || header.slot_count > tb::kMaxSlots || header.slot_units == 0 ||
      header.slot_units > tb::kMaxSlotUnits || (header.slot_units & (header.slot_units - 1)) != 0) {
    return read;
  }
  uint64_t table_end = tb::kSlotTableOffset + uint64_t{header.slot_count} * sizeof(tb::Slot);
  table_end = (table_end + 4095) / 4096 * 4096;
  const uint64_t slot_bytes = uint64_t{header.slot_units} * tb::kUnitBytes;
  if (table_end + header.slot_count * slot_bytes > bytes) return read;  // bounded: no overflow
  read.fallbacks = header.fallbacks;
  const tb::ClockMap clock = header.clocks[header.clock_in_use & 1];
  const bool have_clock = header.clock_in_use <= 1 && clock.mult != 0;
  const uint64_t mask = header.slot_units - 1;
  for (uint32_t i = 0; i < header.slot_count; ++i) {
    const unsigned char* slot_at = area + tb::kSlotTableOffset + uint64_t{i} * sizeof(tb::Slot);
    // The commit first: no unit past it is read.
    const uint64_t committed = Load(slot_at + offsetof(tb::Slot, committed));
    tb::Slot slot;
    memcpy(&slot, slot_at, sizeof(slot));
    // The writer never runs more than a slot ahead of `freed`: older units are overwritten.
    const uint64_t oldest = committed > header.slot_units ? committed - header.slot_units : 0;
    const uint64_t start = std::max<uint64_t>(slot.freed, oldest);
    // Units below `from` were carried by received batches: read for their definitions only.
    uint64_t from = start;
    const auto it = received.find(i);
    if (it != received.end()) from = std::max(from, it->second);
    if (from >= committed) continue;
    // The definitions in effect at `freed`; a later one read below replaces them.
    uint64_t stream = slot.stream, pool_first = slot.pool_first, pool_second = slot.pool_second;
    const unsigned char* units = area + table_end + i * slot_bytes;
    bool counters = false;
    uint64_t allocated_total = 0, allocated_current = 0, reserved_current = 0;
    for (uint64_t p = start; p < committed; ++p) {
      tb::Unit u;
      memcpy(&u, units + (p & mask) * tb::kUnitBytes, sizeof(u));
      const uint8_t kind = static_cast<uint8_t>(u.word >> tb::kKindShift & 0xf);
      if (kind == tb::kDefinition) {
        stream = u.a;
        pool_first = u.b;
        pool_second = u.c;
        continue;
      }
      if (kind == tb::kCounters) {
        counters = true;
        allocated_total = u.a;
        allocated_current = u.b;
        reserved_current = u.c;
        continue;
      }
      const uint8_t action = static_cast<uint8_t>(u.word >> tb::kActionShift & 0xff);
      const bool tsc = (u.word & tb::kTsc) != 0;
      if (kind != tb::kEvent || !v1::TorchAllocatorAction_IsValid(action) || (tsc && !have_clock)) {
        read.rejected += committed - p;
        break;  // damaged: the rest of this slot cannot be trusted
      }
      const bool had_counters = counters;
      counters = false;
      if (p < from) continue;  // carried by a received batch
      v1::ring::TorchRecord& r = read.events.emplace_back();
      r = v1::ring::TorchRecord{};
      r.size = sizeof(r);
      r.type = v1::ring::kTorchEvent;
      r.action = action;
      r.thread_id = slot.thread_id;
      r.device = static_cast<uint32_t>(u.word >> tb::kDeviceShift & 0xff);
      r.timestamp_ns = tsc ? ToMonotonic(clock, u.a) : u.a;
      r.address = u.b;
      r.requested_bytes = u.c;
      r.stream = stream;
      r.sequence = u.word & tb::kSequenceMask;
      r.pool_first = pool_first;
      r.pool_second = pool_second;
      if (had_counters) {
        r.allocated_total = allocated_total;
        r.allocated_current = allocated_current;
        r.reserved_current = reserved_current;
      }
    }
  }
  return read;
}

uint64_t RecoverThreadBuffers(int fd, uint64_t offset, uint64_t bytes,
                              const std::unordered_map<uint32_t, uint64_t>& received,
                              uint64_t sequence, std::vector<std::string>* frames) {
  if (fd < 0 || bytes == 0) return 0;
  void* view = mmap(nullptr, offset + bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) return 0;
  const ThreadBufferRead read =
      ReadThreadBuffers(static_cast<const unsigned char*>(view) + offset, bytes, received);
  munmap(view, offset + bytes);
  v1::StreamMessage message;
  auto finish = [&] {
    if (message.batch().events_size() == 0) return;
    message.mutable_batch()->set_sequence(sequence++);
    frames->push_back(message.SerializeAsString());
    message.Clear();
  };
  for (const v1::ring::TorchRecord& r : read.events) {
    v1::Event* event = message.mutable_batch()->add_events();
    event->set_timestamp_ns(r.timestamp_ns);
    v1::TorchAllocatorEvent* torch = event->mutable_torch_allocator();
    torch->set_action(static_cast<v1::TorchAllocatorAction>(r.action));
    torch->set_device(r.device);
    torch->set_address(r.address);
    torch->set_requested_bytes(r.requested_bytes);
    torch->set_stream(r.stream);
    torch->set_thread_id(r.thread_id);
    torch->set_sequence(r.sequence);
    torch->set_allocated_bytes_total(r.allocated_total);
    torch->set_allocated_bytes_current(r.allocated_current);
    torch->set_reserved_bytes_current(r.reserved_current);
    torch->set_pool_id_first(r.pool_first);
    torch->set_pool_id_second(r.pool_second);
    if (message.batch().events_size() >= kEventsPerBatch) finish();
  }
  finish();
  return read.events.size();
}

}  // namespace cumemtrace
