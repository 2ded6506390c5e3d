// The layout of the per-thread buffers of PyTorch allocator events, carved from the same
// sealed memfd as the shared ring (shared_ring.h), after its data area: plain structs, no
// code, as shared_ring.h.
//
// Each program thread that records a tensor event takes a slot once (a compare-and-swap on
// the slot's state) and from then on is the only writer of that slot's ring of 32-byte units:
// it writes the units with plain stores, then publishes them with a release store of the
// slot's `committed` position. A unit past `committed` is never read, so a record that was
// being written when the process died is never accepted. The tracer's sender thread reads
// every slot, and moves `freed` once the frame that carries its units is in the kernel's
// hands; after the stream ends, the collector reads [freed, committed) of each slot, as it
// reads the ring from the last ring_position it received.
//
// Times are the TSC where the tracer maps TSC to CLOCK_MONOTONIC (the kTsc flag), else
// CLOCK_MONOTONIC nanoseconds: the program's thread never converts. The sender writes the
// map it converts with into the header (two copies, the one in use named last), so the
// collector converts what it reads after a crash with the same map.
//
// Every field is written by the traced process and is untrusted input to the collector.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/cumemtrace/v1/shared_ring.h"

namespace cumemtrace::v1::thread_buffers {

constexpr uint32_t kMagic = 0x42544d43;  // "CMTB" in memory order
constexpr uint32_t kLayoutVersion = 2;  // 2: kAttribution units
constexpr uint64_t kUnitBytes = 32;
// The bounds a collector accepts (the tracer's defaults are well inside them).
constexpr uint32_t kMaxSlots = 4096;
constexpr uint64_t kMaxSlotUnits = uint64_t{1} << 20;

// TSC -> CLOCK_MONOTONIC as the tracer's TscMap (tracer/recording/tsc_clock.h): from
// base_tsc, slew_mult ns per tick (times 2^32) until slew_end_tsc, then mult. mult 0: none.
struct ClockMap {
  uint64_t base_tsc;
  uint64_t base_ns;
  uint64_t slew_end_tsc;
  uint64_t slew_mult;
  uint64_t mult;
};

// A TSC read mapped by `m`: the tracer's sender and hook (tracer/recording/tsc_clock.h) and
// the collector, which maps what it reads after a crash with the map the process wrote last.
// Signed: an unordered read may be taken a little before the base it is mapped from. The
// differences wrap, so a map with any bytes in it is defined arithmetic, not overflow.
inline uint64_t ToMonotonic(const ClockMap& m, uint64_t tsc) {
  __extension__ typedef __int128 Int128;  // GCC and Clang; quiet under -Wpedantic
  const auto scale = [](int64_t ticks, uint64_t mult) {
    return static_cast<uint64_t>(static_cast<int64_t>((Int128{ticks} * mult) >> 32));
  };
  const int64_t delta = static_cast<int64_t>(tsc - m.base_tsc);
  const int64_t slewed = static_cast<int64_t>(m.slew_end_tsc - m.base_tsc);
  if (delta <= slewed) return m.base_ns + scale(delta, m.slew_mult);
  const int64_t after =
      static_cast<int64_t>(static_cast<uint64_t>(delta) - static_cast<uint64_t>(slewed));
  return m.base_ns + scale(slewed, m.slew_mult) + scale(after, m.mult);
}

// At the start of the area (its offset and size are in the handshake's SharedRing).
struct Header {
  uint32_t magic;
  uint32_t layout_version;
  uint32_t slot_count;
  uint32_t slot_units;  // units per slot, a power of two
  // Events written into the shared ring instead because no slot was free (or the thread's
  // slot was full): a count, for the notice.
  uint64_t fallbacks;
  uint64_t clock_in_use;  // 0 or 1: the copy of `clocks` the sender wrote last
  ClockMap clocks[2];
};
static_assert(sizeof(Header) == 112, "the thread buffers header changed: bump kLayoutVersion");
// The slot table follows the header at this offset, then each slot's units, in slot order, at
// the first multiple of 4096 past the table.
constexpr uint64_t kSlotTableOffset = 128;

enum SlotState : uint32_t {
  kFree = 0,
  kOwned = 1,  // a live thread writes into it
  kEnded = 2,  // its thread ended: the sender frees it once everything in it is sent
};

// Three cache lines: the slot table's (taken once per thread), the writer's, the sender's.
struct Slot {
  uint32_t state;      // SlotState
  uint32_t thread_id;  // the owner's (gettid)
  uint64_t reserved0[7];
  uint64_t committed;  // units ever written into this slot (never wraps); release-stored
  uint64_t reserved1[7];
  uint64_t freed;  // the sender's: units below this reached the kernel and may be overwritten
  // The definitions in effect at `freed` (the writer writes a kDefinition unit when they
  // change; the one before `freed` may already be overwritten).
  uint64_t stream;
  uint64_t pool_first;
  uint64_t pool_second;
  // The kAttribution unit's a, b, c in effect at `freed` (0, 0, 0: none), as the definitions.
  uint64_t attribution_a;
  uint64_t attribution_b;
  uint64_t attribution_c;
  uint64_t reserved2;
};
static_assert(sizeof(Slot) == 192, "the slot layout changed: bump kLayoutVersion");

// A unit: `word` says what it is.
//   word bits 0..39: the event's per-device sequence; 40..47: device; 48..55: action
//   (v1::TorchAllocatorAction of an allocator event: never AUTOGRAD_NODE, which the tracer
//   writes into the ring only, so that readers of this layout need no new one); 56..59:
//   UnitKind; 60: kTsc (time is a TSC read).
// kEvent: time, address, requested bytes. kCounters (before the event they belong to, in the
// same commit): allocated total, allocated current, reserved current. kDefinition (before
// the first event it applies to): stream, pool_first, pool_second.
struct Unit {
  uint64_t a;
  uint64_t b;
  uint64_t c;
  uint64_t word;
};
static_assert(sizeof(Unit) == kUnitBytes, "the unit layout changed: bump kLayoutVersion");
// kAttribution: what was running when the ALLOC events after it were born, until the next
// one (`run --modules`, `--ops`): a = module | op << 32, b = inner op | autograd thread << 32,
// c = autograd sequence as ring::TorchAttribution's. Written only when it changes.
enum UnitKind : uint8_t { kEvent = 1, kCounters = 2, kDefinition = 3, kAttribution = 4 };
constexpr uint64_t kSequenceBits = 40;
constexpr uint64_t kSequenceMask = (uint64_t{1} << kSequenceBits) - 1;
constexpr int kDeviceShift = 40;
constexpr int kActionShift = 48;
constexpr int kKindShift = 56;
constexpr uint64_t kTsc = uint64_t{1} << 60;

// A kAttribution unit's words (a, b, c) from and to the ring's TorchAttribution: the one
// packing, for the tracer that writes and sends them and the collector that recovers them.
inline void PackAttribution(const ring::TorchAttribution& t, uint64_t* a, uint64_t* b,
                            uint64_t* c) {
  *a = uint64_t{t.module} | uint64_t{t.op} << 32;
  *b = uint64_t{t.inner_op} | uint64_t{t.autograd_thread} << 32;
  *c = t.autograd_sequence;
}
inline ring::TorchAttribution UnpackAttribution(uint64_t a, uint64_t b, uint64_t c) {
  ring::TorchAttribution t{};
  t.module = static_cast<uint32_t>(a);
  t.op = static_cast<uint32_t>(a >> 32);
  t.inner_op = static_cast<uint32_t>(b);
  t.autograd_thread = static_cast<uint32_t>(b >> 32);
  t.autograd_sequence = c;
  return t;
}

}  // namespace cumemtrace::v1::thread_buffers
