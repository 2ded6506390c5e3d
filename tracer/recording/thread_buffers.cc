#include "tracer/recording/thread_buffers.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/clock.h"

namespace cumemtrace::tracer {
namespace {

namespace tb = v1::thread_buffers;

uint64_t SlotTableEnd(uint32_t slot_count) {
  const uint64_t end = tb::kSlotTableOffset + uint64_t{slot_count} * sizeof(tb::Slot);
  return (end + 4095) / 4096 * 4096;
}

}  // namespace

uint64_t ThreadBuffers::BytesFor(uint32_t slot_count, uint32_t slot_units) {
  return SlotTableEnd(slot_count) + uint64_t{slot_count} * slot_units * tb::kUnitBytes;
}

ThreadBuffers::~ThreadBuffers() {
  if (t_writer != nullptr && t_writer->owner == this) t_writer = nullptr;
  if (have_key_) pthread_key_delete(key_);
}

void ThreadBuffers::Init(void* memory, uint32_t slot_count, uint32_t slot_units) {
  if (active() || memory == nullptr || slot_count == 0 || (slot_units & (slot_units - 1)) != 0 ||
      slot_units == 0) {
    return;
  }
  if (!have_key_) have_key_ = pthread_key_create(&key_, &ThreadBuffers::ThreadEnded) == 0;
  auto* header = new (memory) tb::Header{};
  header->magic = tb::kMagic;
  header->layout_version = tb::kLayoutVersion;
  header->slot_count = slot_count;
  header->slot_units = slot_units;
  unsigned char* base = static_cast<unsigned char*>(memory);
  slots_ = new (base + tb::kSlotTableOffset) tb::Slot[slot_count]{};
  data_ = base + SlotTableEnd(slot_count);
  slot_count_ = slot_count;
  slot_units_ = slot_units;
  writers_.assign(slot_count, Writer{});
  readers_.assign(slot_count, Reader{});
  fallbacks_taken_ = 0;
  clock_copy_ = 0;
  header_.store(header, std::memory_order_release);
}

ThreadBuffers::Writer* ThreadBuffers::Attach() {
  // Once per thread (and per buffers): a rare path, which may take a system call.
  tb::Header* header = header_.load(std::memory_order_acquire);
  if (header == nullptr) return nullptr;
  for (uint32_t i = 0; i < slot_count_; ++i) {
    uint32_t expected = tb::kFree;
    if (__atomic_load_n(&slots_[i].state, __ATOMIC_RELAXED) != tb::kFree ||
        !__atomic_compare_exchange_n(&slots_[i].state, &expected, uint32_t{tb::kOwned}, false,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      continue;
    }
    Writer& w = writers_[i];
    w.slot = &slots_[i];
    w.units = reinterpret_cast<tb::Unit*>(data_ + uint64_t{i} * slot_units_ * tb::kUnitBytes);
    w.mask = slot_units_ - 1;
    // Positions go on from the slot's last owner: the sender's read position with them.
    w.position = __atomic_load_n(&w.slot->committed, __ATOMIC_RELAXED);
    w.limit = __atomic_load_n(&w.slot->freed, __ATOMIC_ACQUIRE) + slot_units_;
    w.defined = false;
    w.attributed = false;
    // Before the first commit, which the sender reads with acquire.
    w.slot->thread_id = CurrentThreadId();
    w.owner = this;
    t_writer = &w;
    if (have_key_) pthread_setspecific(key_, &w);
    return &w;
  }
  // No slot: this thread's events go into the ring from now on, through a writer that has
  // no room, so that it does not look for a slot at every event.
  static tb::Slot no_slot{};
  static thread_local Writer full;
  full.owner = this;
  full.slot = &no_slot;
  full.mask = UINT64_MAX;  // no room: freed + mask + 1 is 0
  full.position = 0;
  full.limit = 0;
  t_writer = &full;
  Fallback();
  return nullptr;
}

bool ThreadBuffers::Fallback() {
  tb::Header* header = header_.load(std::memory_order_relaxed);
  if (header != nullptr) __atomic_fetch_add(&header->fallbacks, 1, __ATOMIC_RELAXED);
  return false;
}

void ThreadBuffers::ThreadEnded(void* writer) {
  auto* w = static_cast<Writer*>(writer);
  // The sender frees the slot once everything in it is sent.
  __atomic_store_n(&w->slot->state, uint32_t{tb::kEnded}, __ATOMIC_RELEASE);
  if (t_writer == w) t_writer = nullptr;
}

void ThreadBuffers::TakeAll(const TscClock& clock, std::vector<HostRecord>* out,
                            std::vector<SlotPosition>* positions) {
  positions->clear();
  tb::Header* header = header_.load(std::memory_order_acquire);
  if (header == nullptr) return;
  TscMap map;
  const bool have_map = clock.CurrentMap(&map);
  if (have_map) {
    // Into the copy not in use, then named: a sender killed halfway leaves the other whole.
    const uint32_t next = clock_copy_ ^ 1;
    header->clocks[next] = map.Written();
    __atomic_store_n(&header->clock_in_use, uint64_t{next}, __ATOMIC_RELEASE);
    clock_copy_ = next;
  }
  const uint64_t now = MonotonicNs();
  for (uint32_t i = 0; i < slot_count_; ++i) {
    tb::Slot& slot = slots_[i];
    const uint32_t state = __atomic_load_n(&slot.state, __ATOMIC_ACQUIRE);
    Reader& r = readers_[i];
    const uint64_t committed = __atomic_load_n(&slot.committed, __ATOMIC_ACQUIRE);
    if (state == tb::kEnded && r.read == committed &&
        __atomic_load_n(&slot.freed, __ATOMIC_RELAXED) == committed) {
      // Everything of the ended thread reached the kernel: the slot is free again.
      __atomic_store_n(&slot.state, uint32_t{tb::kFree}, __ATOMIC_RELEASE);
      continue;
    }
    unsigned char* slot_data = data_ + uint64_t{i} * slot_units_ * tb::kUnitBytes;
    if (state != tb::kFree && !r.populated) {
      // A page's first use is a page fault on the writer's thread: made present here, once
      // per slot (Linux 5.14 and later; elsewhere at their first use, as before).
      r.populated = true;
      madvise(slot_data, uint64_t{slot_units_} * tb::kUnitBytes, MADV_POPULATE_WRITE);
    }
    if (r.read == committed) continue;
    const uint32_t thread_id = slot.thread_id;
    const auto* units = reinterpret_cast<const tb::Unit*>(slot_data);
    for (; r.read < committed; ++r.read) {
      const tb::Unit& u = units[r.read & (slot_units_ - 1)];
      const uint8_t kind = static_cast<uint8_t>(u.word >> tb::kKindShift & 0xf);
      if (kind == tb::kDefinition) {
        r.stream = u.a;
        r.pool_first = u.b;
        r.pool_second = u.c;
        continue;
      }
      if (kind == tb::kAttribution) {
        r.attribution = {u.a, u.b, u.c};
        continue;
      }
      if (kind == tb::kCounters) {
        r.counters = true;
        r.allocated_total = u.a;
        r.allocated_current = u.b;
        r.reserved_current = u.c;
        continue;
      }
      HostRecord& record = out->emplace_back();
      record.type = HostRecord::Type::kTorchAllocator;
      record.thread_id = thread_id;
      record.timestamp_ns =
          (u.word & tb::kTsc) == 0 ? u.a : (have_map ? map.ToMonotonic(u.a) : now);
      record.device = static_cast<uint32_t>(u.word >> tb::kDeviceShift & 0xff);
      record.address = u.b;
      record.bytes = u.c;
      record.torch.action = static_cast<uint8_t>(u.word >> tb::kActionShift & 0xff);
      record.torch.stream = r.stream;
      record.torch.sequence = u.word & tb::kSequenceMask;
      record.torch.pool_first = r.pool_first;
      record.torch.pool_second = r.pool_second;
      if (record.torch.action == v1::TORCH_ALLOCATOR_ACTION_ALLOC ||
          record.torch.action == v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED) {
        r.attribution.To(&record.torch);
      }
      if (r.counters) {
        record.torch.allocated_total = r.allocated_total;
        record.torch.allocated_current = r.allocated_current;
        record.torch.reserved_current = r.reserved_current;
        r.counters = false;
      }
    }
    positions->push_back({i, r.read, r.stream, r.pool_first, r.pool_second, r.attribution});
  }
}

void ThreadBuffers::Free(const SlotPosition& position) {
  if (!active() || position.slot >= slot_count_) return;
  tb::Slot& slot = slots_[position.slot];
  if (position.position <= __atomic_load_n(&slot.freed, __ATOMIC_RELAXED)) return;
  slot.stream = position.stream;
  slot.pool_first = position.pool_first;
  slot.pool_second = position.pool_second;
  slot.attribution_a = position.attribution.a;
  slot.attribution_b = position.attribution.b;
  slot.attribution_c = position.attribution.c;
  __atomic_store_n(&slot.freed, position.position, __ATOMIC_RELEASE);
}

uint64_t ThreadBuffers::TakeFallbacks() {
  tb::Header* header = header_.load(std::memory_order_acquire);
  if (header == nullptr) return 0;
  const uint64_t total = __atomic_load_n(&header->fallbacks, __ATOMIC_RELAXED);
  const uint64_t fresh = total - fallbacks_taken_;
  fallbacks_taken_ = total;
  return fresh;
}

void ThreadBuffers::ResetInChildAfterFork() {
  // The forking thread is the child's only one: its writer is the only one to forget.
  t_writer = nullptr;
  if (have_key_) pthread_setspecific(key_, nullptr);
  header_.store(nullptr, std::memory_order_release);
  slots_ = nullptr;
  data_ = nullptr;
  slot_count_ = 0;
}

}  // namespace cumemtrace::tracer
