// What the PyTorch bridge shim does with each allocator trace entry, written as templates
// over the entry type and the counter reader, so that the unit tests drive exactly this code
// with fabricated entries (no torch needed) and the shim instantiates it with torch's own
// c10::CachingDeviceAllocator::TraceEntry.
//
// Why counters ride along: an ALLOC entry names the size the tensor asked for, but
// max_memory_allocated counts the block's size (rounded up, sometimes a whole unsplit free
// block). The allocator adds the block's size to allocated_bytes.allocated (a cumulative
// counter) right after it records the ALLOC, under the same device lock, so the block's size
// is that counter as the device's next event sees it minus the counter this ALLOC saw. Frees
// never move that counter, so they read none (half of a loop of small tensors' reads): the
// next event that carries counters settles the ALLOC, as long as no event in between was
// lost. Each event has a per-device sequence number; the collector does the subtraction, and
// a probe from the sender thread settles an ALLOC that only frees follow.
//
// Most tensors of a loop of small ops need no read at all: a block of the small pool (at
// most 1 MiB) is always split to the request rounded up to 512 bytes, unless torch's
// roundup_power2_divisions rounds that size further. Where the shim's `SmallBlock` says so,
// the ALLOC goes out as ALLOC_ROUNDED without counters; the collector sizes it, takes it out
// of the next counted difference, and checks the whole against the current counter at every
// event that carries one.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tracer/sources/torch_bridge/bridge_abi.h"

namespace cumemtrace::torch_bridge {

// c10's DeviceIndex is an int8_t: 128 slots cover every device an allocator can have.
constexpr uint32_t kMaxDevices = 128;

// The aggregate counters of one device allocator (torch.cuda.memory_stats' "all" values).
struct DeviceCounters {
  uint64_t allocated_total = 0;    // allocated_bytes.allocated (cumulative)
  uint64_t allocated_current = 0;  // allocated_bytes.current
  uint64_t reserved_current = 0;   // reserved_bytes.current
};

// Our number for an entry's action; 0 for actions not sent (SNAPSHOT, or a value a later
// torch added). Every action sent is recorded under its own device's allocator lock, which
// OnEntry's sequence numbers rely on (see there); SNAPSHOT is not (it always names device 0),
// nor is the USER_DEFINED annotation of some torch versions: check before sending one.
template <typename Entry>
uint32_t ActionOf(const Entry& entry) {
  switch (entry.action_) {
    case Entry::ALLOC:
      return CUMEMTRACE_TORCH_ALLOC;
    case Entry::FREE_REQUESTED:
      return CUMEMTRACE_TORCH_FREE_REQUESTED;
    case Entry::FREE_COMPLETED:
      return CUMEMTRACE_TORCH_FREE_COMPLETED;
    case Entry::SEGMENT_ALLOC:
      return CUMEMTRACE_TORCH_SEGMENT_ALLOC;
    case Entry::SEGMENT_FREE:
      return CUMEMTRACE_TORCH_SEGMENT_FREE;
    case Entry::SEGMENT_MAP:
      return CUMEMTRACE_TORCH_SEGMENT_MAP;
    case Entry::SEGMENT_UNMAP:
      return CUMEMTRACE_TORCH_SEGMENT_UNMAP;
    case Entry::OOM:
      return CUMEMTRACE_TORCH_OOM;
    default:
      return 0;
  }
}

// Fills *out from one entry; false when the entry is not sent (see ActionOf) or names a
// device outside [0, kMaxDevices). BridgeCore sends no FREE_COMPLETED (see OnEntry).
template <typename Entry>
bool ConvertEntry(const Entry& entry, cumemtrace_torch_event* out) {
  const uint32_t action = ActionOf(entry);
  if (action == 0) return false;
  const auto device = static_cast<int64_t>(entry.device_);
  if (device < 0 || device >= static_cast<int64_t>(kMaxDevices)) return false;
  *out = cumemtrace_torch_event{};
  out->action = action;
  out->device = static_cast<uint32_t>(device);
  out->address = static_cast<uint64_t>(entry.addr_);
  out->requested_bytes = static_cast<uint64_t>(entry.size_);
  out->stream = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(entry.stream_));
  out->pool_id_first = static_cast<uint64_t>(entry.mempool_.first);
  out->pool_id_second = static_cast<uint64_t>(entry.mempool_.second);
  return true;
}

