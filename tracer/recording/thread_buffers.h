// Per-thread, single-writer buffers for the PyTorch bridge's tensor events, in shared memory
// the collector reads after a crash (proto/cumemtrace/v1/thread_buffers.h has the layout and
// the protocol). The ring (record_queue.h) takes a lock per record and is shared by every
// thread; here a thread takes a slot once, at its first event, and then writes with plain
// stores and one release store of its commit position: no read-modify-write on the hot path,
// and a 32-byte unit per event instead of a 96-byte record. The time stays a TSC read where
// the tracer maps the TSC: the sender converts it, not the program's thread.
//
// When there is no free slot, or the thread's slot is full, Write returns false and the
// caller writes the event into the ring instead (counted in Header.fallbacks): nothing is
// lost, and order across both is the collector's, from time and the per-device sequence.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "proto/cumemtrace/v1/shared_ring.h"
#include "proto/cumemtrace/v1/thread_buffers.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/tsc_clock.h"

namespace cumemtrace::tracer {

// An ALLOC's attribution (`run --modules`, `--ops`) as a kAttribution unit's three words,
// packed as proto/cumemtrace/v1/thread_buffers.h's PackAttribution says.
struct AttributionWords {
  uint64_t a = 0;  // module | op << 32
  uint64_t b = 0;  // inner op | autograd thread << 32
  uint64_t c = 0;  // autograd sequence, as ring::TorchAttribution's
  static AttributionWords Of(const v1::ring::TorchAttribution& t) {
    AttributionWords w;
    v1::thread_buffers::PackAttribution(t, &w.a, &w.b, &w.c);
    return w;
  }
  void To(HostRecord::TorchFields* f) const {
    const v1::ring::TorchAttribution t = v1::thread_buffers::UnpackAttribution(a, b, c);
    f->module = t.module;
    f->op = t.op;
    f->inner_op = t.inner_op;
    f->autograd_thread = t.autograd_thread;
    f->autograd_sequence = t.autograd_sequence;
  }
  bool operator!=(const AttributionWords& o) const { return a != o.a || b != o.b || c != o.c; }
};

// One tensor event as the bridge hands it over (its per-device sequence taken under the
// allocator's device lock).
struct TensorEvent {
  uint64_t time;  // a TSC read when `tsc`, else CLOCK_MONOTONIC ns
  bool tsc;
  bool counters;  // the three counters below are the event's (an ALLOC that read them)
  uint8_t action;
  uint32_t device;
  uint64_t sequence;
  uint64_t address;
  uint64_t requested_bytes;
  uint64_t stream;
  uint64_t pool_first;
  uint64_t pool_second;
  uint64_t allocated_total;
  uint64_t allocated_current;
  uint64_t reserved_current;
  // `run --modules` / `--ops`: an ALLOC's attribution, written before the ALLOC when it
  // differs from the last one this thread wrote. `attributed` false: none is ever written.
  bool attributed = false;
  AttributionWords attribution;
};

class ThreadBuffers {
 public:
  // The defaults: 64 slots of 16384 units (512 KiB: 10,000 tensor events or more, a
  // thread's share between two drains at a million events a second), 32 MiB in all, of which
  // only the slots threads took are ever touched.
  static constexpr uint32_t kDefaultSlots = 64;
  static constexpr uint32_t kDefaultSlotUnits = 16384;
  // Bytes of the area for that many slots (slot_units a power of two).
  static uint64_t BytesFor(uint32_t slot_count, uint32_t slot_units);

  ThreadBuffers() = default;
  // Outlived by every thread that wrote into it but the one that destroys it (the tracer's
  // is never destroyed; a test's lives as long as its threads).
  ~ThreadBuffers();
  ThreadBuffers(const ThreadBuffers&) = delete;
  ThreadBuffers& operator=(const ThreadBuffers&) = delete;

  // Lays the buffers out in `memory` (BytesFor bytes, zeroed, shared with the collector).
  // Called before any event is written (the ring's Create); allocates the sender's state.
  void Init(void* memory, uint32_t slot_count, uint32_t slot_units);
  bool active() const { return header_.load(std::memory_order_acquire) != nullptr; }

