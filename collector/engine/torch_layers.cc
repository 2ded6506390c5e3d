#include "collector/engine/torch_layers.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace cumemtrace::internal {
namespace {

// Interned ids the analysis gives the tensors' API and caller (the tracer counts its own
// ids up from 1; phase inference takes 0xFFFFFFF0 and up, phase_inference.cc).
constexpr uint32_t kTorchApiId = 0xFFFFFFE0u;
constexpr uint32_t kTorchCallerId = 0xFFFFFFE1u;
constexpr uint32_t kTorchOomErrorId = 0xFFFFFFE2u;
constexpr int32_t kOutOfMemoryCode = 2;  // as CUDA_ERROR_OUT_OF_MEMORY, failed_allocations.cc
constexpr uint64_t kMinBlockBytes = 512;  // the caching allocator's smallest block

void NameTensorOrigin(DecodedStream& s) {
  if (s.strings.count(kTorchApiId) != 0) return;
  s.strings[kTorchApiId] = "PyTorch caching allocator";
  const std::string library = BaseName(s.torch.report.library);
  s.strings[kTorchCallerId] = library.empty() ? std::string("libc10_cuda.so") : library;
}

// The caching allocator's smallest rounding: `bytes` up to a multiple of 512, at least 512.
uint64_t RoundedTo512(uint64_t bytes) {
  if (bytes > UINT64_MAX - kMinBlockBytes) return bytes;
  return std::max(kMinBlockBytes, (bytes + kMinBlockBytes - 1) / kMinBlockBytes * kMinBlockBytes);
}

// A tensor allocation or release, as the sweep takes the driver's.
Event TensorEvent(EventType type, uint64_t timestamp_ns, uint32_t device, uint64_t address,
                  uint64_t bytes, uint32_t thread_id) {
  Event e{};
  e.timestamp_ns = timestamp_ns;
  e.type = type;
  e.a = address;
  e.b = bytes;
  e.thread_id = thread_id;
  e.name_id = kTorchApiId;
  e.device = device;
  e.kind = kTorchAllocatedKind;
  return e;
}

// Ends a live block: the release at `timestamp_ns` and its bytes off the device's total.
// False when the block is not live (a free of a block never seen allocated).
bool ReleaseBlock(DecodedStream& s, TorchDeviceDecode& d, uint32_t device, uint64_t address,
                  uint64_t timestamp_ns, uint32_t thread_id) {
  auto it = d.live.find(address);
  if (it == d.live.end()) return false;
  s.events.push_back(
      TensorEvent(EventType::kRelease, timestamp_ns, device, address, it->second, thread_id));
  if (d.pending.set) d.pending.released_since += it->second;
  d.allocated -= it->second;
  d.live.erase(it);
  return true;
}

// Appends a tensor's allocation to the sweep.
void PushAllocation(DecodedStream& s, uint32_t device, uint64_t timestamp_ns, uint64_t address,
                    uint64_t bytes, uint32_t thread_id, uint32_t stack_id, uint32_t attribution) {
  NameTensorOrigin(s);
  Event e = TensorEvent(EventType::kAllocate, timestamp_ns, device, address, bytes, thread_id);
  e.caller_id = kTorchCallerId;
  e.stack_id = stack_id;
  e.aux_id = attribution;
  s.events.push_back(e);
  ++s.torch.report.blocks;
}

// Appends a tensor's allocation and makes its block live.
void AppendBlock(DecodedStream& s, TorchDeviceDecode& d, uint32_t device, uint64_t timestamp_ns,
                 uint64_t address, uint64_t bytes, uint32_t thread_id, uint32_t stack_id,
                 uint32_t attribution) {
  PushAllocation(s, device, timestamp_ns, address, bytes, thread_id, stack_id, attribution);
  if (!d.live.emplace(address, bytes).second) {
    ++s.torch.report.counter_mismatches;  // a block live twice: an event was lost
  } else {
    d.allocated += bytes;
  }
}

// Gives the pending ALLOC its block and appends the allocation. `exact`: the counters were
// read after the ALLOC's own increase and before any other.
void Settle(DecodedStream& s, uint32_t device, TorchDeviceDecode& d, bool exact,
            uint64_t allocated_total, uint64_t allocated_current) {
  if (!d.pending.set) return;
  const TorchPendingAlloc& a = d.pending;
  const uint64_t floor = std::max<uint64_t>(a.requested, 1);
  // What each counter grew by since the ALLOC's reading, less the rounded blocks allocated
  // since (in it too); 0 where it did not grow. The current counter also fell by the blocks
  // freed since.
  const uint64_t total_from = a.allocated_total + a.rounded_since;
  const uint64_t total_grown = allocated_total >= total_from ? allocated_total - total_from : 0;
  const uint64_t current_from = a.allocated_current + a.rounded_since;
  const uint64_t current_after = allocated_current + a.released_since;
  const uint64_t current_grown = current_after >= current_from ? current_after - current_from : 0;
  uint64_t bytes = 0;
  if (exact && total_grown >= floor) {
    bytes = total_grown;
  } else if (exact && a.current_usable && !a.freed && current_grown >= floor) {
    // torch.cuda.reset_accumulated_memory_stats() zeroed the cumulative counter in
    // between; the current one is never reset. A block freed since would cancel itself out
    // of it, so that case stays an estimate.
    bytes = current_grown;
  } else {
    // No later event, or the program reset the cumulative counter and freed the block.
    bytes = RoundedTo512(floor);
    ++s.torch.report.estimated_block_sizes;
  }
  if (!a.freed) {
    AppendBlock(s, d, device, a.timestamp_ns, a.address, bytes, a.thread_id, a.stack_id,
                a.attribution);
  } else {
    // Freed before anything settled its size (AddTorchAllocatorEvent): a rounded ALLOC may
    // hold its address already, so the pair goes to the sweep without the live blocks.
    PushAllocation(s, device, a.timestamp_ns, a.address, bytes, a.thread_id, a.stack_id,
                   a.attribution);
    s.events.push_back(TensorEvent(EventType::kRelease, a.free_timestamp_ns, device, a.address,
                                   bytes, a.free_thread_id));
  }
  d.pending.set = false;
}

// A backward birth takes its forward allocation's operators, stack and, when it has none,
// module.
void Link(BirthAttribution& b, const AttributionDecode::ForwardOp& forward) {
  b.linked = true;
  b.forward_op = forward.op;
  b.forward_inner_op = forward.inner_op;
  b.forward_stack = forward.stack;
  if ((b.module == 0 || b.module_from_earlier) && forward.module != 0) {
    b.module = forward.module;
    b.module_inherited = true;
    b.module_from_earlier = false;
  }
}

// The first forward op of an (autograd thread, sequence): a forward ALLOC, or an autograd
// node of an op that allocated nothing. Links the backward births waiting for it.
void AddForwardOp(AttributionDecode& a, const std::pair<uint32_t, uint64_t>& link,
                  const AttributionDecode::ForwardOp& forward) {
  if (!a.forward.try_emplace(link, forward).second) return;
  const auto [first, last] = a.pending.equal_range(link);
  for (auto waiting = first; waiting != last; ++waiting) Link(a.births[waiting->second], forward);
  a.pending.erase(first, last);
}

// A free reads no counters since the tracer stopped reading them there (all zero then), nor
// does a rounded ALLOC; every other event has them. The cumulative counter is never 0 at a free
// that read it unless the program reset the allocator's statistics: that free then goes unchecked.
bool HasCounters(const v1::TorchAllocatorEvent& t) {
  if (t.action() == v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED) return false;
  return t.action() != v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED || t.allocated_bytes_total() != 0;
}

// A backward birth with no forward allocation to link to (yet): the guess of its module, and
// a place in `pending` if its forward allocation may still come. True when it now waits there
// (births[index] is its own entry).
bool WaitForForward(AttributionDecode& a, const std::pair<uint32_t, uint64_t>& link,
                    BirthAttribution& b, uint32_t* index) {
  // A forward op that allocated nothing (a view) has no allocation to link to: the module of
  // the thread's forward op just before it is the best guess, said as such; its own comes in
  // place of the guess if its allocation arrives later. Within a few nodes: a view's node
  // follows the op whose output it views.
  constexpr uint64_t kNearby = 16;
  auto earlier = a.forward.lower_bound(link);
  if (b.module == 0 && earlier != a.forward.begin()) {
    const auto& [key, forward] = *std::prev(earlier);
    if (key.first == link.first && link.second - key.second <= kNearby && forward.module != 0) {
      b.module = forward.module;
      b.module_from_earlier = true;
    }
  }
  b.waiting_thread = link.first;
  b.waiting_sequence = link.second;
  // A node's allocations often come together (a backward node that allocates several): one
  // entry waits for each distinct attribution among them, and they share it.
  const auto [first, last] = a.pending.equal_range(link);
  for (auto waiting = first; waiting != last; ++waiting) {
    if (a.births[waiting->second].Key() == b.Key()) {
      *index = waiting->second;
      return true;
    }
  }
  if (a.pending.size() >= AttributionDecode::kMaxPending) {
    b.waiting_thread = 0;
    b.waiting_sequence = 0;
    return false;
  }
  *index = static_cast<uint32_t>(a.births.size());
  a.births.push_back(b);
  a.pending.emplace(link, *index);
  return true;
}

// The attribution of an ALLOC: its index among the stream's distinct attributions, with the
// backward link made (the first forward allocation of the same autograd thread and
// sequence). A backward allocation may arrive before its forward op's (two threads' events
// are drained in turn): it waits in `pending`, and the forward allocation links it in place.
uint32_t AttributionOf(DecodedStream& s, const v1::TorchAllocatorEvent& t) {
  const uint64_t sequence = t.autograd_sequence();
  if (t.module_id() == 0 && t.operator_id() == 0 && t.inner_operator_id() == 0 && sequence == 0 &&
      !t.backward()) {
    return 0;
  }
  AttributionDecode& a = s.attribution;
  a.seen = true;
  BirthAttribution b;
  b.module = t.module_id();
  b.op = t.operator_id();
  b.inner_op = t.inner_operator_id();
  b.backward = t.backward();
  const std::pair<uint32_t, uint64_t> link{t.autograd_thread(), sequence};
  if (sequence != 0 && !b.backward) {
    AddForwardOp(a, link, {b.op, b.inner_op, b.module, t.stack_id()});
  } else if (sequence != 0) {
    if (auto it = a.forward.find(link); it != a.forward.end()) {
      Link(b, it->second);
    } else if (uint32_t index = 0; WaitForForward(a, link, b, &index)) {
      return index;
    }
  }
  auto [it, inserted] = a.index.try_emplace(b.Key(), static_cast<uint32_t>(a.births.size()));
  if (inserted) a.births.push_back(b);
  return it->second;
}

}  // namespace