// The entry's own time as a TSC value when torch took it with the TSC (c10's
// getApproximateTime under C10_RDTSC: the counter the tracer's clock maps), else 0. torch
// reads the TSC for every entry anyway, so the hook need not read it again.
template <typename Entry, typename = void>
struct HasApproximateTime : std::false_type {};
template <typename Entry>
struct HasApproximateTime<Entry, std::void_t<decltype(std::declval<Entry>().time_.approx_t_)>>
    : std::true_type {};
template <bool kTimeIsTsc, typename Entry>
uint64_t EntryTsc(const Entry& entry) {
  if constexpr (kTimeIsTsc && HasApproximateTime<Entry>::value) {
    return static_cast<uint64_t>(entry.time_.approx_t_);
  } else {
    return 0;
  }
}

// torch's kMinBlockSize, and its kSmallSize: the small pool's largest block.
constexpr uint64_t kTorchMinBlockSize = 512;
constexpr uint64_t kTorchSmallSize = 1u << 20;

// The block of a small-pool request when it is the request rounded up to 512 bytes (torch's
// round_size without roundup_power2_divisions), else 0. `divisions` is what torch's
// roundup_power2_divisions(requested) says now (it can change while the program runs).
inline uint64_t RoundedSmallBlock(uint64_t requested, uint64_t divisions) {
  if (requested == 0 || requested > kTorchSmallSize) return 0;
  if (divisions > 1 && requested > kTorchMinBlockSize * divisions) return 0;
  return (requested + kTorchMinBlockSize - 1) / kTorchMinBlockSize * kTorchMinBlockSize;
}

// Never knows a block: every ALLOC reads the counters.
struct NoRoundedBlocks {
  uint64_t operator()(uint64_t /*requested*/) const noexcept { return 0; }
};

// Names no operator (op_context.h's state is the shim's).
struct NoOps {
  void operator()(cumemtrace_torch_event* /*alloc*/) const noexcept {}
};

// The tracker's state. OnEntry runs on allocator threads under the device's lock (so one
// device's entries never run concurrently); Probe runs on the tracer's sender thread.
// `ReadCounters` is callable as bool(uint32_t device, DeviceCounters*); `kTimeIsTsc` says
// whether the entries' time is a TSC read (EntryTsc); `SmallBlock` is callable as
// uint64_t(uint64_t requested): an ALLOC's block where it needs no counters, else 0;
// `Ops` is callable as void(cumemtrace_torch_event*): fills an ALLOC's operators.
template <typename ReadCounters, bool kTimeIsTsc = false, typename SmallBlock = NoRoundedBlocks,
          typename Ops = NoOps>
class BridgeCore {
 public:
  BridgeCore(cumemtrace_torch_emit_fn emit, void* context, ReadCounters read,
             SmallBlock small_block = SmallBlock{}, Ops ops = Ops{})
      : emit_(emit),
        context_(context),
        read_(std::move(read)),
        small_block_(std::move(small_block)),
        ops_(std::move(ops)) {}

