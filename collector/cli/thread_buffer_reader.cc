#include "collector/cli/thread_buffer_reader.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collector/cli/shared_ring_reader.h"
#include "proto/cumemtrace/v1/thread_buffers.h"

namespace cumemtrace {
namespace {

namespace tb = v1::thread_buffers;

constexpr int kEventsPerBatch = 4096;

uint64_t Load(const unsigned char* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

ThreadBufferWalk::ThreadBufferWalk(const unsigned char* area, uint64_t bytes,
                                   const std::unordered_map<uint32_t, uint64_t>& received)
    : area_(area), received_(received) {
  if (area == nullptr || bytes < tb::kSlotTableOffset) return;
  tb::Header header;
  memcpy(&header, area, sizeof(header));
  // Layout 1 had no kAttribution units nor the slot's attribution fields.
  if (header.magic != tb::kMagic || header.layout_version < 1 ||
      header.layout_version > tb::kLayoutVersion || header.slot_count == 0 ||
      header.slot_count > tb::kMaxSlots || header.slot_units == 0 ||
      header.slot_units > tb::kMaxSlotUnits || (header.slot_units & (header.slot_units - 1)) != 0) {
    return;
  }
  table_end_ = tb::kSlotTableOffset + uint64_t{header.slot_count} * sizeof(tb::Slot);
  table_end_ = (table_end_ + 4095) / 4096 * 4096;
  slot_units_ = header.slot_units;
  // Bounded above: no product overflows.
  if (table_end_ + header.slot_count * slot_units_ * tb::kUnitBytes > bytes) return;
  slot_count_ = header.slot_count;
  layout_ = header.layout_version;
  clock_ = header.clocks[header.clock_in_use & 1];
  have_clock_ = header.clock_in_use <= 1 && clock_.mult != 0;
  valid_ = true;
}

bool ThreadBufferWalk::OpenSlot() {
  const unsigned char* slot_at = area_ + tb::kSlotTableOffset + uint64_t{slot_} * sizeof(tb::Slot);
  // The commit first: no unit past it is read.
  committed_ = Load(slot_at + offsetof(tb::Slot, committed));
  tb::Slot slot;
  memcpy(&slot, slot_at, sizeof(slot));
  // The writer never runs more than a slot ahead of `freed`: older units are overwritten.
  const uint64_t oldest = committed_ > slot_units_ ? committed_ - slot_units_ : 0;
  at_ = std::max<uint64_t>(slot.freed, oldest);
  // Units below `from_` were carried by received batches: read for their definitions only.
  from_ = at_;
  const auto it = received_.find(slot_);
  if (it != received_.end()) from_ = std::max(from_, it->second);
  if (from_ >= committed_) return false;
  thread_id_ = slot.thread_id;
  // The definitions in effect at `freed`; a later one read replaces them.
  stream_ = slot.stream;
  pool_first_ = slot.pool_first;
  pool_second_ = slot.pool_second;
  const bool attribution = layout_ >= 2;
  attribution_a_ = attribution ? slot.attribution_a : 0;
  attribution_b_ = attribution ? slot.attribution_b : 0;
  attribution_c_ = attribution ? slot.attribution_c : 0;
  counters_ = false;
  return true;
}

bool ThreadBufferWalk::Next(size_t max_events, ThreadBufferRead* read) {
  if (!valid_) return false;
  size_t made = 0;
  while (slot_ < slot_count_) {
    if (!in_slot_) {
      in_slot_ = OpenSlot();
      if (!in_slot_) {
        ++slot_;
        continue;
      }
    }
    const unsigned char* units = area_ + table_end_ + slot_ * slot_units_ * tb::kUnitBytes;
    for (; at_ < committed_; ++at_) {
      if (made >= max_events) return true;
      tb::Unit u;
      memcpy(&u, units + (at_ & (slot_units_ - 1)) * tb::kUnitBytes, sizeof(u));
      const uint8_t kind = static_cast<uint8_t>(u.word >> tb::kKindShift & 0xf);
      if (kind == tb::kDefinition) {
        stream_ = u.a;
        pool_first_ = u.b;
        pool_second_ = u.c;
        continue;
      }
      if (kind == tb::kAttribution && layout_ >= 2) {
        attribution_a_ = u.a;
        attribution_b_ = u.b;
        attribution_c_ = u.c;
        continue;
      }
      if (kind == tb::kCounters) {
        counters_ = true;
        allocated_total_ = u.a;
        allocated_current_ = u.b;
        reserved_current_ = u.c;
        continue;
      }
      const uint8_t action = static_cast<uint8_t>(u.word >> tb::kActionShift & 0xff);
      const bool tsc = (u.word & tb::kTsc) != 0;
      // An autograd node is never a unit (the tracer writes it into the ring).
      if (kind != tb::kEvent || !v1::TorchAllocatorAction_IsValid(action) ||
          action == v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE || (tsc && !have_clock_)) {
        read->rejected += committed_ - at_;
        at_ = committed_;  // damaged: the rest of this slot cannot be trusted
        break;
      }
      const bool had_counters = counters_;
      counters_ = false;
      if (at_ < from_) continue;  // carried by a received batch
      v1::ring::TorchRecord r{};
      r.size = sizeof(r);
      r.type = v1::ring::kTorchEvent;
      r.action = action;
      r.thread_id = thread_id_;
      r.device = static_cast<uint32_t>(u.word >> tb::kDeviceShift & 0xff);
      r.timestamp_ns = tsc ? tb::ToMonotonic(clock_, u.a) : u.a;
      r.address = u.b;
      r.requested_bytes = u.c;
      r.stream = stream_;
      r.sequence = u.word & tb::kSequenceMask;
      r.pool_first = pool_first_;
      r.pool_second = pool_second_;
      if (had_counters) {
        r.allocated_total = allocated_total_;
        r.allocated_current = allocated_current_;
        r.reserved_current = reserved_current_;
      }
      read->events.push_back(r);
      v1::ring::TorchAttribution& attribution = read->attributions.emplace_back();  // zeroed
      if (action == v1::TORCH_ALLOCATOR_ACTION_ALLOC ||
          action == v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED) {
        attribution = tb::UnpackAttribution(attribution_a_, attribution_b_, attribution_c_);
      }
      ++made;
    }
    in_slot_ = false;
    ++slot_;
  }
  return false;
}

ThreadBufferRead ReadThreadBuffers(const unsigned char* area, uint64_t bytes,
                                   const std::unordered_map<uint32_t, uint64_t>& received) {
  ThreadBufferRead read;
  ThreadBufferWalk walk(area, bytes, received);
  while (walk.Next(SIZE_MAX, &read)) {
  }
  if (area != nullptr && bytes >= sizeof(tb::Header)) {
    tb::Header header;
    memcpy(&header, area, sizeof(header));
    if (header.magic == tb::kMagic) read.fallbacks = header.fallbacks;
  }
  return read;
}

ThreadBufferRecovery::ThreadBufferRecovery(int fd, uint64_t offset, uint64_t bytes,
                                           const std::unordered_map<uint32_t, uint64_t>& received,
                                           uint64_t sequence)
    : sequence_(sequence) {
  if (fd < 0 || bytes == 0) return;
  void* view = mmap(nullptr, offset + bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) return;
  view_ = view;
  view_bytes_ = offset + bytes;
  walk_ = std::make_unique<ThreadBufferWalk>(static_cast<const unsigned char*>(view) + offset,
                                             bytes, received);
}

ThreadBufferRecovery::~ThreadBufferRecovery() {
  walk_.reset();
  if (view_ != nullptr) munmap(view_, view_bytes_);
}

void ThreadBufferRecovery::Finish(std::vector<std::string>* frames) {
  if (message_.batch().events_size() == 0) return;
  message_.mutable_batch()->set_sequence(sequence_++);
  frames->push_back(message_.SerializeAsString());
  message_.Clear();
}

bool ThreadBufferRecovery::Continue(int64_t budget_ns, std::vector<std::string>* frames) {
  if (walk_ == nullptr) return true;
  const int64_t deadline = budget_ns < 0 ? -1 : NowNs() + budget_ns;
  bool more = true;
  while (more) {
    read_.events.clear();
    read_.attributions.clear();
    more = walk_->Next(kEventsPerBatch, &read_);
    for (size_t i = 0; i < read_.events.size(); ++i) {
      const v1::ring::TorchRecord& r = read_.events[i];
      v1::Event* event = message_.mutable_batch()->add_events();
      event->set_timestamp_ns(r.timestamp_ns);
      SetTorchEvent(r, event->mutable_torch_allocator());
      if (i < read_.attributions.size()) {
        SetTorchAttribution(read_.attributions[i], event->mutable_torch_allocator());
      }
      if (message_.batch().events_size() >= kEventsPerBatch) Finish(frames);
    }
    events_ += read_.events.size();
    if (more && deadline >= 0 && NowNs() >= deadline) return false;
  }
  Finish(frames);
  walk_.reset();
  munmap(view_, view_bytes_);
  view_ = nullptr;
  return true;
}

}  // namespace cumemtrace