void AddAttributionName(DecodedStream& s, const v1::AttributionName& name) {
  if (name.id() == 0 || (name.kind() != v1::ATTRIBUTION_KIND_MODULE &&
                         name.kind() != v1::ATTRIBUTION_KIND_OPERATOR)) {
    return;  // no id, or a kind this reader does not know
  }
  s.attribution.seen = true;
  // Ids are never reused: a repeated definition (a name sent again) keeps the first.
  s.attribution.names.try_emplace({static_cast<uint32_t>(name.kind()), name.id()}, name.name());
}

void AddTorchAutogradNode(DecodedStream& s, const v1::TorchAutogradNode& node) {
  // Not an allocator event: no device's order, count or counters; only the backward link.
  if (node.autograd_sequence() == 0) return;
  AttributionDecode& a = s.attribution;
  a.seen = true;
  AddForwardOp(a, {node.autograd_thread(), node.autograd_sequence()},
               {node.operator_id(), node.inner_operator_id(), node.module_id(), node.stack_id()});
}

void AddTorchBridgeState(DecodedStream& s, const v1::TorchBridgeState& state) {
  TorchBridgeReport& r = s.torch.report;
  r.seen = true;
  r.attached = r.attached || state.attached();
  if (!state.torch_version().empty()) r.torch_version = state.torch_version();
  if (!state.bridge_torch_version().empty()) r.bridge_torch_version = state.bridge_torch_version();
  if (!state.library().empty()) r.library = state.library();
  if (!state.allocator().empty()) r.allocator = state.allocator();
  if (!state.attached()) r.reason = state.reason();
}