  // The program's thread: false when the event must go into the ring instead.
  bool Write(const TensorEvent& e) {
    Writer* w = t_writer;
    // `this` is in a register: the check loads only the writer's own line.
    if (__builtin_expect(w == nullptr || w->owner != this, 0)) {
      w = Attach();
      if (w == nullptr) return false;
    }
    if (__builtin_expect(e.sequence > v1::thread_buffers::kSequenceMask || e.device > 255, 0)) {
      return Fallback();
    }
    const bool define = !w->defined || e.stream != w->stream || e.pool_first != w->pool_first ||
                        e.pool_second != w->pool_second;
    // A new writer of a slot writes its first one even when it is all zero: the reader may
    // still hold the slot's previous thread's.
    const bool attribute = e.attributed && (!w->attributed || e.attribution != w->attribution);
    const uint64_t need = 1 + uint64_t{define} + uint64_t{attribute} + uint64_t{e.counters};
    uint64_t at = w->position;
    if (__builtin_expect(at + need > w->limit, 0)) {
      // The sender's line, read only when the space known so far runs out.
      w->limit = __atomic_load_n(&w->slot->freed, __ATOMIC_ACQUIRE) + w->mask + 1;
      if (at + need > w->limit) return Fallback();
    }
    const uint64_t word = (e.sequence & v1::thread_buffers::kSequenceMask) |
                          uint64_t{e.device} << v1::thread_buffers::kDeviceShift |
                          uint64_t{e.action} << v1::thread_buffers::kActionShift;
    if (define) {
      Put(w, at++, e.stream, e.pool_first, e.pool_second,
          word | uint64_t{v1::thread_buffers::kDefinition} << v1::thread_buffers::kKindShift);
      w->stream = e.stream;
      w->pool_first = e.pool_first;
      w->pool_second = e.pool_second;
      w->defined = true;
    }
    if (attribute) {
      Put(w, at++, e.attribution.a, e.attribution.b, e.attribution.c,
          word | uint64_t{v1::thread_buffers::kAttribution} << v1::thread_buffers::kKindShift);
      w->attribution = e.attribution;
      w->attributed = true;
    }
    if (e.counters) {
      Put(w, at++, e.allocated_total, e.allocated_current, e.reserved_current,
          word | uint64_t{v1::thread_buffers::kCounters} << v1::thread_buffers::kKindShift);
    }
    Put(w, at++, e.time, e.address, e.requested_bytes,
        word | uint64_t{v1::thread_buffers::kEvent} << v1::thread_buffers::kKindShift |
            (e.tsc ? v1::thread_buffers::kTsc : 0));
    w->position = at;
    // The commit: a plain store on x86-64, ordered after the units' stores.
    __atomic_store_n(&w->slot->committed, at, __ATOMIC_RELEASE);
    // The next events' line, asked for now: the slot is larger than what the program leaves
    // in the caches, and the next write would otherwise wait for its line.
    __builtin_prefetch(&w->units[(at + 4) & w->mask], 1, 3);
    return true;
  }

  // The sender's side. A slot's read position after a Take, for Free once the frame that
  // carries its records is in the kernel's hands.
  struct SlotPosition {
    uint32_t slot;
    uint64_t position;
    uint64_t stream, pool_first, pool_second;  // the definitions in effect there
    AttributionWords attribution;              // and the attribution
  };
  // Appends every event committed since the last call to *out as kTorchAllocator records,
  // times converted with `clock`'s map (whose map it also writes into the header, for the
  // collector); *positions gets each slot's read position that moved. Slots of ended threads
  // whose events are all freed become free.
  void TakeAll(const TscClock& clock, std::vector<HostRecord>* out,
               std::vector<SlotPosition>* positions);
  void Free(const SlotPosition& position);
  // Events written into the ring instead since the last call (no slot, or a full one).
  uint64_t TakeFallbacks();

  // In a forked child, on its only thread: the parent's buffers stay the parent's (the
  // caller unmaps them); this thread's slot is forgotten without a write.
  void ResetInChildAfterFork();

 private:
  // A cache line of its own: one thread's writes never take another's line.
  struct alignas(64) Writer {
    const ThreadBuffers* owner = nullptr;  // the buffers this writer belongs to
    v1::thread_buffers::Slot* slot = nullptr;
    v1::thread_buffers::Unit* units = nullptr;
    uint64_t mask = 0;
    uint64_t position = 0;
    uint64_t limit = 0;
    uint64_t stream = 0, pool_first = 0, pool_second = 0;
    bool defined = false;
    AttributionWords attribution;
    bool attributed = false;
  };
  // The sender's state of a slot: where it reads, and the definitions and counters in effect.
  struct Reader {
    uint64_t read = 0;
    uint64_t stream = 0, pool_first = 0, pool_second = 0;
    bool counters = false;   // a kCounters unit waits for its event
    bool populated = false;  // the slot's pages made present for its owner
    AttributionWords attribution;
    uint64_t allocated_total = 0, allocated_current = 0, reserved_current = 0;
  };

  static void Put(Writer* w, uint64_t at, uint64_t a, uint64_t b, uint64_t c, uint64_t word) {
    v1::thread_buffers::Unit* unit = &w->units[at & w->mask];
    unit->a = a;
    unit->b = b;
    unit->c = c;
    unit->word = word;
  }
  Writer* Attach();
  bool Fallback();
  static void ThreadEnded(void* writer);

  // Defined here with its constant initializer, so that every file that inlines Write reads
  // it directly, without a call that asks whether it needs a dynamic initialization first.
  static inline thread_local Writer* t_writer = nullptr;
  std::atomic<v1::thread_buffers::Header*> header_{nullptr};
  v1::thread_buffers::Slot* slots_ = nullptr;
  unsigned char* data_ = nullptr;
  uint32_t slot_count_ = 0;
  uint32_t slot_units_ = 0;
  std::vector<Writer> writers_;   // one per slot, made by Init
  std::vector<Reader> readers_;   // the sender's
  uint64_t fallbacks_taken_ = 0;  // the sender's
  uint32_t clock_copy_ = 0;       // the sender's: the copy of the map written last
  pthread_key_t key_{};
  bool have_key_ = false;
};

}  // namespace cumemtrace::tracer