  template <typename Entry>
  void OnEntry(const Entry& entry) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    // A completed free changes no figure: allocated_bytes shrank at FREE_REQUESTED, and the
    // cumulative counter a block's size is read from never moves on a free. Skipped before
    // it is numbered or costs a counter read, it leaves a third of the entries of a loop of
    // small tensors (alloc, free requested, free completed) unsent.
    if (entry.action_ == Entry::FREE_COMPLETED) return;
    cumemtrace_torch_event event;
    if (!ConvertEntry(entry, &event)) return;
    event.tsc = EntryTsc<kTimeIsTsc>(entry);
    Slot& slot = slots_[event.device];
    // A probe that reads the counters and then sees this number unchanged knows no event
    // ran in between. The device's lock orders it: this runs under the lock and the probe's
    // counter read takes it, so the store needs no fence of its own (a seq_cst store is a
    // locked instruction, which waits for every store the program has in flight).
    event.sequence = slot.sequence.load(std::memory_order_relaxed) + 1;
    slot.sequence.store(event.sequence, std::memory_order_relaxed);
    if (event.action == CUMEMTRACE_TORCH_ALLOC && small_block_(event.requested_bytes) != 0) {
      // Sized without counters (see the file comment). A counted ALLOC before it may still
      // wait for a probe, which this asks for too: its counters check the rounded blocks.
      event.action = CUMEMTRACE_TORCH_ALLOC_ROUNDED;
      slot.unsettled_alloc.store(event.sequence, std::memory_order_release);
    } else if (event.action != CUMEMTRACE_TORCH_FREE_REQUESTED) {
      // A free carries no counters (all zero): see the file comment.
      DeviceCounters counters;
      if (read_(event.device, &counters)) {
        event.allocated_bytes_total = counters.allocated_total;
        event.allocated_bytes_current = counters.allocated_current;
        event.reserved_bytes_current = counters.reserved_current;
      }
      slot.unsettled_alloc.store(event.action == CUMEMTRACE_TORCH_ALLOC ? event.sequence : 0,
                                 std::memory_order_release);
    }
    if (event.action == CUMEMTRACE_TORCH_ALLOC || event.action == CUMEMTRACE_TORCH_ALLOC_ROUNDED) {
      ops_(&event);
    }
    emit_(&event, context_);
  }

  // Settles the size of each device's last counted ALLOC when no event with counters
  // followed it, and checks the rounded ones since (see the file comment).
  void Probe() {
    if (stopped_.load(std::memory_order_relaxed)) return;
    for (uint32_t device = 0; device < kMaxDevices; ++device) {
      Slot& slot = slots_[device];
      const uint64_t alloc = slot.unsettled_alloc.load(std::memory_order_acquire);
      if (alloc == 0 || alloc == slot.probed_alloc) continue;
      const uint64_t before = slot.sequence.load(std::memory_order_relaxed);
      DeviceCounters counters;
      // Takes the device's lock: every event up to `before` has finished its update, and
      // every event that finished before the read is seen by the load after it.
      if (!read_(device, &counters)) continue;
      if (slot.sequence.load(std::memory_order_relaxed) != before) continue;  // one slipped in
      cumemtrace_torch_event event{};
      event.action = CUMEMTRACE_TORCH_STATS_PROBE;
      event.device = device;
      event.sequence = before;
      event.allocated_bytes_total = counters.allocated_total;
      event.allocated_bytes_current = counters.allocated_current;
      event.reserved_bytes_current = counters.reserved_current;
      // A probe the tracer had no room for is read and sent again at the next call: it is
      // what settles this ALLOC when only frees follow.
      if (emit_(&event, context_) != 0) slot.probed_alloc = alloc;
    }
  }

  // An event that is not the allocator's (CUMEMTRACE_TORCH_AUTOGRAD_NODE), from any thread
  // under no lock: passed on as it is. It takes no device's sequence number and leaves the
  // probe's state alone: the device's last event is still what it was.
  void EmitOther(const cumemtrace_torch_event& event) {
    if (stopped_.load(std::memory_order_relaxed)) return;
    emit_(&event, context_);
  }

  void Stop() { stopped_.store(true); }

 private:
  struct Slot {
    std::atomic<uint64_t> sequence{0};
    // The sequence of the last ALLOC (counted or rounded) when no event with counters came
    // after it, else 0.
    std::atomic<uint64_t> unsettled_alloc{0};
    uint64_t probed_alloc = 0;  // sender thread only: the ALLOC whose probe the tracer took
  };

  cumemtrace_torch_emit_fn emit_;
  void* context_;
  ReadCounters read_;
  SmallBlock small_block_;
  Ops ops_;
  std::atomic<bool> stopped_{false};
  Slot slots_[kMaxDevices];
};

}  // namespace cumemtrace::torch_bridge