namespace {

// Events a device may hold back waiting for one that never comes (lost): beyond this, the
// earliest are taken as they are, the gap counted as lost events.
constexpr size_t kReorderWindow = 1 << 16;

bool InOrder(const TorchDeviceDecode& d, uint64_t sequence, bool probe) {
  // A probe follows the event whose sequence it carries; an event follows the one before.
  return probe ? sequence <= d.last_sequence : sequence <= d.last_sequence + 1;
}

void ApplyTorchEvent(DecodedStream& s, TorchDeviceDecode& d, uint64_t timestamp_ns,
                     const v1::TorchAllocatorEvent& t);

// Applies the waiting events that are now in order (all of them with `all`, at the end).
void ReleaseWaiting(DecodedStream& s, TorchDeviceDecode& d, bool all) {
  while (!d.waiting.empty()) {
    auto first = d.waiting.begin();
    const bool probe = first->first.second == 1;
    if (!all && !InOrder(d, first->first.first, probe) && d.waiting.size() <= kReorderWindow) {
      return;
    }
    auto node = d.waiting.extract(first);
    ApplyTorchEvent(s, d, node.mapped().timestamp_ns, node.mapped().event);
  }
}

}  // namespace

void AddTorchAllocatorEvent(DecodedStream& s, uint64_t timestamp_ns,
                            const v1::TorchAllocatorEvent& t) {
  // Never an allocator event (it travels as TorchAutogradNode): no device's number to take.
  if (t.action() == v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE) return;
  TorchDeviceDecode& d = s.torch.devices[t.device()];
  const bool probe = t.action() == v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE;
  if (d.waiting.empty() && InOrder(d, t.sequence(), probe)) {
    ApplyTorchEvent(s, d, timestamp_ns, t);
    return;
  }
  d.waiting.emplace(std::make_pair(t.sequence(), probe ? 1 : 0),
                    WaitingTorchEvent{timestamp_ns, t});
  ReleaseWaiting(s, d, /*all=*/false);
}

namespace {

// `d`: the decode of t.device(), looked up once by the caller.
void ApplyTorchEvent(DecodedStream& s, TorchDeviceDecode& d, uint64_t timestamp_ns,
                     const v1::TorchAllocatorEvent& t) {
  TorchBridgeReport& r = s.torch.report;
  if (t.action() == v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE) {
    // Counters read after event `sequence` and before the next: they settle the pending
    // ALLOC if it came at or before that event with none lost since. Every event numbered
    // up to the probe's is in the stream before it, unless it was lost.
    if (t.sequence() > d.last_sequence && d.pending.set) d.pending.gap = true;
    // The probe is sent outside the device's lock, so a later event can come before it: a
    // rounded block then counted in rounded_since is not in the probe's counters (it waits
    // for the next counted event), nor is a free counted in released_since.
    if (t.sequence() < d.last_sequence) d.pending.current_usable = false;
    if (d.pending.set && d.pending.sequence <= t.sequence() && !d.pending.gap &&
        d.pending.rounded_last_sequence <= t.sequence()) {
      Settle(s, t.device(), d, /*exact=*/true, t.allocated_bytes_total(),
             t.allocated_bytes_current());
    }
    // With nothing pending and no event since, the rebuilt blocks are the allocator's: the
    // check of the rounded ones where no counted event comes.
    if (!d.pending.set && t.sequence() == d.last_sequence &&
        t.allocated_bytes_current() != d.allocated) {
      ++r.counter_mismatches;
    }
    return;
  }
  ++r.events;
  const bool lost = t.sequence() > d.last_sequence + 1;
  if (lost) r.lost_events += t.sequence() - d.last_sequence - 1;
  d.last_sequence = std::max(d.last_sequence, t.sequence());
  if (t.action() == v1::TORCH_ALLOCATOR_ACTION_ALLOC ||
      t.action() == v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED ||
      t.action() == v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED) {
    s.torch.released_since_block_event[t.device()] = 0;
  }
  // Any later event with counters saw the pending ALLOC's increase and no other (frees never
  // move the cumulative counter); exact unless an event in between was lost, which may
  // have been an ALLOC.
  if (d.pending.set && t.sequence() > d.pending.sequence) {
    d.pending.gap = d.pending.gap || lost;
    if (HasCounters(t)) {
      // A free that read counters (older tracers) read them after its own decrease.
      uint64_t current = t.allocated_bytes_current();
      if (t.action() == v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED) {
        if (auto it = d.live.find(t.address()); it != d.live.end()) current += it->second;
      }
      Settle(s, t.device(), d, /*exact=*/!d.pending.gap, t.allocated_bytes_total(), current);
    }
  }

  switch (t.action()) {
    case v1::TORCH_ALLOCATOR_ACTION_ALLOC: {
      // The allocator's counter before this ALLOC's increase.
      const bool agreed = t.allocated_bytes_current() == d.allocated;
      if (!agreed) ++r.counter_mismatches;
      // A fresh record (no event lost since, not freed), each field by name: most are
      // uint64_t, which a positional list would let a swap through.
      d.pending = TorchPendingAlloc{};
      d.pending.set = true;
      d.pending.timestamp_ns = timestamp_ns;
      d.pending.address = t.address();
      d.pending.requested = t.requested_bytes();
      d.pending.sequence = t.sequence();
      d.pending.allocated_total = t.allocated_bytes_total();
      d.pending.allocated_current = t.allocated_bytes_current();
      d.pending.current_usable = agreed;
      d.pending.thread_id = t.thread_id();
      d.pending.stack_id = t.stack_id();
      d.pending.attribution = AttributionOf(s, t);
      return;
    }
    case v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED: {
      // The block is known; later counters include it (allocated_bytes grows right after).
      const uint64_t bytes = RoundedTo512(t.requested_bytes());
      if (d.pending.set) {
        d.pending.rounded_since += bytes;
        d.pending.rounded_last_sequence = t.sequence();
      }
      AppendBlock(s, d, t.device(), timestamp_ns, t.address(), bytes, t.thread_id(), t.stack_id(),
                  AttributionOf(s, t));
      ++r.rounded_blocks;
      return;
    }
    case v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED: {
      // The pending block itself, freed before an event with counters came: its release
      // waits for its size (the events are put in time order after decoding).
      if (d.pending.set && !d.pending.freed && d.pending.address == t.address() &&
          !HasCounters(t)) {
        d.pending.freed = true;
        d.pending.free_timestamp_ns = timestamp_ns;
        d.pending.free_thread_id = t.thread_id();
        return;
      }
      // allocated_bytes shrinks here, not when the free completes (after other streams).
      if (!ReleaseBlock(s, d, t.device(), t.address(), timestamp_ns, t.thread_id())) {
        ++r.unknown_frees;
        d.pending.current_usable = false;  // the allocator's counter fell by bytes unknown
        return;
      }
      if (HasCounters(t) && t.allocated_bytes_current() != d.allocated) {
        ++r.counter_mismatches;  // after it
      }
      return;
    }
    case v1::TORCH_ALLOCATOR_ACTION_OOM: {
      ++r.out_of_memory;
      // A failed allocation of its own, with what the post-mortem needs (oom.h).
      NameTensorOrigin(s);
      s.strings.try_emplace(kTorchOomErrorId, "OutOfMemoryError");
      TorchOomRecord record;
      record.stream = t.stream();
      record.pool_first = t.pool_id_first();
      record.pool_second = t.pool_id_second();
      record.segment_events = s.torch.segment_log.size();
      record.released_before_bytes = s.torch.released_since_block_event[t.device()];
      Event e{};
      e.timestamp_ns = timestamp_ns;
      e.type = EventType::kFailedAllocation;
      e.a = t.requested_bytes();  // the request rounded as the allocator looked for it
      e.b = t.address();          // the device's free bytes
      e.c = s.torch.ooms.size();
      e.code = kOutOfMemoryCode;
      e.name_id = kTorchApiId;
      e.aux_id = kTorchOomErrorId;
      e.caller_id = kTorchCallerId;
      e.device = t.device();
      e.thread_id = t.thread_id();
      e.kind = kTorchAllocatedKind;
      s.events.push_back(e);
      s.torch.ooms.push_back(record);
      return;
    }
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_ALLOC:
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_FREE:
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_MAP:
    case v1::TORCH_ALLOCATOR_ACTION_SEGMENT_UNMAP: {
      // The driver's records count the memory; the post-mortem needs the pools and streams.
      TorchSegmentEvent g;
      g.timestamp_ns = timestamp_ns;
      g.address = t.address();
      g.bytes = t.requested_bytes();
      g.stream = t.stream();
      g.pool_first = t.pool_id_first();
      g.pool_second = t.pool_id_second();
      g.device = t.device();
      g.thread_id = t.thread_id();
      g.action = static_cast<uint8_t>(t.action());
      s.torch.segment_log.push_back(g);
      if (t.action() == v1::TORCH_ALLOCATOR_ACTION_SEGMENT_FREE ||
          t.action() == v1::TORCH_ALLOCATOR_ACTION_SEGMENT_UNMAP) {
        s.torch.released_since_block_event[t.device()] += t.requested_bytes();
      }
      return;
    }
    default:
      return;  // completed frees change no figure
  }
}

}  // namespace

void RetagTorchSegments(DecodedStream& s, size_t first) {
  if (!s.torch.report.attached) return;
  for (size_t i = first; i < s.events.size(); ++i) {
    Event& e = s.events[i];
    if (e.kind != 3) continue;  // DEVICE
    if (e.type == EventType::kAllocate) {
      if (e.caller_id == 0) continue;
      auto [it, inserted] = s.torch.allocator_callers.try_emplace(e.caller_id, false);
      if (inserted) it->second = BaseName(s.Resolve(e.caller_id)).rfind("libc10_cuda", 0) == 0;
      if (!it->second) continue;
      e.kind = kTorchReservedKind;
      s.torch.segments.insert(AddressKey(e.device, e.a));
    } else if (e.type == EventType::kRelease) {
      if (s.torch.segments.erase(AddressKey(e.device, e.a)) != 0) e.kind = kTorchReservedKind;
    }
  }
}

void FlushTorchAllocations(DecodedStream& s) {
  for (auto& [device, d] : s.torch.devices) ReleaseWaiting(s, d, /*all=*/true);
  for (auto& [device, d] : s.torch.devices) Settle(s, device, d, /*exact=*/false, 0, 0);
}

}  // namespace cumemtrace::internal
